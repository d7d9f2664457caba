# lit configuration for ditron: `lit test/lit` (make test runs it).
import os
import sys

import lit.formats

config.name = "ditron"
config.test_format = lit.formats.ShTest(execute_external=False)  # lit 23: execute_external=True raises
config.suffixes = [".mlir", ".py"]
config.excludes = ["lit.cfg.py", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, "Output")

# ditron-opt, filecheck and python come from the environment running lit (the project's .venv).
bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([bin_dir, config.environment.get("PATH", os.environ.get("PATH", ""))])
config.substitutions.append(("%PYTHON", sys.executable))
config.substitutions.append(("FileCheck", "filecheck"))
for var in ("HOME", "DITRON_CACHE_DIR", "TRITON_CACHE_DIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
# the tests' tilings are the model's: a tuning cache of this machine (ditron tune) must not change them; tests of
# the cache name their file with ditron-tile{tuning-cache=...}
config.environment["DITRON_TUNING_CACHE"] = "off"

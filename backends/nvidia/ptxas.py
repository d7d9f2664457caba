"""What ptxas says of a kernel's PTX (``ptxas_info``): registers a thread, spill stores and loads, and whether it
serialized the wgmmas. Triton reports n_regs / n_spills only once a kernel is loaded on a GPU; ptxas -v tells the
same on a machine without one, which makes "no spills" a property the CPU tests check (test_fp8_speed.py)."""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass


@dataclass(frozen=True)
class PtxasInfo:
    registers: int
    spill_stores: int        # bytes
    spill_loads: int         # bytes
    serialized_wgmma: bool   # ptxas C7514: "wgmma.mma_async instructions are serialized" (a performance loss)
    log: str


def ptxas_info(ptx: str, arch: int = 90) -> PtxasInfo:
    """Assemble ``ptx`` for sm_<arch> (sm_90a from 90 on) with Triton's own ptxas, -v, and read its report."""
    from triton.backends.nvidia.compiler import get_ptxas
    gpu = f"sm_{arch}a" if arch >= 90 else f"sm_{arch}"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        run = subprocess.run([get_ptxas(arch).path, "-v", f"--gpu-name={gpu}", src, "-o", src + ".o"],
                             capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"ptxas failed for {gpu}:\n{run.stderr}")
    log = run.stderr
    regs = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if regs is None or spills is None:
        raise RuntimeError(f"ptxas -v gave no register report for {gpu}:\n{log}")
    return PtxasInfo(int(regs.group(1)), int(spills.group(1)), int(spills.group(2)), "C7514" in log, log)

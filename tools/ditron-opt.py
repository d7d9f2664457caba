#!/usr/bin/env python3
"""ditron-opt, runnable from a checkout: tools/ditron-opt.py FILE --pass-pipeline=... (same as the console script)."""
from ditron.tools.ditron_opt import main

if __name__ == "__main__":
    main()

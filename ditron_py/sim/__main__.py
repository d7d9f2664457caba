"""python -m ditron.sim FILE.mlir ...: see ditron.sim.command."""
from .command import main

raise SystemExit(main())

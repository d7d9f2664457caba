"""ditron.kernels: core kernel templates, generated as IR (never as Python source).

Each template builds one ``tt.func`` (generic-form TTIR plus ditron_core primitives) into a module, and records
what it computes in the function attribute ``ditron.kernel`` (a dictionary): the template name and every
parameter the simulator and the host program need. ``ditron.sim`` executes a launch of such a kernel at tile
granularity from that record alone, so the record must describe the kernel completely.
"""

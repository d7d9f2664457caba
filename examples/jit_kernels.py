"""A small @ditron.jit kernel launched from ditron.device programs (test/py/test_device_builder*.py): it waits
in-kernel until slot 0 of its pad holds the epoch (acquire), then writes 2 * x into y."""
import triton.language as tl

import ditron
import ditron.language as dl

SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "pad_ptr": "*i32", "n": "i32", "epoch": "i32"}


@ditron.jit
def scale_after_wait(x_ptr, y_ptr, pad_ptr, n, epoch, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    token = dl.wait(pad_ptr, 0, epoch)
    for start in range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(dl.consume_token(x_ptr, token) + offs, mask=mask)
        tl.store(y_ptr + offs, x * 2, mask=mask)

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


def scale_program(W: int, n: int = 1000, *, grid: int = 4, block: int = 256, copy_stream: int = 0,
                  signal: bool = True):
    """A device program around it: rank r pushes x into g on rank r + 1 (on ``copy_stream``) and sets slot 0 of
    its pad there; the kernel, launched on stream 0, waits for it in-kernel and writes y = 2 * g. ``signal=False``
    plants a missing signal: every kernel's wait times out."""
    import ditron.device as dd
    p = dd.Program("jit_scale" if signal else "jit_stuck", W)
    x = p.input("x", (n,), "f32")
    y = p.output("y", (n,), "f32")
    g = p.symmetric("g", (n,), "f32")
    ready = p.signal_pad("ready", 1)
    nxt = (p.rank + 1) % p.num_ranks
    p.copy(x, g, dst_rank=nxt, stream=copy_stream)
    if signal:
        p.signal(ready, rank=nxt, slot=0, stream=copy_stream)
    k = p.jit(scale_after_wait, signature=SIGNATURE, constexprs={"BLOCK": block},
              wait={"arg": "pad_ptr", "value_arg": "epoch"})
    p.launch(k, [g, y, ready, n, p.epoch], grid=grid, stream=0)
    p.barrier()
    return p

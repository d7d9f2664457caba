"""A kernel program registered for the lit tests of ditron_task.custom (ditron-opt / ditron sim --load): an
all-gather of row shards by copy-engine pushes into every rank's symmetric buffer, a signal per push, a wait for
every rank's, a local copy out; then the end barrier."""
import ditron
import ditron.device as dd
import ditron.frontend as dt


def build(W, shapes, dtype, *, sm_budget, target):
    (n, k), = shapes
    p = dd.Program("push_gather", W, target=target)
    x = p.input("x", (n, k), dtype)
    y = p.output("y", (W * n, k), dtype)
    g = p.symmetric("g", (W * n, k), dtype)
    ready = p.signal_pad("ready", W)
    with p.loop(0, p.num_ranks) as d:
        q = (p.rank + d) % p.num_ranks
        p.copy(x, g, dst_rank=q, dst_offsets=(p.rank * n, 0), stream=1)
        p.signal(ready, rank=q, slot=p.rank, stream=1)
    p.wait(ready, list(range(W)), stream=0)
    p.copy(g, y, stream=0)
    p.barrier()
    return p


ditron.register_op("push_gather", build, inputs=[dt.shard(0, "tp")], outputs=[dt.replicated],
                   reference=lambda x: x)

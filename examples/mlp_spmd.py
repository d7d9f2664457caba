"""The Megatron MLP written directly in the local (SPMD) view, with explicit collectives: what ditron-partition
makes of examples/mlp.py. Shapes in dt.Tensor[...] are global; inside, each value has its rank-local shape.

    python examples/mlp_spmd.py [PIPELINE]
"""
import sys

import ditron.frontend as dt


def program(W: int = 4, M: int = 8192, H: int = 4096, F: int = 14336, dtype: str = "bf16") -> dt.Program:
    rows, cols = dt.shard(0, "tp"), dt.shard(1, "tp")

    @dt.program(dt.Mesh(tp=W), view="local")
    def mlp(x: dt.Tensor[(M, H), dtype, rows],
            w1: dt.Tensor[(H, F), dtype, cols],
            w2: dt.Tensor[(F, H), dtype, rows]) -> dt.Sharded[rows]:
        x_full = dt.all_gather(x, dim=0, axis="tp")          # [M, H] on every rank
        h = dt.gelu(x_full @ w1)                             # [M, F / W]
        return dt.reduce_scatter(h @ w2, dim=0, axis="tp")   # partial [M, H] -> [M / W, H]

    return mlp


if __name__ == "__main__":
    print(program().to_mlir(sys.argv[1] if len(sys.argv) > 1 else ""))

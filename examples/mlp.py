"""A Megatron-style MLP block in the global view (the Python form of examples/mlp.mlir).

x's rows are sharded over the tensor-parallel axis, W1 is column-sharded, W2 row-sharded; the output is row-sharded
again. ditron-partition turns it into all_gather + matmul, gelu, matmul + reduce_scatter.

    python examples/mlp.py                        # the global-view IR
    python examples/mlp.py ditron-partition       # ... after a pass pipeline
"""
import sys

import ditron.frontend as dt


def program(W: int = 4, M: int = 8192, H: int = 4096, F: int = 14336, dtype: str = "bf16",
            padded: bool = False) -> dt.Program:
    """The MLP y = gelu(x @ W1) @ W2 with x [M, H], W1 [H, F], W2 [F, H] on a W-way tp mesh."""
    rows, cols = dt.shard(0, "tp", padded=padded), dt.shard(1, "tp", padded=padded)

    @dt.program(dt.Mesh(tp=W))
    def mlp(x: dt.Tensor[(M, H), dtype, rows],
            w1: dt.Tensor[(H, F), dtype, cols],
            w2: dt.Tensor[(F, H), dtype, rows]) -> dt.Sharded[rows]:
        return dt.gelu(x @ w1) @ w2

    return mlp


if __name__ == "__main__":
    print(program().to_mlir(sys.argv[1] if len(sys.argv) > 1 else ""))

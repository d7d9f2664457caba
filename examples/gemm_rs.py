"""GEMM + RS in the global view: x is column-sharded (K), W row-sharded (K), the result row-sharded.
The contraction over the sharded K leaves partial sums; ditron-partition resolves them with reduce_scatter over
the rows; ditron-fuse-overlap marks the pair "matmul_rs".

    python examples/gemm_rs.py [PIPELINE]
"""
import sys

import ditron.frontend as dt


def program(W: int = 4, M: int = 8192, K: int = 14336, N: int = 4096, dtype: str = "bf16") -> dt.Program:
    """y[M, N] = x[M, K] @ w[K, N] with K sharded over a W-way tp mesh and y's rows sharded."""
    @dt.program(dt.Mesh(tp=W))
    def gemm_rs(x: dt.Tensor[(M, K), dtype, dt.shard(1, "tp")],
                w: dt.Tensor[(K, N), dtype, dt.shard(0, "tp")]) -> dt.Sharded[dt.shard(0, "tp")]:
        return x @ w

    return gemm_rs


if __name__ == "__main__":
    print(program().to_mlir(sys.argv[1] if len(sys.argv) > 1 else ""))

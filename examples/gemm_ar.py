"""GEMM + AR in the global view: x is column-sharded (K), W row-sharded (K), the result replicated.
The partial sums are resolved with all_reduce; ditron-fuse-overlap marks the pair "matmul_ar".

    python examples/gemm_ar.py [PIPELINE]
"""
import sys

import ditron.frontend as dt


def program(W: int = 4, M: int = 8192, K: int = 14336, N: int = 4096, dtype: str = "bf16") -> dt.Program:
    """y[M, N] = x[M, K] @ w[K, N] with K sharded over a W-way tp mesh and y replicated."""
    @dt.program(dt.Mesh(tp=W))
    def gemm_ar(x: dt.Tensor[(M, K), dtype, dt.shard(1, "tp")],
                w: dt.Tensor[(K, N), dtype, dt.shard(0, "tp")]) -> dt.Sharded[dt.replicated]:
        return x @ w

    return gemm_ar


if __name__ == "__main__":
    print(program().to_mlir(sys.argv[1] if len(sys.argv) > 1 else ""))

"""AG + GEMM in the global view: x's rows are sharded, W is column-sharded, the result column-sharded.
ditron-partition makes it all_gather(x) + matmul; ditron-fuse-overlap marks the pair "ag_matmul".

    python examples/ag_gemm.py [PIPELINE]
"""
import sys

import ditron.frontend as dt


def program(W: int = 4, M: int = 8192, K: int = 4096, N: int = 14336, dtype: str = "bf16",
            padded: bool = False) -> dt.Program:
    """y[M, N] = x[M, K] @ w[K, N] with x rows-sharded and w column-sharded over a W-way tp mesh."""
    @dt.program(dt.Mesh(tp=W))
    def ag_gemm(x: dt.Tensor[(M, K), dtype, dt.shard(0, "tp", padded=padded)],
                w: dt.Tensor[(K, N), dtype, dt.shard(1, "tp")]) -> dt.Sharded[dt.shard(1, "tp")]:
        return x @ w

    return ag_gemm


if __name__ == "__main__":
    print(program().to_mlir(sys.argv[1] if len(sys.argv) > 1 else ""))

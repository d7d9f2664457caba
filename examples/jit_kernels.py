"""@ditron.jit kernels launched from ditron.device programs: ``ag_gemm_tiles``, the GEMM of examples/ag_gemm_user.py
with ``gemm="jit"`` (each tile waits for the chunks of its rows), and ``scale_after_wait``, a small kernel that waits
in-kernel until slot 0 of its pad holds the epoch (acquire), then writes 2 * x into y (test/py/test_device_builder*).

ditron.language (imported here) needs the compiler's MLIR bindings: a GPU box running prebuilt artifacts never
imports this module."""
import triton
import triton.language as tl

import ditron
import ditron.language as dl

SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "pad_ptr": "*i32", "n": "i32", "epoch": "i32"}



def gemm_tiling(M: int, N: int, K: int, dtype: str, target: str, sms: int | None = None):
    """The user GEMM's tiling (gemm="jit") for an M x N x K GEMM: the tile configuration ditron-tile's cost model
    picks for the same shape on the same SMs (``ditron.tiling.gemm_config``), as (constexprs, compile options)."""
    import ditron.tiling
    cfg = ditron.tiling.gemm_config(M, N, K, dtype, target, sms=sms)
    return ({"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "GROUP_M": cfg.group_m},
            {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages})


@triton.jit
def _tile_coords(tile, tiles_m, tiles_n, shift, GROUP_M: tl.constexpr):
    """Tile ``tile`` of the grouped order (GROUP_M rows of tiles at a time), its rows rotated by ``shift`` tiles:
    (pid_m, pid_n)."""
    group = tile // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    size_m = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = (first_m + (tile % (GROUP_M * tiles_n)) % size_m + shift) % tiles_m
    pid_n = (tile % (GROUP_M * tiles_n)) // size_m
    return pid_m, pid_n


@triton.jit
def _store_tile(c_ptr, acc, row0, col0, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """C[row0:row0 + BLOCK_M, col0:col0 + BLOCK_N] = acc, the rows and columns inside M x N."""
    offs_m = row0 + tl.arange(0, BLOCK_M)
    offs_n = col0 + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_m[:, None] * N + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@ditron.jit
def ag_gemm_tiles(a_ptr, b_ptr, c_ptr, ready_ptr, M, N, K, m, epoch, CHUNK: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    """C[M, N] = A[M, K] @ B[K, N], persistent over the tiles, each tile waiting for the chunks of its rows: rows
    [s * CHUNK, (s + 1) * CHUNK) of A are there once slot s of this rank's ready pad holds the epoch (acquire).
    Tiles in grouped order, rotated to start on this rank's own rows (m per rank: they are there first).

    Pointer loads, written so that Triton pipelines and vectorises them: no mask in the K loop where BLOCK_K
    divides K (``EVEN_K``; else only K's mask), rows past M clamped to row M - 1 (a row this tile waited for) and
    columns past N wrapped (``% N``: 16-element runs stay contiguous when N is a multiple of 16) instead of masked:
    what they read is never stored."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    shift = (dl.rank() * m) // BLOCK_M
    for tile in range(pid, tiles_m * tiles_n, programs):
        pid_m, pid_n = _tile_coords(tile, tiles_m, tiles_n, shift, GROUP_M)
        row0 = pid_m * BLOCK_M
        token = epoch
        for s in range(row0 // CHUNK, (tl.minimum(row0 + BLOCK_M, M) - 1) // CHUNK + 1):
            token = dl.wait(ready_ptr, s, epoch)
        rm = tl.minimum(row0 + tl.arange(0, BLOCK_M), M - 1)
        rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        rk = tl.arange(0, BLOCK_K)
        a_ptrs = dl.consume_token(a_ptr, token) + rm[:, None] * K + rk[None, :]
        b_ptrs = b_ptr + rk[:, None] * N + rn[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            if EVEN_K:
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
            else:
                a = tl.load(a_ptrs, mask=rk[None, :] < K - k0, other=0.0)
                b = tl.load(b_ptrs, mask=rk[:, None] < K - k0, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K * N
        _store_tile(c_ptr, acc, row0, pid_n * BLOCK_N, M, N, BLOCK_M, BLOCK_N)


@ditron.jit
def ag_gemm_tiles_tma(a_ptr, b_ptr, c_ptr, ready_ptr, M, N, K, m, epoch, CHUNK: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """``ag_gemm_tiles`` with TMA loads: A and B through tensor descriptors made in the kernel
    (``tl.make_tensor_descriptor``; rows of 16-byte multiples), which zero-fill what lies past M, N and K -- no
    masks, no clamps. The wait's token flows into the A loads through the tile's first row
    (``dl.consume_token(row0, token)``)."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    shift = (dl.rank() * m) // BLOCK_M
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    for tile in range(pid, tiles_m * tiles_n, programs):
        pid_m, pid_n = _tile_coords(tile, tiles_m, tiles_n, shift, GROUP_M)
        row0 = pid_m * BLOCK_M
        col0 = pid_n * BLOCK_N
        token = epoch
        for s in range(row0 // CHUNK, (tl.minimum(row0 + BLOCK_M, M) - 1) // CHUNK + 1):
            token = dl.wait(ready_ptr, s, epoch)
        row = dl.consume_token(row0, token)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([row, k * BLOCK_K])
            b = b_desc.load([k * BLOCK_K, col0])
            acc = tl.dot(a, b, acc)
        _store_tile(c_ptr, acc, row0, col0, M, N, BLOCK_M, BLOCK_N)


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
    if copy_stream != 0:
        # the copy stream starts after stream 0 reached this call, so after the previous call's barrier: else call
        # e + 1's copy overwrites the peer's g while its kernel of call e still reads it (ditron sim reports it)
        sync = p.signal_pad("sync", 1)
        p.signal(sync, slot=0, scope="gpu", stream=0)
        p.wait(sync, 0, stream=copy_stream)
    p.copy(x, g, dst_rank=nxt, stream=copy_stream)
    if signal:
        p.signal(ready, rank=nxt, slot=0, stream=copy_stream)
    k = p.jit(scale_after_wait, signature=SIGNATURE, constexprs={"BLOCK": block},
              wait={"arg": "pad_ptr", "value_arg": "epoch"})
    p.launch(k, [g, y, ready, n, p.epoch], grid=grid, stream=0)
    p.barrier()
    return p

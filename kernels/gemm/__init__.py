"""Tiled GEMM template: ``C[M,N] = A[M,K] @ B[K,N]`` (or ``A @ B^T`` with B stored ``[N,K]``), fp32 accumulation.

The package, by concern: record.py (the record: make_record, check, scratch, the shared predicates), configs.py
(choose_config, candidates, split_for: the tuning fields, from the target's vendor facts), geometry.py (grid,
tile orders, program tiles, stream-K pieces, signal slots), model.py (tiles(): the tile model the simulator runs)
and emit.py with its mixins emit_gather.py and emit_push.py (build(): the kernel's IR).

Record fields (``make_record`` fills defaults and checks them; ``choose_config`` picks the tuning fields):

    m, n, k                 problem size (static)
    lda, ldb, ldc           row strides in elements (default: contiguous; ldb is K when b_trans)
    in_dtype, out_dtype     'bf16' | 'fp16' | 'fp8e4m3' | 'fp8e5m2' inputs; 'bf16' | 'fp16' | 'fp32' output
    b_trans                 B given as [N, K] row-major
    block_m/n/k, group_m    tile shape; GROUP_M swizzle height
    num_warps, num_stages   compile options the config was chosen with
    persistent, num_sms     grid = min(num_sms, tiles) programs looping over tiles (else one program per tile)
    programs_per_sm (opt.)  2: a persistent grid of min(2 * num_sms, tiles) programs, two sharing each SM
                            (configs.programs_per_sm: precise fp8 128x128 tiles on one warp group, whose
                            partial-accumulator adds stall its wgmmas); absent or 1: one
    loads                   'tma' (device-side tensor descriptors, sm_90) | 'pointer' (masked tt.load; any GPU)
    store                   'tma' | 'pointer'; notify needs 'pointer' (a TMA store is asynchronous)
    epilogue_split          1 | 2: store the C tile in two column halves (less shared memory, a 4th stage fits)
    flatten                 let Triton flatten the persistent tile loop with the K loop (tt.flatten)
    split_k                 S > 1: S programs per tile over K slices (see below)
    m_split (optional)      2: the K loop runs the tile's rows as two dots of block_m / 2 rows sharing B's tile
                            (TMA loads), stacked into one [BM, BN] accumulator for the epilogue: a 256-row fp8
                            tile under precise accumulation without serialized wgmmas (configs.fp8_tile_fits);
                            absent or 1: one dot
    warp_specialize (opt.)  True: the K loop carries tt.warp_specialize (tl.range(..., warp_specialize=True)):
                            Triton's Hopper pass splits the kernel into a TMA producer warp group and two
                            consumer groups of num_warps = 4 (12 warps in all); TMA loads, unflattened, no
                            split-K; absent or False: none
    stream_k                T > 0: the last T tiles of the order are shared out by K steps (stream-K, see below);
                            absent or 0: none
    fast_accum (optional)   fp8 only, torch._scaled_mm's use_fast_accum: True lets the tensor cores accumulate
                            all of K in their reduced precision (tt.dot maxNumImpreciseAcc 2**30, Triton's own
                            fp8 default); absent or False (the default, as torch's): each K step's products
                            (BLOCK_K = 128: four k32 wgmmas, cuBLAS's promotion interval) are added into the fp32
                            accumulator. Precise accumulation keeps a second (partial) accumulator per wgmma: its
                            tiles are those ``configs.fp8_tile_fits`` passes (else spills, or ptxas serializes the
                            wgmmas)
    tile_order              'row_major' | 'grouped' | 'rank_rotated' (+ rows_per_rank, rank_shift)
    wait    (optional)      {arg, value_arg, rows_per_slot, scope}: before a tile's A loads, wait until every
                            slot of signal pad ``arg`` covering the tile's rows [m0, m0+BM) is >= the scalar
                            argument ``value_arg`` (ditron_core.wait per slot, then consume_token on A)
    notify  (optional)      {arg, rows_per_slot, peer, value, scope}: after a tile's store, add ``value`` to each
                            slot of ``arg`` covering its rows, on rank ``peer``: 'rank' (own), 'rank+<d>'
                            ((rank+d) mod num_ranks), 'arg:<name>' (an i32 argument) or 'slot_owner'
                            (slot*rows_per_slot // rows_per_rank). Counts per slot: ``notify_count``.
    reduce_own (optional)   {arg, value_arg, rows_per_slot, src, parts, dst, dst_rows, done, from_peers, scope}:
                            the reduce-scatter epilogue. A tile of the launching rank's own rows [rank*R, (rank+1)*R)
                            (R = rows_per_rank) waits until the slots of ``arg`` covering its rows are >=
                            ``value_arg``, adds the ``parts`` partial tiles staged in ``src`` ([parts*R, n]: part j
                            at rows j*R + the row within the shard) -- or, with from_peers, the same tile of ``c``
                            on ranks rank+1, ..., rank+parts (mod parts+1) through symm_at (no staging; ``arg`` is
                            then the pad the peers notify) -- to its accumulator and stores the sum to ``dst``
                            instead of ``c`` — at the row within the shard (dst_rows 'shard', dst [R, n]) or at the
                            tile's own row (dst_rows 'global', dst [m, n]) — then, with ``done`` (a pad argument),
                            adds 1 to its slots of ``done`` on its own rank (release); it does not notify. Other
                            tiles store to ``c`` and notify as usual. The own tiles must come last in every program (else two ranks could
                            each spin on a tile the other has not reached): tile_order 'rank_rotated' with
                            rank_shift 1 and group_m dividing R / block_m.

    push    (optional)      {arg, pad, slabs, scope}: GEMM+AR by push. After a tile's store to ``c`` (split-K: by the
                            last split, with the sum) the tile is
                            also stored into every peer's inbox ``arg`` ([slabs * m, n], slabs = num_ranks - 1),
                            at rows slab * m + its rows, slab = num_ranks - 1 - i on peer rank + i (so slab j - 1
                            of a rank's inbox holds rank + j's tiles), then 1 is added (release) to slot
                            slab * tiles_m + pid_m of that peer's pad ``pad``: a slot counts tiles_n tiles per
                            call. The reduce template's ``publish.pushed`` sums the inbox once they are there.
                            A persistent grid adds a tile's counts after its next tile's K loop (the last tile's
                            after the loop; ``deferred_push``): the release then waits for no store in flight.
                            ``owner`` (GEMM+RS by push): a tile of rank q's rows [q*R, (q+1)*R) (R = rows_per_rank,
                            a multiple of block_m; m = (slabs + 1) * R) goes to q alone, at its row within the
                            shard: into ``c`` ([R, n]) when q is the launching rank, else into slab
                            num_ranks - 1 - ((q - rank) mod num_ranks) of q's inbox ([slabs * R, n]), counted in
                            q's slot slab * (R / block_m) + its row block within the shard.
                            ``sum_own`` (with owner and ``value_arg``; GEMM+RS in one launch): slots per tile
                            instead -- a tile of q's rows sets q's slot slab * (R / block_m) * tiles_n + its tile
                            within the shard (row block * tiles_n + pid_n) to the value (release) -- and an own
                            tile waits for its slot of every slab, adds the slabs' inbox tiles to its accumulator,
                            stores the sum into c and clears its slots (one waiter each: the pad is consumed): no
                            reduce launch. Every tile has a resident program of its own (tiles <= num_sms), or the
                            own tiles come last in every program (rank_rotated, rank_shift 1, group_m dividing
                            R / block_m; a deferred count goes out before the wait): the tiles they wait for never
                            wait.
                            ``sum`` (with ``value_arg``, an i32 argument; GEMM+AR in one launch): each tile's slot
                            t * slabs + slab on a peer (t = pid_m * tiles_n + pid_n) is set to the value (release),
                            then the tile waits for its own slots t * slabs + j, adds the W - 1 inbox tiles to its
                            own (rounded to out_dtype first: every rank sums the same values), stores the sum to
                            ``c`` and clears its slots (one waiter each: the pad is consumed); split-K: the last split
                            does it, with the sum. Every program must be resident (a tile waits for the peers' same
                            tile); no owner. Persistent programs beyond one wave defer each sum (``deferred_sum``):
                            the tile's own part (rounded) goes to c, and its slots are set after the program's next
                            tile's K loop (its stores crossed the link meanwhile: the release stalls on nothing),
                            before that tile's stores; then its sum, reading the own part back (the last tile's
                            slots and sum after the loop).
    gather  (optional)      {arg, block, own_first}: AG+GEMM in one launch. The *copiers* copy this rank's shard
                            ``arg`` ([R, k] contiguous, R = rows_per_rank; ``block`` = [rows, cols] per block,
                            ``gather_blocks`` of them) into rows rank*R + ... of ``a`` on every rank (the peers
                            first, through symm_at; its own last) -- copier c of n takes blocks c, c + n, ... --
                            and add their block count (release) to slot ``rank`` of the ``wait`` pad on every rank:
                            a slot counts gather_blocks(rec) per call, and the tiles' waits (rows_per_slot R) see
                            the whole shard of each rank they cover. With own_first (default), the
                            ``gather_own_tiles`` tiles that lead the order and hold only this rank's rows read them
                            from ``arg`` itself, without a wait (and no rank counts in its own slot: nothing waits
                            on it). When they are fewer than the programs, the programs
                            without one are the copiers and count at once (the others start on their own tiles at
                            once); otherwise every program copies first and counts after its own tiles (its stores
                            are out by then: the release does not stall). Every program must be resident
                            (persistent, or one wave), and A is read through pointers (the peers' stores are
                            generic-proxy writes). The waits consume their signal: the pad has 2 S slots (S = m /
                            R), and a tile that passed its wait on slot s adds 1 (relaxed) to slot S + s; the last
                            of the ``gather_waiters`` tiles that wait on s (the count it found was one short) sets
                            S + s back to 0 and takes the wait value off slot s, after its K loop. Each call so
                            leaves the pad as it found it, but for counts of the peers' next call that landed
                            already, and a CUDA graph need not zero it.

Arguments (``record["args"]``): a, b, c, then the wait pad and value, the gather source, the notify pad (if
another one) and peer argument, the push inbox and pad, then for split-K ``workspace`` (fp32, [(S-1)*M, N]
row-major: slice j holds rows j*M ...) and ``locks`` (i32, one per tile, zero before the first launch; the kernel
leaves them zero); for stream-K the same two, ``workspace`` [grid * BM, BN] and one lock per program
(``scratch`` gives both shapes).

Tile order: tile t -> (pid_m, pid_n). row_major: t // tiles_n, t % tiles_n. grouped: GROUP_M m-blocks share a
column sweep (Triton's swizzle). rank_rotated: grouped, then pid_m shifted by the m-block holding row
``(rank + rank_shift) * rows_per_rank`` (mod tiles_m), so each rank starts on its own rows (rank_shift 0) or on
the next rank's and ends on its own (rank_shift 1). Orders are registered in
``TILE_ORDER_FNS``, each written once for both the IR and tiles(). A persistent program p visits tiles
p, p + grid, p + 2*grid, ...; a non-persistent program p does tile p % tiles (split index p // tiles).

Split-K (non-persistent, grid <= num_sms so all programs are resident): split s < S-1 stores its fp32 partial to
``workspace`` slice s and adds 1 to ``locks[t]`` (release); split S-1 waits until ``locks[t] >= S-1``
(``ditron_core.wait`` at gpu scope, acquire: bounded like every wait, so the lowered kernel takes ``wait_bound``,
``wait_err``, ``wait_tag`` after its own arguments), adds the slices in order to its own partial, stores C and
resets ``locks[t]`` to 0.

Stream-K (persistent, grid = num_sms programs, all resident): the first D = tiles - T tiles go to the programs
data-parallel (program p: tiles p, p + grid, ...; D a multiple of the grid), then the I = T * k_tiles K steps of
the last T tiles are cut into grid equal ranges, program p taking steps [p*I // grid, (p+1)*I // grid) (tile D +
step // k_tiles). A tile's *owner* is the program holding its last K step. A program first runs its trailing
piece of a tile it does not own (if its range ends inside one): stores the fp32 partial to ``workspace`` slot p
([grid * BM, BN], full tiles) and adds 1 to ``locks[p]`` (release); then the tiles it owns, in order: the first
may have begun in lower programs' ranges, whose partials it waits for (``locks[q] >= 1``, acquire, bounded), adds
and clears (``locks[q]`` back to 0) before storing C. Only lower programs' trailing pieces are awaited, which they
run before anything that waits on a lock: no chain, no cycle. ``stream_k_segments`` lists a program's pieces.

Launch: exactly ``grid(record)`` programs, ``num_warps`` warps; pointer arguments 16-byte aligned. TMA variants
create descriptors on the device: the launcher must set Triton's global scratch allocator
(``triton.set_allocator``; the kernel's metadata gives ``global_scratch_size`` per program).
"""
from __future__ import annotations

from .configs import candidates, choose_config, split_for
from .emit import build
from .geometry import (ORDERS_USING_RANK, TILE_ORDER_FNS, Geometry, IrOps, PyOps, geometry, grid, notify_count,
                       notify_count_values, notify_slots, program_tiles, stream_k_segments, sum_own_slot, tile_coords)
from .model import tiles
from .record import (CONFIG_FIELDS, IN_DTYPES, OUT_DTYPES, check, deferred_push, deferred_sum, gather_blocks,
                     gather_copiers, gather_own_tiles, gather_waiters, make_record, name, offset_type,
                     push_sum_own_resident, scratch)

__all__ = ["CONFIG_FIELDS", "IN_DTYPES", "ORDERS_USING_RANK", "OUT_DTYPES", "TILE_ORDER_FNS", "Geometry", "IrOps",
           "PyOps", "build", "candidates", "check", "choose_config", "deferred_push", "deferred_sum", "gather_blocks",
           "gather_copiers", "gather_own_tiles", "gather_waiters", "geometry", "grid", "make_record", "name",
           "notify_count", "notify_count_values", "notify_slots", "offset_type", "program_tiles",
           "push_sum_own_resident", "scratch", "split_for", "stream_k_segments", "sum_own_slot", "tile_coords",
           "tiles"]

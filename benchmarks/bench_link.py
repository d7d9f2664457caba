#!/usr/bin/env python3
"""Link ceilings of a multi-GPU node: how fast bytes cross between ranks, per engine and access pattern, with every
rank moving at once (as in an all-reduce) or one rank alone. No ditron involved: torch symmetric memory for the
peers' buffers and plain Triton kernels, so the numbers bound what any schedule of ditron's can reach.

    torchrun --nproc-per-node=2 -- benchmarks/bench_link.py [--mb 16] [--out benchmarks/results]

Rows (each rank moves ``--mb`` MB to / from its next rank, rank + 1 mod W):
  sm_store G/BLOCK/warps   a grid of G programs loads tiles of BLOCK bytes from local memory and stores them
                           into the peer's buffer (the push all-reduce's transfer, without its flags)
  sm_store_release ...     the same with a flag set on the peer after every tile (a CTA barrier, then a release
                           exchange at system scope): the push all-reduce's pattern; /2: after every other tile
  sm_store_relaxed ...     the flags without the release (not a valid protocol: the fence's cost by difference)
  sm_load ...              loads from the peer's buffer, stores locally (a pull by the SMs)
  ce_push / ce_pull        one copy by the copy engines (cudaMemcpyAsync into / out of the peer's buffer)
  ce+sm f                  a fraction f of the bytes by a copy-engine push on a second stream, the rest by
                           sm_store at the same time
  torch_two_shot           torch.ops.symm_mem.two_shot_all_reduce_ of the same bytes (an all-reduce moves them
                           both ways; the reference the issue compares with)
  compute R x K, local / push ptr / push tma
                           a persistent GEMM's work without its HBM traffic (_compute_push: every SM runs R tiles
                           of 128x256, each a K loop of K steps over L2-resident operands) storing each finished
                           tile locally, or into the peer's buffer by pointer stores or by TMA stores: against
                           "local", whether a tile's crossing overlaps the next tile's K loop; and the compute
                           storing locally beside a copy engine's push (or pull) of as many bytes on a second
                           stream
  compute ... on S-c SMs   the other design: the compute on S - c programs storing locally, c programs of
  + c SMs storing/loading  sm_store (sm_load) moving as many bytes into (out of) the peer on a second stream at the
                           same time, and each of the two alone: with the GEMM's SMs off the link, does the pair
                           take the longer?
  every row also "one way": only rank 0 moves (the others wait at the barrier)

    python benchmarks/bench_link.py --host [--overlap-k-steps 56 224] [--out benchmarks/results]

One GPU, no peer: the compute rows with pinned host memory (over PCIe) as the slow destination, beside the same
kernel storing locally, a copy-engine copy of the same bytes to the host, and the dedicated-SM rows: a proxy of the overlap question
(does a tile's slow crossing hold its SM through the next K loop?) where no second GPU is lent. Pick K steps
that make the compute about as long as the copy: serialized, push = local + copy; overlapped, max of the two.

Timing: CUDA events around ITERS back-to-back calls after a warm-up of 20 (bench_gemm.warm_us), REPS repetitions
after a barrier each, the max over ranks per repetition, the median repetition. GB/s = bytes one rank moves /
time. Output: a table on stdout and link_w<W>.csv in --out.
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
from pathlib import Path

import torch
import torch.distributed as dist
import triton
import triton.language as tl

RESULTS = Path(__file__).resolve().parent / "results"
ITERS, REPS = 20, 7


@triton.jit
def _sm_copy(src, dst, flags, n_elems, BLOCK: tl.constexpr, RELEASE: tl.constexpr, EVERY: tl.constexpr):
    """Tiles pid, pid + G, ... of src into dst. RELEASE 1: after every EVERY-th tile of the program (and its
    last) flags[t] set with release semantics at system scope (after a CTA barrier); 2: the same, relaxed (no
    fence: wrong as a protocol, the fence's cost by difference)."""
    pid, grid = tl.program_id(0), tl.num_programs(0)
    tiles = tl.cdiv(n_elems, BLOCK)
    for t in range(pid, tiles, grid):
        offs = t.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_elems
        tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)
        if RELEASE != 0:
            if ((t - pid) // grid) % EVERY == EVERY - 1 or t + grid >= tiles:
                tl.debug_barrier()
                if RELEASE == 1:
                    tl.atomic_xchg(flags + t, 1, sem="release", scope="sys")
                else:
                    tl.atomic_xchg(flags + t, 1, sem="relaxed", scope="sys")


@triton.jit
def _compute_push(a, b, dst, rounds, K_STEPS: tl.constexpr, PUSH: tl.constexpr, BM: tl.constexpr,
                  BN: tl.constexpr, BK: tl.constexpr):
    """A persistent GEMM's shape of work without its HBM traffic: each program runs ``rounds`` tiles, each a K loop
    of K_STEPS steps of [BM, BK] x [BK, BN] over small L2-resident operands, then stores its bf16 tile into dst at
    a slot of its own -- PUSH 0: dst local, 1: dst a peer's buffer through pointer stores, 2: the same by a TMA
    store (a device-side descriptor on the peer's buffer). Whether the next tile's K loop runs while the last
    tile's bytes cross the link is the question."""
    pid, grid = tl.program_id(0), tl.num_programs(0)
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    ld = K_STEPS * BK
    if PUSH == 2:
        desc = tl.make_tensor_descriptor(dst, shape=[rounds * grid * BM, BN], strides=[BN, 1], block_shape=[BM, BN])
    for r in range(rounds):
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for k in range(K_STEPS):
            at = tl.load(a + rm[:, None] * ld + (k * BK + rk)[None, :])
            bt = tl.load(b + (k * BK + rk)[:, None] * BN + rn[None, :])
            acc = tl.dot(at, bt, acc)
        slot = (r * grid + pid).to(tl.int64)
        if PUSH == 2:
            desc.store([(slot * BM).to(tl.int32), 0], acc.to(tl.bfloat16))
        else:
            tl.store(dst + slot * BM * BN + rm[:, None] * BN + rn[None, :], acc.to(tl.bfloat16))


def measure(fn, *, active: bool, group) -> float:
    """Median over REPS of the max over ranks of the us per call (inactive ranks time nothing: 0)."""
    from bench_gemm import warm_us  # CUDA events around ITERS calls after a warm-up (benchmarks/ is on the path)
    reps = []
    for _ in range(REPS):
        dist.barrier(group=group)
        torch.cuda.synchronize()
        t = torch.tensor([warm_us(fn, ITERS, blocks=1) if active else 0.0], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        reps.append(t.item())
    return statistics.median(reps)


BM, BN, BK, ROUNDS = 128, 256, 64, 4  # _compute_push's tile and tiles per program in every compute row


def compute_call(grid: int, k_steps: int, dst, push: int = 0):
    """A call of _compute_push on ``grid`` programs, ROUNDS tiles each of k_steps K steps, into dst."""
    a = torch.randn(BM, k_steps * BK, device="cuda").to(torch.bfloat16)
    b = torch.randn(k_steps * BK, BN, device="cuda").to(torch.bfloat16)
    return lambda: _compute_push[(grid,)](a, b, dst, ROUNDS, K_STEPS=k_steps, PUSH=push, BM=BM, BN=BN, BK=BK,
                                          num_warps=8, num_stages=3)


def beside(first, second, side):
    """A call running ``second`` on stream ``side`` while ``first`` runs on the current stream (both after the
    current stream's earlier work; the current stream then waits for both)."""
    def call():
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            second()
        first()
        main.wait_stream(side)
    return call


COPY_WARPS = 16  # the dedicated copy programs' warps: with _compute_push's 198 registers per thread on 8 warps, a
# copy CTA of 16 warps cannot share its SM, so the copies run on SMs of their own


def dedicated_rows(sms: int, k_steps: int, dst, where: str, comm_sms=(8, 16, 32)) -> list:
    """(name, fn, bytes) rows of the other design: _compute_push on sms - c programs storing locally while a
    second stream's _sm_copy on c programs moves as many bytes into ``dst`` (the slow destination) -- or out of it
    into a local buffer: a pull by loads; the GEMM's SMs never touch the link. Beside each, both kernels alone:
    overlapped, the pair takes the longer of the two."""
    side, rows = torch.cuda.Stream(), []
    for c in comm_sms:
        elems = ROUNDS * (sms - c) * BM * BN
        local = torch.empty(elems, device="cuda", dtype=torch.bfloat16)
        src = torch.randn(elems, device="cuda").to(torch.bfloat16)
        compute = compute_call(sms - c, k_steps, local)

        def copy(src, to, c=c, elems=elems):
            return lambda: _sm_copy[(c,)](src, to, to, elems, BLOCK=16384, RELEASE=0, EVERY=1,
                                          num_warps=COPY_WARPS)
        name, store, load = f"compute {ROUNDS}x{k_steps} on {sms - c} SMs", copy(src, dst), copy(dst, src)
        rows += [(f"{name}, local", compute, elems * 2),
                 (f"sm_store {c}/32K/w{COPY_WARPS} to {where}", store, elems * 2),
                 (f"{name} + {c} SMs storing to {where}", beside(compute, store, side), elems * 2),
                 (f"sm_load {c}/32K/w{COPY_WARPS} from {where}", load, elems * 2),
                 (f"{name} + {c} SMs loading from {where}", beside(compute, load, side), elems * 2)]
    return rows


def overlap_rows(args, sms: int, group, peer: int) -> list:
    """_compute_push on every SM (ROUNDS tiles of 128x256 per program): local stores, beside a copy engine, pointer
    stores into the peer's buffer, the dedicated-SM rows, TMA stores into it (last: a device fault there ends the
    run after the rows before it)."""
    import torch.distributed._symmetric_memory as symm_mem
    k_steps = args.overlap_k_steps[0]
    triton.set_allocator(lambda size, align, stream: torch.empty(size, device="cuda", dtype=torch.int8))
    elems = ROUNDS * sms * BM * BN
    local = torch.empty(elems, device="cuda", dtype=torch.bfloat16)
    sym = symm_mem.empty(elems, dtype=torch.bfloat16, device="cuda")
    peer_dst = symm_mem.rendezvous(sym, group.group_name).get_buffer(peer, (elems,), torch.bfloat16)
    moved, name = elems * 2, f"compute {ROUNDS}x{k_steps} steps"
    side, src = torch.cuda.Stream(), torch.randn(elems, device="cuda").to(torch.bfloat16)
    compute = compute_call(sms, k_steps, local)
    ce_push, ce_pull = lambda: peer_dst.copy_(src, non_blocking=True), lambda: src.copy_(peer_dst, non_blocking=True)
    return [(f"{name}, local", compute, moved),
            ("ce_push of the compute's bytes", ce_push, moved),
            (f"{name}, local + ce_push", beside(compute, ce_push, side), moved),
            ("ce_pull of the compute's bytes", ce_pull, moved),
            (f"{name}, local + ce_pull", beside(compute, ce_pull, side), moved),
            (f"{name}, push ptr", compute_call(sms, k_steps, peer_dst, 1), moved),
            *dedicated_rows(sms, k_steps, peer_dst, "peer"),
            (f"{name}, push tma", compute_call(sms, k_steps, peer_dst, 2), moved)]


def host_rows(args) -> None:
    """--host: _compute_push storing locally, into pinned host memory by pointers / by TMA, beside a copy-engine
    copy of the same bytes to the host, and the dedicated-SM rows, for each --overlap-k-steps; link_host.csv in
    --out."""
    from bench_gemm import warm_us
    triton.set_allocator(lambda size, align, stream: torch.empty(size, device="cuda", dtype=torch.int8))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    elems = ROUNDS * sms * BM * BN
    local = torch.empty(elems, device="cuda", dtype=torch.bfloat16)
    host = torch.empty(elems, dtype=torch.bfloat16).pin_memory()
    x = torch.randn(elems, device="cuda").to(torch.bfloat16)
    side, rows = torch.cuda.Stream(), []

    def ce_d2h():
        host.copy_(x, non_blocking=True)
    print(f"{elems * 2 / 2 ** 20:.1f} MB per call (on every SM); us per call", flush=True)

    def add(name, fn, moved=elems * 2):
        rows.append((name, moved, statistics.median(warm_us(fn, ITERS, blocks=1) for _ in range(REPS))))
        print(f"{name:44s} {rows[-1][2]:8.1f}", flush=True)
    add("ce d2h", ce_d2h)
    for k_steps in args.overlap_k_steps:
        name = f"compute {ROUNDS}x{k_steps} steps"
        for where, dst, push in (("local", local, 0), ("local tma", local, 2), ("host ptr", host, 1),
                                 ("host tma", host, 2)):
            add(f"{name}, {where}", compute_call(sms, k_steps, dst, push))
        add(f"{name}, local + ce d2h", beside(compute_call(sms, k_steps, local), ce_d2h, side))
        for row in dedicated_rows(sms, k_steps, host, "host"):
            add(*row)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "link_host.csv", "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["row", "bytes", "us"])
        wr.writerows([name, moved, f"{us:.2f}"] for name, moved, us in rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=16.0, help="MB each rank moves (default 16)")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--quick", action="store_true", help="fewer SM configurations")
    p.add_argument("--overlap-k-steps", type=int, nargs="+", default=[56],
                   help="K steps per tile of the overlap rows (--host: one set of rows each)")
    p.add_argument("--host", action="store_true", help="one GPU: the overlap rows into pinned host memory")
    args = p.parse_args(argv)
    if args.host:
        return host_rows(args)
    import torch.distributed._symmetric_memory as symm_mem

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl")
    group = dist.group.WORLD
    peer = (rank + 1) % world
    n = int(args.mb * 2 ** 20) // 2  # bf16 elements
    nbytes = n * 2
    x = torch.randn(n, device="cuda").to(torch.bfloat16)
    local = torch.empty(n, device="cuda", dtype=torch.bfloat16)
    buf = symm_mem.empty(n, dtype=torch.bfloat16, device="cuda")
    flags_local = symm_mem.empty(1 << 16, dtype=torch.int32, device="cuda")
    hb = symm_mem.rendezvous(buf, group.group_name)
    hf = symm_mem.rendezvous(flags_local, group.group_name)
    peer_buf = hb.get_buffer(peer, (n,), torch.bfloat16)
    peer_flags = hf.get_buffer(peer, (1 << 16,), torch.int32)
    side = torch.cuda.Stream()

    def sm(src, dst, grid, block_bytes, warps, release=0, every=1, elems=None):
        block = block_bytes // 2
        count = n if elems is None else elems
        return lambda: _sm_copy[(grid,)](src, dst, peer_flags, count, BLOCK=block, RELEASE=release, EVERY=every,
                                         num_warps=warps)

    def mixed(frac, grid, block_bytes, warps):
        a = (int(n * frac) // 4096) * 4096
        return beside(sm(x[a:], peer_buf[a:], grid, block_bytes, warps, elems=n - a),
                      lambda: peer_buf[:a].copy_(x[:a], non_blocking=True), side)

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    configs = [(sms, 32768, 8), (2 * sms, 16384, 4), (2 * sms, 32768, 8), (4 * sms, 16384, 4), (sms, 65536, 16)]
    if args.quick:
        configs = configs[:3]
    rows = []
    for g, bb, w in configs:
        rows.append((f"sm_store {g}/{bb // 1024}K/w{w}", sm(x, peer_buf, g, bb, w)))
    for g, bb, w in configs[:3]:
        rows.append((f"sm_store_release {g}/{bb // 1024}K/w{w}", sm(x, peer_buf, g, bb, w, release=1)))
    rows.append((f"sm_store_release/2 {sms}/32K/w8", sm(x, peer_buf, sms, 32768, 8, release=1, every=2)))
    rows.append((f"sm_store_relaxed {sms}/32K/w8", sm(x, peer_buf, sms, 32768, 8, release=2)))
    for g, bb, w in configs[:3]:
        rows.append((f"sm_load {g}/{bb // 1024}K/w{w}", sm(peer_buf, local, g, bb, w)))
    rows.append(("ce_push", lambda: peer_buf.copy_(x, non_blocking=True)))
    rows.append(("ce_pull", lambda: local.copy_(peer_buf, non_blocking=True)))
    for frac in (0.2, 0.35, 0.5):
        rows.append((f"ce+sm {frac}", mixed(frac, sms, 32768, 8)))
    buf.copy_(x)
    rows.append(("torch_two_shot", lambda: torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", group.group_name)))
    rows = [(name, fn, nbytes) for name, fn in rows]
    rows += overlap_rows(args, sms, group, peer)

    if rank == 0:
        print(f"{world} ranks, {nbytes / 2 ** 20:.1f} MB per rank to rank + 1 (compute rows: their tiles' bytes); us "
              f"per call (GB/s), all ranks at once / rank 0 alone", flush=True)
    results = []
    for name, fn, moved in rows:
        both = measure(fn, active=True, group=group)
        one = measure(fn, active=rank == 0, group=group) if name != "torch_two_shot" else float("nan")
        results.append((name, moved, both, moved / both / 1e3, one, moved / one / 1e3))
        if rank == 0:
            print(f"{name:44s} {both:8.1f} ({results[-1][3]:6.1f})   {one:8.1f} ({results[-1][5]:6.1f})", flush=True)
    if rank == 0:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / f"link_w{world}.csv", "w", newline="") as f:
            wr = csv.writer(f)
            wr.writerow(["row", "bytes", "all_us", "all_gbs", "one_way_us", "one_way_gbs"])
            for name, moved, both, bgb, one, ogb in results:
                wr.writerow([name, moved, f"{both:.2f}", f"{bgb:.1f}", f"{one:.2f}", f"{ogb:.1f}"])
    dist.barrier(group=group)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

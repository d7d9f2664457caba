"""fp8 GEMM kernels as ptxas compiles them for sm_90a (on this CPU box: Triton's own ptxas -v, backends/nvidia/
ptxas.py): the template's own choices for e4m3 and e5m2, precise and fast accumulation, compile without register
spills and without serialized wgmmas -- the property the 128x256 tiles of the bf16 rule lacked under precise
accumulation (192 bytes of spills: 0.645x torch._scaled_mm on an H200, results/fp8.csv). Also: the fast_accum
field reaches tt.dot, e5m2 reaches the wgmma, the fp8 tile rule (configs.fp8_tile_fits) holds for the target's
fp8 candidates, the cost model ranks fp8 by fp8's numbers, and the refusals."""
import re

import pytest

from ditron.backends.facts import target_facts
from ditron.cost_model import gemm_candidates, gemm_time, peaks_for
from ditron.errors import VerificationError
from ditron.kernels import gemm
from ditron.kernels.gemm.configs import fp8_tile_fits
from kernel_checks import compile_text, emit

SCALES = [{"fn": "mul", "arg": "sa", "operand": "scalar", "dtype": "fp32"},
          {"fn": "mul", "arg": "sb", "operand": "scalar", "dtype": "fp32"}]


def _record(m, n, k, dtype="fp8e4m3", fast_accum=False, **fields):
    return gemm.make_record(m, n, k, name="fp8_gemm", in_dtype=dtype, out_dtype="bf16", b_trans=True,
                            epilogue=SCALES, fast_accum=fast_accum, target="cuda:90", **fields)


def _ptxas(rec):
    from ditron.backends.nvidia.ptxas import ptxas_info
    asm, _ = compile_text(emit(rec, lower="cuda:90"), "cuda:90", rec["num_warps"], rec["num_stages"])
    return ptxas_info(asm["ptx"], 90), asm["ptx"]


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (1000, 4096, 4096), (96, 8192, 8192)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype,fast", [("fp8e4m3", False), ("fp8e4m3", True), ("fp8e5m2", False)])
def test_chosen_fp8_kernels_compile_without_spills(shape, dtype, fast):
    rec = _record(*shape, dtype=dtype, fast_accum=fast)
    info, ptx = _ptxas(rec)
    assert info.spill_stores == 0 and info.spill_loads == 0, (gemm.name, dict(rec), info.log)
    assert not info.serialized_wgmma, info.log
    kind = "e5m2.e5m2" if dtype == "fp8e5m2" else "e4m3.e4m3"
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n\d+k32\.f32\.{kind}", ptx)


def test_the_old_choice_spills_under_precise_accumulation():
    """The check means something: the bf16 rule's 128x256 tile on 8 warps, precise, spills (fast does not)."""
    fields = dict(block_m=128, block_n=256, block_k=128, num_warps=8, num_stages=4, persistent=True, loads="tma",
                  store="tma", epilogue_split=2, flatten=True)
    assert not fp8_tile_fits(128, 256, 8, fast_accum=False) and fp8_tile_fits(128, 256, 8, fast_accum=True)
    precise, _ = _ptxas(_record(4096, 4096, 4096, **fields))
    fast, _ = _ptxas(_record(4096, 4096, 4096, fast_accum=True, **fields))
    assert precise.spill_stores > 0 and fast.spill_stores == 0


def test_fast_accum_reaches_the_dot_and_is_fp8_only():
    precise = emit(_record(256, 256, 512))
    fast = emit(_record(256, 256, 512, fast_accum=True))
    assert "maxNumImpreciseAcc = 128 : i32" in precise and f"maxNumImpreciseAcc = {1 << 30} : i32" in fast
    with pytest.raises(VerificationError, match="fast_accum is an fp8 accumulation mode"):
        gemm.make_record(256, 256, 512, in_dtype="bf16", fast_accum=True)


def test_e5m2_is_refused_on_a_target_without_fp8():
    with pytest.raises(VerificationError, match="fp8e5m2' needs tensor cores that take fp8 operands"):
        gemm.make_record(256, 256, 512, in_dtype="fp8e5m2", target="cuda:80")


def test_template_choices_follow_the_fp8_tile_rule():
    for shape in [(8192, 14336, 4096), (4096, 4096, 4096), (1000, 4096, 4096), (96, 8192, 8192), (64, 4096, 4096)]:
        for fast in (False, True):
            for c in gemm.candidates(*shape, "fp8e4m3", "cuda:90", b_trans=True, fast_accum=fast):
                assert c["block_k"] == 128 and fp8_tile_fits(c["block_m"], c["block_n"], c["num_warps"], fast,
                                                             c.get("m_split", 1)), c
    # 1000 rows: 256 tiles of 128x128, a compute-bound GEMM: persistent with TMA (was a pointer grid at 0.45x)
    lead = gemm.choose_config(1000, 4096, 4096, "fp8e4m3", "cuda:90", b_trans=True)
    assert (lead["block_m"], lead["block_n"], lead["loads"], lead["persistent"]) == (128, 128, "tma", True)


def test_cost_model_ranks_fp8_by_its_own_candidates_and_rate():
    peaks = peaks_for("cuda:90")
    fp8 = gemm_candidates(peaks, 1)
    # a precise tile of two 64-row blocks a warpgroup runs as two dots (m_split, implied by the tile in make_record)
    assert fp8 and all(c.block_k == 128 and fp8_tile_fits(c.block_m, c.block_n, c.num_warps, False,
                                                          max(1, c.block_m // (16 * c.num_warps))) for c in fp8)
    rec = gemm.make_record(4096, 4096, 4096, in_dtype="fp8e4m3", b_trans=True, block_m=256, block_n=128,
                           block_k=128, num_warps=8, num_stages=4)
    assert rec["m_split"] == 2
    assert "m_split" not in gemm.make_record(4096, 4096, 4096, in_dtype="fp8e4m3", b_trans=True, block_m=256,
                                             block_n=128, block_k=128, num_warps=8, num_stages=4, fast_accum=True)
    assert gemm_candidates(peaks, 2) == [c for c in target_facts("cuda:90").gemm_candidates
                                         if c.smem_bytes(2, "cuda") <= peaks.smem_per_sm]
    cfg = fp8[0]
    t8 = gemm_time(8192, 8192, 8192, cfg, peaks, elem_bytes=1)
    t16 = gemm_time(8192, 8192, 8192, cfg, peaks, elem_bytes=2)
    assert t8 < t16 * 0.7  # fp8's rate (1.22 PFLOP/s on an H200) against bf16's 790 TFLOP/s


def test_fast_accum_ranks_fast_accumulations_tiles():
    peaks = peaks_for("cuda:90")
    fast = gemm_candidates(peaks, 1, fast_accum=True)
    assert all(c.block_k == 128 and fp8_tile_fits(c.block_m, c.block_n, c.num_warps, True) for c in fast)
    assert (fast[0].block_m, fast[0].block_n) == (128, 256) and gemm_candidates(peaks, 2, fast_accum=True) == \
        gemm_candidates(peaks, 2)


@pytest.mark.parametrize("fast", [False, True], ids=["precise", "fast-accum"])
def test_every_fp8_candidate_compiles_without_spills(fast):
    """The tuner's and the bench's alternatives too: 256x128 as two dots (m_split) among the precise ones."""
    cands = gemm.candidates(4096, 4096, 4096, "fp8e4m3", "cuda:90", b_trans=True, fast_accum=fast)
    assert fast or any(c.get("m_split") == 2 for c in cands)
    for c in cands:
        info, _ = _ptxas(_record(4096, 4096, 4096, fast_accum=fast, **c))
        assert info.spill_stores == 0 and not info.serialized_wgmma, (c, info.log)


def test_precise_lead_shares_its_sm_with_a_second_program():
    """The precise fp8 lead: 128x128 on one warp group as two 64-row dots, 3 stages, two programs an SM
    (configs.programs_per_sm; H200 0.877x torch._scaled_mm against 0.798x for 256x128 on 8 warps, results/fp8.csv):
    a grid of twice the SMs, and the compiled kernel's shared memory and registers fit an SM twice."""
    from ditron.backends import get_backend
    from ditron.backends.nvidia.ptxas import ptxas_info
    facts = target_facts("cuda:90")
    rec = _record(4096, 4096, 4096)
    assert (rec["block_m"], rec["block_n"], rec["num_warps"], rec["num_stages"], rec["m_split"],
            rec["programs_per_sm"]) == (128, 128, 4, 3, 2, 2)
    assert gemm.grid(rec) == (2 * facts.num_sms, 1, 1)
    assert gemm.grid(_record(1000, 4096, 4096)) == (256, 1, 1)  # no more programs than tiles
    be = get_backend("cuda:90")
    k = be.compile(emit(rec, lower="cuda:90"), be.options(num_warps=4, num_stages=3))
    info = ptxas_info(k.asm["ptx"], 90)
    # an SM's 228 KiB: the 227 a block may take (smem_per_sm) and the 1 KiB (barrier_smem) each resident block keeps
    assert 2 * (k.metadata["shared"] + facts.barrier_smem) <= facts.smem_per_sm + facts.barrier_smem
    assert 2 * 4 * 32 * info.registers <= facts.regs_per_sm and info.spill_stores == 0
    assert not info.serialized_wgmma
    # ditron-tile's fp8 lead is the same tile; the template adds the second program for it too
    lead = gemm_candidates(peaks_for("cuda:90"), 1)[0]
    assert (lead.block_m, lead.block_n, lead.block_k, lead.num_warps, lead.num_stages) == (128, 128, 128, 4, 3)
    tiled = gemm.make_record(4096, 4096, 4096, in_dtype="fp8e4m3", b_trans=True, block_m=128, block_n=128,
                             block_k=128, num_warps=4, num_stages=3, num_sms=facts.num_sms)
    assert tiled["programs_per_sm"] == 2 and tiled["m_split"] == 2


def test_programs_per_sm_only_where_a_second_program_fits_and_helps():
    base = dict(block_m=128, block_n=128, block_k=128, num_warps=4)
    assert "programs_per_sm" not in _record(4096, 4096, 4096, fast_accum=True, **base)  # no partial to cover
    assert "programs_per_sm" not in _record(4096, 4096, 4096, num_stages=4, **base)  # 2 x 4 stages do not fit
    assert "programs_per_sm" not in _record(4096, 4096, 4096, block_m=256, block_n=128, num_warps=8)
    assert "programs_per_sm" not in _record(4096, 4096, 4096, persistent=False, **base)
    assert "programs_per_sm" not in gemm.make_record(4096, 4096, 4096, in_dtype="bf16", block_m=128, block_n=128,
                                                     block_k=64, num_warps=4)
    notify = {"arg": "pad", "rows_per_slot": 128}
    assert "programs_per_sm" not in _record(4096, 4096, 4096, notify=notify, store="pointer")
    with pytest.raises(VerificationError, match="programs_per_sm must be 1, or 2"):
        _record(4096, 4096, 4096, notify=notify, store="pointer", programs_per_sm=2)
    with pytest.raises(VerificationError, match="programs_per_sm must be 1, or 2"):
        _record(4096, 4096, 4096, persistent=False, programs_per_sm=2, **base)


def test_warp_specialize_reaches_the_k_loop_and_is_checked():
    """warp_specialize (bench_fp8 --variants): Triton's Hopper pass makes 12 warps of the 4 given, with
    setmaxnreg; the e4m3v6/v7 kernels it made left C tiles unwritten on an H200 (results/fp8.csv's README line),
    so no candidate uses it."""
    rec = _record(4096, 4096, 4096, block_m=128, block_n=128, num_warps=4, num_stages=4, flatten=False,
                  warp_specialize=True)
    assert "tt.warp_specialize" in emit(rec)
    assert "tt.warp_specialize" not in emit(_record(4096, 4096, 4096))
    with pytest.raises(VerificationError, match="warp_specialize .* needs num_warps=4"):
        _record(4096, 4096, 4096, block_m=256, block_n=128, num_warps=8, flatten=False, warp_specialize=True)
    with pytest.raises(VerificationError, match="warp_specialize"):
        _record(4096, 4096, 4096, block_m=128, block_n=128, num_warps=4, flatten=True, warp_specialize=True)
    assert not any(c.get("warp_specialize") for fast in (False, True)
                   for c in gemm.candidates(4096, 4096, 4096, "fp8e4m3", "cuda:90", b_trans=True, fast_accum=fast))

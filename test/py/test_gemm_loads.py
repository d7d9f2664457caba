"""One-wave GEMM loads and the ditron-tile overrides of issue 30's small-M work: a matmul alone whose grid is one
tile per program loads A and B by TMA where each program's K loop is long and the GEMM bound by math
(cost_model.one_wave_loads), through pointers where its programs are short or the GEMM streams its bytes; the
``loads`` and ``split-k`` options of ditron-tile pin either choice, and the lowering's GEMM record takes them."""
from __future__ import annotations

import pytest

from ditron.backends.facts import GemmConfig
from ditron.cost_model import TMA_MIN_PROGRAM_S, gemm_split, one_wave_loads, one_wave_stages, peaks_for

H200 = peaks_for("cuda:90")


def test_one_wave_stages_fill_what_a_tma_store_would_stage():
    smem = H200.smem_per_sm
    assert one_wave_stages(GemmConfig(128, 256, 64, 8, 3), 2, smem) == 4
    assert one_wave_stages(GemmConfig(128, 128, 64, 8, 5), 2, smem) == 5    # never lowered
    assert one_wave_stages(GemmConfig(64, 128, 64, 4, 8), 2, smem) == 8
    assert one_wave_stages(GemmConfig(128, 256, 64, 8, 3), 2, 150_000) == 3  # a 4th stage does not fit


def test_one_wave_loads_by_program_length_and_bound():
    w4 = GemmConfig(64, 128, 64, 4, 8, 8, 0.80)
    w8 = GemmConfig(128, 128, 64, 8, 5, 8, 0.93)
    big = GemmConfig(128, 256, 64, 8, 3, 8, 1.00)
    assert one_wave_loads(257, 2048, 7168, w4, H200) == "tma"            # a long K loop, math-bound
    assert one_wave_loads(333, 3584, 18944, w8, H200) == "tma"
    split = gemm_split(333, 3584, 18944, big, 132)
    assert split == 3 and one_wave_loads(333, 3584, 18944, big, H200, split=split) == "tma"
    assert one_wave_loads(256, 4096, 4096, w4, H200) == "tma"            # 14 us of math a program
    assert one_wave_loads(1000, 1000, 1000, w4, H200) == "pointer"       # short programs
    assert one_wave_loads(200, 7168, 2048, w8, H200) == "pointer"
    assert one_wave_loads(100, 28672, 8192, big, H200) == "pointer"      # bound by B's 470 MB crossing HBM
    # the threshold is the program's math time: a split that shortens the programs below it goes back to pointers
    k = 7168
    while one_wave_loads(257, 2048, k, w4, H200) == "tma":
        k //= 2
    assert k < 7168 and one_wave_loads(257, 2048, 7168, w4, H200, split=7168 // k + 1) == "pointer"
    assert TMA_MIN_PROGRAM_S > 0


def _program(m: int, k: int, n: int) -> str:
    return f"""module attributes {{ditron.mesh = {{axes = ["tp"], shape = array<i64: 1>}}}} {{
  func.func @mm(%a: tensor<{m}x{k}xbf16>, %b: tensor<{k}x{n}xbf16>) -> tensor<{m}x{n}xbf16> {{
    %c = "ditron_task.matmul"(%a, %b) : (tensor<{m}x{k}xbf16>, tensor<{k}x{n}xbf16>) -> tensor<{m}x{n}xbf16>
    return %c : tensor<{m}x{n}xbf16>
  }}
}}"""


def _plan(text: str, tile: str = "ditron-tile{tuning-cache=off}"):
    """(the matmul's tiling, its GEMM record) after ditron-tile and the device lowering."""
    from ditron.dialects import ditron_context
    from ditron.dialects.context import parse_module
    from ditron.dialects.opbase import walk_ops
    from ditron.kernels import KERNEL_ATTR, KernelRecord
    from ditron.passes.manager import run_pipeline
    from ditron.passes.tiling import Tiling
    with ditron_context():
        module = parse_module(text)
        run_pipeline(module, f"ditron-partition,{tile}")
        tiling = next(Tiling.of(op) for op in walk_ops(module.operation) if op.name == "ditron_task.matmul")
        run_pipeline(module, "ditron-lower-task-to-device,ditron-schedule-overlap,ditron-lower-device-to-core")
        recs = [KernelRecord.from_attr(op.attributes[KERNEL_ATTR]) for op in walk_ops(module.operation)
                if KERNEL_ATTR in op.attributes]
        rec = next(r for r in recs if r["template"] == "gemm")
        del module
    return tiling, rec


def test_ditron_tile_picks_one_wave_loads_and_the_record_takes_them():
    tiling, rec = _plan(_program(257, 7168, 2048))
    assert not tiling.persistent and tiling.loads == "tma" and rec["loads"] == "tma"
    assert (rec["block_m"], rec["block_n"], rec["num_stages"]) == (64, 128, 8)
    # 128x256 tiles split in 3, by TMA, C through pointers: a 4th stage where a TMA store's staging kept 3
    tiling, rec = _plan(_program(333, 18944, 3584))
    assert (rec["block_n"], rec["split_k"], rec["loads"], rec["store"], rec["num_stages"]) == (256, 3, "tma",
                                                                                               "pointer", 4)
    _, rec = _plan(_program(333, 18944, 3584), "ditron-tile{tuning-cache=off gemm-config=128x256x64-w8-s3-g8}")
    assert rec["num_stages"] == 3  # a pinned config keeps its stages
    tiling, rec = _plan(_program(200, 2048, 7168))
    assert tiling.loads == "pointer" and rec["loads"] == "pointer"
    tiling, rec = _plan(_program(100, 8192, 28672))  # memory-bound 128x256 one wave: pointers, the table's stages
    assert (rec["block_n"], rec["loads"], rec["num_stages"]) == (256, "pointer", 3)
    tiling, rec = _plan(_program(4096, 4096, 4096))  # persistent: the template's rule (TMA), no loads field
    assert tiling.persistent and tiling.loads is None and rec["loads"] == "tma"
    tiling, rec = _plan(_program(256, 1110, 4096))  # K rows not 16-byte aligned: pointers, whatever the length
    assert tiling.loads is None and rec["loads"] == "pointer"


def test_ditron_tile_loads_and_split_k_options():
    tiling, rec = _plan(_program(257, 7168, 2048), "ditron-tile{tuning-cache=off loads=pointer}")
    assert tiling.loads == "pointer" and rec["loads"] == "pointer"
    tiling, rec = _plan(_program(257, 7168, 2048),
                        "ditron-tile{tuning-cache=off gemm-config=128x128x64-w8-s5-g8 split-k=1 loads=tma}")
    assert tiling.split_k == 1 and rec["split_k"] == 1 and rec["loads"] == "tma"
    _, rec = _plan(_program(257, 7168, 2048), "ditron-tile{tuning-cache=off gemm-config=128x128x64-w8-s5-g8}")
    assert rec["split_k"] == 2  # the model's rule (split_for: 48 tiles, 112 K steps)
    big = "gemm-config=128x256x64-w8-s3-g8"
    _, rec = _plan(_program(333, 18944, 3584), f"ditron-tile{{tuning-cache=off {big}}}")
    assert rec["split_k"] == 3  # 42 tiles
    _, rec = _plan(_program(333, 18944, 3584), f"ditron-tile{{tuning-cache=off {big} split-k=2}}")
    assert rec["split_k"] == 2 and "workspace" in rec["args"]
    # a split whose programs cannot all be resident is the template's located refusal
    with pytest.raises(Exception, match="every program must be resident"):
        _plan(_program(257, 7168, 2048), "ditron-tile{tuning-cache=off gemm-config=128x128x64-w8-s5-g8 split-k=3}")


@pytest.mark.parametrize("bad, why", [("loads=ldg", "loads must be tma or pointer"), ("split-k=0", "split-k must be"),
                                       ("split-k=2 stream-k=true", "non-persistent")])
def test_ditron_tile_refuses_bad_loads_and_split_k(bad, why):
    with pytest.raises(Exception, match=why):
        _plan(_program(257, 7168, 2048), f"ditron-tile{{{bad}}}")

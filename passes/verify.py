"""ditron-verify: run the dialect verifiers (dialects/verify.py) as a pass.

Input: any level. Output: unchanged. Fails with one located diagnostic per broken rule, e.g.

    %0 = "ditron_task.all_gather"(%x) {axis = "tp", dim = 0 : i64} : (tensor<4x8xbf16>) -> tensor<8x8xbf16>
    // with ditron.mesh = {axes = ["tp"], shape = array<i64: 4>}:
    // error: 'ditron_task.all_gather' op output dim 0 is 8; expected input dim 4 x axis 'tp' size 4 = 16
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from ..dialects.verify import verify
from .registry import Pass


@dataclass(frozen=True)
class VerifyPass(Pass):
    name = "ditron-verify"
    summary = "Check the ditron dialect rules IRDL cannot express (shapes, mesh axes, shardings, symbols)"

    def run(self, module: ir.Module) -> None:
        verify(module)

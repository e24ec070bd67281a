"""What each kernel family can fuse, declared where fusion can ask without importing any codegen.

Fusion decides; kernels generate. A decision that depends on what a kernel can
run (a depthwise tile that fits shared memory, a head size the flash-attention
kernel holds, a block count the gated epilogue covers) is a rule of that kernel
family, declared here, and the family's codegen imports its limits from here.
Nothing in this package imports aotc.kernels, so the data flows one way:
fusion asks the rules, kernels read the same rules.

`FAMILIES` names, per anchored region kind, the op category that anchors it and
the prologue it accepts: a family that loads each operand element many times
(the GEMM tiles, the implicit-GEMM conv) takes only index math and casts as
prologue, since compute there would be repeated per load; the others take any
elementwise producer. The limits live in one module per family:

target.py     the GPU the limits are sized for (SMs to fill, split workspace cap)
gemm.py       GEMM tiles: when an operand is loaded exactly once
conv.py       the depthwise and depthwise+pointwise kernels: tiles, smem, grid
attention.py  the flash-attention and int8 attention kernels: head sizes
gated.py      gated epilogues: how many column blocks
chain.py      chains of tiny phases: per-image sizes
"""
from __future__ import annotations

from dataclasses import dataclass

from aotc.ir import dtypes, ops


@dataclass(frozen=True)
class FusionRule:
    """One anchored kernel family: the region kind, its anchor's op category, what its prologue may hold."""
    kind: str
    anchor: str
    prologue: tuple[str, ...]      # op categories a producer may have to join as operand prologue
    prologue_casts: bool = False   # `convert` joins too (a cast costs what the load does)


_INDEX_MATH = (ops.INJECTIVE, ops.SOURCE)
_POINTWISE = (ops.ELEMENTWISE, ops.INJECTIVE, ops.SOURCE)

FAMILIES = (
    FusionRule("reduction", ops.REDUCTION, _POINTWISE),
    FusionRule("dot", ops.DOT, _INDEX_MATH, prologue_casts=True),
    FusionRule("conv", ops.CONV, _INDEX_MATH, prologue_casts=True),
    FusionRule("window", ops.WINDOW, _POINTWISE),
)
ANCHOR_KINDS = {f.anchor: f.kind for f in FAMILIES}
RULES = {f.anchor: f for f in FAMILIES}


def quantized_anchor(node) -> bool:
    """A dot/conv with 8-bit operands (its op names an out_dtype): the int8/fp8 kernels
    (kernels/codegen_mma8.py, codegen_conv8.py) take index-math prologues and elementwise
    epilogues only, never another family's fused form (depthwise staging or
    depthwise+pointwise, attention, gated epilogues, chains), which compute in float."""
    return node is not None and node.op in ("dot_general", "convolution") and node.attrs.get("out_dtype") is not None


def plain_anchor(node) -> bool:
    """A dot/conv that takes its family's plain kernel only: 8-bit operands (quantized_anchor), or
    f64 operands, which accumulate in double in the SIMT GEMM and the direct conv while the fused
    forms (and the tensor-core and depthwise kernels) compute in float."""
    return quantized_anchor(node) or (node is not None and node.op in ("dot_general", "convolution")
                                      and node.inputs[0].dtype == dtypes.f64)


def rule_for(node) -> FusionRule | None:
    """The family rule of an anchor node, None for a non-anchor."""
    return RULES.get(ops.category(node.op)) if node is not None else None


def loads_operands_repeatedly(node) -> bool:
    """The anchor's kernel reads each operand element many times: its prologue is index math and casts."""
    r = rule_for(node)
    return r is not None and ops.ELEMENTWISE not in r.prologue


def prologue_accepts(rule: FusionRule | None, op: str) -> bool:
    """A producer `op` may join the operand prologue of an anchor of `rule` (None: a loop region takes all)."""
    if rule is None:
        return ops.category(op) in _POINTWISE
    return ops.category(op) in rule.prologue or (rule.prologue_casts and op == "convert")

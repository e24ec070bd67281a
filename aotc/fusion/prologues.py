"""Conv and GEMM operand prologues: what a GEMM or conv kernel may compute while it loads an operand.

A GEMM operand is loaded once per block column, so compute on it is normally left
to its producer. Three cases are cheap enough to take: a depthwise conv's staged
patch (each element computed once per tile, so elementwise ops and a 1x1 or small
expansion conv may join: expand_into_depthwise), a depthwise conv feeding a
pointwise one (depthwise_prologue), and an f32 GEMM whose lhs is loaded exactly once
(lhs_loaded_once) when the ops read a tensor that is in memory anyway.

What the kernels can hold (which depthwise convs stage, which tiles fit, how wide a GEMM
tile is) are the kernel families' rules (fusion/rules/conv.py, rules/gemm.py); this
module decides with them and imports no kernel code.
"""
from __future__ import annotations

from aotc.fusion.rules.conv import MAX_FUSED_CONV_K, depthwise_project_fits, staged_depthwise
from aotc.fusion.rules import plain_anchor
from aotc.fusion.rules.gemm import lhs_loaded_once, pointwise_conv
from aotc.ir import dims as D
from aotc.ir import ops
from aotc.ir.graph import Node, Value
from aotc.ir.walk import walk

__all__ = ["lhs_prologue_pays", "staged_conv", "depthwise_prologue", "expand_into_depthwise"]


def lhs_prologue_pays(anchor: Node, users, producer, outputs) -> bool:
    """The elementwise ops computing the anchor's lhs may join its prologue: loaded once, nothing new read."""
    return lhs_loaded_once(anchor) and _reads_one_tensor(anchor.inputs[0], users, producer, outputs)


def _reads_one_tensor(v: Value, users, producer, outputs) -> bool:
    """Computing `v` in its consumer saves v's round trip through memory and reads nothing new.

    True when the exclusive elementwise ops computing v read exactly one tensor of v's
    size, besides broadcasts of smaller tensors (seen through transposes and reshapes)
    and constants, and that tensor is materialized anyway: it has other users or is a
    graph input. EfficientNet's squeeze-excite scale x * s[c] before the project conv is
    such a case (x also feeds the squeeze pool); SwiGLU over two GEMM halves is not (it
    stays the up projection's epilogue, which writes half of what it reads).
    """
    chain, big = set(), []

    def up(w):
        p = producer.get(w)
        exclusive = p is not None and w not in outputs and (w is v or all(u in chain for u in users.get(w, [])))
        if exclusive and ops.category(p.op) == ops.ELEMENTWISE and w.shape == v.shape:
            chain.add(p)
            yield from p.inputs
        elif D.upper(w.type.size) >= D.upper(v.type.size) and not _broadcast_of_smaller(w, v.type.size, producer):
            big.append(w)

    walk([v], up)
    if not chain or len(big) != 1:
        return False
    w = big[0]
    return producer.get(w) is None or w in outputs or any(u not in chain for u in users.get(w, []))


def _broadcast_of_smaller(w: Value, size: int, producer) -> bool:
    """`w` is index math (broadcast, transpose, reshape) over a tensor of fewer than `size` elements.

    Dynamic sizes compare at the top of their ranges (a heuristic, not a correctness question)."""
    p = producer.get(w)
    while p is not None and p.op in ("broadcast_in_dim", "transpose", "reshape"):
        if D.upper(p.inputs[0].type.size) < D.upper(size):
            return True
        p = producer.get(p.inputs[0])
    return False


def staged_conv(anchor, members):
    """The region's staged depthwise conv: the anchor, or one a pointwise anchor took as prologue."""
    if staged_depthwise(anchor):
        return anchor
    if pointwise_conv(anchor):
        return next((m for m in members if m is not anchor and staged_depthwise(m)), None)
    return None


def depthwise_prologue(anchor: Node, users, producer, outputs) -> tuple[set[Node], str]:
    """(a depthwise conv and its elementwise epilogue that a pointwise conv computes as its
    prologue, why not: "" or a reason).

    MobileNet's block is expand (1x1) -> depthwise (3x3) -> project (1x1). The
    depthwise kernel already computes the expansion while it stages its patch;
    with this the project conv runs in the same kernel too, so the block's two
    expanded tensors (6x the block's channels) never go through memory. Each
    depthwise block keeps its tile's result in shared memory and multiplies it
    by its channels' rows of the project weights; the channel blocks' partial
    sums meet as split-K partials (kernels/codegen_conv.py).
    """
    if not pointwise_conv(anchor):
        return set(), ""
    x = anchor.inputs[0]
    chain: set[Node] = set()
    dw = None

    def up(v):                      # elementwise ops at x's shape, up to one staged depthwise conv
        nonlocal dw
        p = producer.get(v)
        if p is None or p in chain or v in outputs:
            return
        if staged_depthwise(p) and dw in (None, p) and v.shape == x.shape:
            dw = p
            chain.add(p)
        elif ops.category(p.op) == ops.ELEMENTWISE and v.shape == x.shape and len(p.outputs) == 1:
            chain.add(p)
            yield from p.inputs

    walk([x], up)
    if dw is None:
        return set(), ""
    outside = [n for n in chain for v in n.outputs for u in users.get(v, []) if u not in chain and u is not anchor]
    if outside or x in outputs:
        return set(), f"convolution '{dw.name}' not fused into pointwise conv '{anchor.name}': result used elsewhere"
    why = depthwise_project_fits(dw, anchor)
    if why:
        return set(), f"convolution '{dw.name}' not fused into pointwise conv '{anchor.name}': {why}"
    return chain, ""


def expand_into_depthwise(p: Node, v: Value, dw, anchor, users, members, outputs) -> bool:
    """A conv whose result only feeds a staged depthwise conv, cheap enough to recompute there.

    The depthwise kernel then computes it while it stages its input patch (a
    dot product per staged element, the halo recomputed), so its result never
    goes to memory. Two kinds qualify: a 1x1 conv (MobileNet's expansion, the
    block's largest tensor) and a dense conv of at most MAX_FUSED_CONV_K taps x
    channels (MobileNet's and EfficientNet's 3x3 stem on the 3-channel image).
    """
    if dw is None or v in outputs or len(p.outputs) != 1 or plain_anchor(p):   # 8-bit: exact ints; f64: double
        return False
    if any(m.op == "convolution" and m is not dw and m is not anchor for m in members):
        return False
    x, w = p.inputs
    a = p.attrs
    if a.get("layout") != "NHWC" or a["groups"] != 1 or x.type.rank != 4:
        return False
    pointwise = (all(k == 1 for k in w.shape[1:-1]) and all(s == 1 for s in a["strides"])
                 and all(d == 1 for d in a["dilations"]) and all(tuple(q) == (0, 0) for q in a["padding"]))
    small = w.shape[1] * w.shape[2] * w.shape[3] <= MAX_FUSED_CONV_K
    return (pointwise or small) and all(u in members for u in users.get(v, []))

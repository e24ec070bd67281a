"""algsimp: local algebraic simplification, one node at a time.

Guarantees (each rewrite gives the same values, bit for bit, except where noted):
- identity ops disappear: reshape/broadcast to the same shape, transpose by the
  identity, convert to the same dtype, full slices, zero pads, one-operand
  concatenation, reduce over no axes, reduce_window with a 1-element window;
- x * 1, 1 * x, x + 0, 0 + x, x - 0, x / 1, x ** 1 and neg(neg(x)) become x;
  select with an all-true / all-false predicate becomes the chosen operand
  (ONNX's Attention body guards its softmax with such a Where)
  (for x = -0.0, x + 0 was +0.0 and is now -0.0: equal as numbers);
- transpose of transpose composes into one transpose (or none), reshape of
  reshape into one reshape, broadcast of broadcast into one broadcast;
- a reshape of a transpose that only merges or splits dims the transpose
  keeps adjacent and in order is a reshape followed by a transpose of whole
  groups: where that transpose is the identity (NHWC -> NCHW -> [N, C, HW]
  -> [N, HW, C] is one reshape of the NHWC tensor, ViT's patch tokens) or
  cancels an outer transpose, the transposes disappear;
- convert of convert becomes one convert when the middle type holds every
  value of the source type exactly (i8 -> i32 -> f32, f16 -> f32 -> f16,
  float8 -> f16 -> f32);
- a constant-valued operand (a constant whose elements are all equal) read
  through reshape/transpose/broadcast/slice becomes a broadcast of one 0-d
  constant, which CSE merges and kernels inline as a literal;
- x / C for a constant C (or a broadcast of one) becomes x * (1 / C) only
  when every element of C is a power of two whose reciprocal is a normal
  number of the dtype: then the product is the quotient, bit for bit. Any
  other division stays a division (div.rn on the GPU): x * fl(1/C) is off by
  up to 1.5 ulp, and an ulp decides a rounding tie -- QuantizeLinear's
  round(x / scale) and an AveragePool's sum / count must land where
  onnxruntime and numpy land (a Q/DQ CNN flipped int8 values by one quantum
  at exactly such ties).

Leaves alone: integer division (truncation), x * 0 (NaN and inf operands),
anything whose simplification would alias a graph output to a graph input or
constant (outputs stay node results), and everything non-local (that is
transpose-sink, bn-fold, cse).
"""
from __future__ import annotations

import numpy as np

from aotc.hlo_passes.rewrite import Rewriter
from aotc.ir import dims as D
from aotc.ir import dtypes, ops
from aotc.ir.graph import Graph, Node, Value

# source dtype -> dtypes that hold each of its values exactly
_FLOATS_16 = {"f16", "bf16", "f32", "f64"}
_EXACT_WIDER = {
    "bool": set(dtypes.BY_NAME) - {"f8e8m0fnu"},     # e8m0 has no zero: False becomes 2^-127
    "f8e8m0fnu": {"f8e8m0fnu", "bf16", "f32", "f64"},   # 2^-127..2^127: bf16 and f32 subnormals hold the bottom
    "u2": {"u2", "u4", "u8", "u16", "u32", "u64", "i4", "i8", "i16", "i32", "i64"} | _FLOATS_16,
    "i2": {"i2", "i4", "i8", "i16", "i32", "i64"} | _FLOATS_16,
    "f4e2m1fn": {"f4e2m1fn"} | _FLOATS_16,
    "u4": {"u4", "u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64"} | _FLOATS_16,
    "i4": {"i4", "i8", "i16", "i32", "i64"} | _FLOATS_16,
    "u8": {"u8", "u16", "u32", "u64", "i16", "i32", "i64"} | _FLOATS_16,
    "i8": {"i8", "i16", "i32", "i64"} | _FLOATS_16,
    "u16": {"u16", "u32", "u64", "i32", "i64", "f32", "f64"},
    "i16": {"i16", "i32", "i64", "f32", "f64"},
    "u32": {"u32", "u64", "i64", "f64"},
    "i32": {"i32", "i64", "f64"},
    "u64": {"u64"},
    "i64": {"i64"},
    "f16": {"f16", "f32", "f64"},
    "bf16": {"bf16", "f32", "f64"},
    "f32": {"f32", "f64"},
    "f64": {"f64"},
    **{d.name: {d.name} | _FLOATS_16 for d in dtypes.FLOAT8},   # f16's range and subnormals hold every float8
}


def _identity(n: Node, x: Value) -> bool:
    a = n.attrs
    out = n.outputs[0]
    if out.type != x.type:
        return False
    if n.op in ("reshape", "convert"):
        return True
    if n.op == "transpose":
        return tuple(a["permutation"]) == tuple(range(x.type.rank))
    if n.op == "broadcast_in_dim":
        return tuple(a["broadcast_dimensions"]) == tuple(range(x.type.rank))
    if n.op == "slice":
        return all(k == 1 for k in a["stride"])
    if n.op == "pad":
        return True
    if n.op == "concatenate":
        return len(n.inputs) == 1
    if n.op == "reduce":
        return not a["axes"]
    if n.op == "reduce_window":
        return all(w == 1 for w in a["window"]) and all(s == 1 for s in a["strides"])
    return False


def _power_of_two_reciprocal(c: np.ndarray, dt) -> np.ndarray | None:
    """1/c when it is exact and normal in `dt` for every element, else None."""
    c64 = c.astype(np.float64)
    if c64.size == 0 or not np.all(np.isfinite(c64)) or np.any(c64 == 0):
        return None
    mant, _ = np.frexp(np.abs(c64))
    if not np.all(mant == 0.5):
        return None
    r = 1.0 / c64
    info = np.finfo(np.float32) if dt == dtypes.bf16 else np.finfo(dt.np)
    if np.any(np.abs(r) < info.tiny) or np.any(np.abs(r) > info.max):
        return None
    return r


_SPLAT_THROUGH = ("broadcast_in_dim", "reshape", "transpose", "slice")


def _groups(a, s):
    """The finest pairing of consecutive dims of shapes a and s with equal products: [(a dims, s dims)]."""
    out, i, j = [], 0, 0
    while i < len(a) or j < len(s):
        ga, gs, pa, ps = [], [], 1, 1
        if i < len(a):
            ga, pa, i = [i], a[i], i + 1
        if j < len(s):
            gs, ps, j = [j], s[j], j + 1
        while pa != ps:
            if pa < ps and i < len(a):
                ga, pa, i = ga + [i], pa * a[i], i + 1
            elif ps < pa and j < len(s):
                gs, ps, j = gs + [j], ps * s[j], j + 1
            else:
                return None
        out.append((ga, gs))
    return out


def _pull_reshape(x: Value, perm, shape):
    """reshape(transpose(x, perm), shape) as transpose(reshape(x, s), q): (s, q), or None where a reshape
    group spans dims the transpose does not keep adjacent and in x's order (size-1 dims go anywhere)."""
    a = [x.shape[k] for k in perm]
    if not all(isinstance(d, int) and d > 0 for d in list(a) + list(shape)):
        return None
    groups = _groups(a, list(shape))
    if groups is None:
        return None
    real = [k for k, d in enumerate(x.shape) if d != 1]       # x's non-unit dims, in order
    keyed = []
    for ga, gs in groups:
        ranks = [real.index(perm[d]) for d in ga if a[d] != 1]
        if ranks and ranks != list(range(ranks[0], ranks[0] + len(ranks))):
            return None
        keyed.append((ranks[0] if ranks else -1, gs))
    order = sorted(range(len(keyed)), key=lambda g: keyed[g][0])
    s, start = [], {}
    for g in order:
        start[g] = len(s)
        s.extend(shape[d] for d in keyed[g][1])
    q = [0] * len(shape)
    for g, (_, gs) in enumerate(keyed):
        for o, d in enumerate(gs):
            q[d] = start[g] + o
    return tuple(s), tuple(q)


class _Simplifier:
    def __init__(self, graph: Graph):
        self.rw = Rewriter(graph)

    def run(self) -> Graph:
        rw = self.rw
        for n in rw.graph.nodes:
            new = self.simplify(n) if len(n.outputs) == 1 else None
            if new is not None and rw.can_replace(n.outputs[0], new):
                rw.replace(n.outputs[0], new)
            else:
                rw.keep(n)
        return rw.finish()

    def producer(self, v: Value) -> Node | None:
        return self.rw.made.get(self.rw.get(v))

    def simplify(self, n: Node) -> Value | None:
        rw = self.rw
        ins = [rw.get(v) for v in n.inputs]
        out = n.outputs[0]
        if ins and _identity(n, ins[0]):
            return ins[0]
        handler = getattr(self, "_" + n.op, None)
        result = handler(n, ins) if handler is not None else None
        if result is None and n.op in _SPLAT_THROUGH:
            result = self._splat_through(n, ins[0])
        if result is not None and result.type != out.type:
            return None
        return result

    # -- arithmetic identities
    def _is(self, v: Value, k) -> bool:
        s = self.rw.splat(v)
        return s is not None and s == k

    def _mul(self, n, ins):
        a, b = ins
        if self._is(b, 1):
            return a
        if self._is(a, 1):
            return b
        return None

    def _select(self, n, ins):
        pred, on_true, on_false = ins
        s = self.rw.splat(pred)
        if s is None:
            return None
        return on_true if bool(s) else on_false

    def _add(self, n, ins):
        a, b = ins
        if self._is(b, 0):
            return a
        if self._is(a, 0):
            return b
        return None

    def _sub(self, n, ins):
        return ins[0] if self._is(ins[1], 0) else None

    def _pow(self, n, ins):
        return ins[0] if self._is(ins[1], 1) else None

    def _neg(self, n, ins):
        p = self.producer(ins[0])
        return p.inputs[0] if p is not None and p.op == "neg" else None

    def _div(self, n, ins):
        a, b = ins
        if self._is(b, 1):
            return a
        dt = a.dtype
        if not dt.is_float:
            return None
        rw = self.rw
        p = self.producer(b)
        bcast = p if p is not None and p.op == "broadcast_in_dim" else None
        src = rw.get(bcast.inputs[0]) if bcast is not None else b
        c = rw.constants.get(src)
        if c is None:
            return None
        recip = _power_of_two_reciprocal(c, dt)
        if recip is None:
            return None
        r = rw.constant(recip.astype(dt.np), f"{src.name}.recip", dt)
        if bcast is not None:
            r = rw.add("broadcast_in_dim", r, name=n.name, **bcast.attrs)
        return rw.add("mul", a, r, name=n.name)

    # -- data movement
    def _transpose(self, n, ins):
        p = self.producer(ins[0])
        if p is not None and p.op == "reshape":
            return self._transpose_of_pulled_reshape(n, p)
        if p is None or p.op != "transpose":
            return None
        inner, outer = p.attrs["permutation"], n.attrs["permutation"]
        perm = tuple(inner[i] for i in outer)
        src = self.rw.get(p.inputs[0])
        if perm == tuple(range(len(perm))):
            return src
        return self.rw.add("transpose", src, name=n.name, permutation=perm)

    def _reshape(self, n, ins):
        p = self.producer(ins[0])
        if p is not None and p.op == "transpose":
            pulled = _pull_reshape(self.rw.get(p.inputs[0]), p.attrs["permutation"], n.outputs[0].shape)
            if pulled is not None and pulled[1] == tuple(range(len(pulled[1]))):
                return self.rw.add("reshape", self.rw.get(p.inputs[0]), name=n.name, shape=pulled[0])
            return None
        if p is None or p.op != "reshape":
            return None
        src = self.rw.get(p.inputs[0])
        if src.shape == n.outputs[0].shape:
            return src
        return self.rw.add("reshape", src, name=n.name, shape=tuple(n.attrs["shape"]))

    def _transpose_of_pulled_reshape(self, n, reshape):
        """transpose(reshape(transpose(x, p)), r) = transpose(reshape(x, s), q then r): one transpose fewer."""
        t = self.producer(self.rw.get(reshape.inputs[0]))
        if t is None or t.op != "transpose":
            return None
        x = self.rw.get(t.inputs[0])
        pulled = _pull_reshape(x, t.attrs["permutation"], reshape.outputs[0].shape)
        if pulled is None:
            return None
        shape, q = pulled
        perm = tuple(q[i] for i in n.attrs["permutation"])
        r = self.rw.add("reshape", x, name=n.name, shape=shape) if shape != x.shape else x
        return r if perm == tuple(range(len(perm))) else self.rw.add("transpose", r, name=n.name, permutation=perm)

    def _broadcast_in_dim(self, n, ins):
        p = self.producer(ins[0])
        if p is None or p.op != "broadcast_in_dim":
            return None
        inner, outer = p.attrs["broadcast_dimensions"], n.attrs["broadcast_dimensions"]
        return self.rw.add("broadcast_in_dim", self.rw.get(p.inputs[0]), name=n.name,
                           shape=tuple(n.attrs["shape"]), broadcast_dimensions=tuple(outer[d] for d in inner))

    def _convert(self, n, ins):
        p = self.producer(ins[0])
        if p is None or p.op != "convert":
            return None
        src = self.rw.get(p.inputs[0])
        if p.outputs[0].dtype.name not in _EXACT_WIDER[src.dtype.name]:
            return None
        mode = n.attrs.get("round_mode", "up")
        if src.dtype == n.outputs[0].dtype:
            # e8m0's code 0 (2^-127) is an f32 subnormal whose mantissa bit rounds 'up' to code 1
            return None if src.dtype.is_scale and mode == "up" else src
        sat = {"saturate": True} if n.attrs.get("saturate") else {}   # the middle type held src exactly
        if n.outputs[0].dtype.is_scale:
            sat["round_mode"] = mode
        return self.rw.add("convert", src, name=n.name, dtype=n.attrs["dtype"], **sat)

    def _splat_through(self, n, x):
        """An injective op of a constant-valued tensor: a broadcast of one 0-d constant."""
        out = n.outputs[0]
        s = self.rw.splat(x)
        if s is None or D.upper(out.type.size) <= 1:
            return None
        p = self.producer(x)
        src = self.rw.get(p.inputs[0]) if p is not None and p.op == "broadcast_in_dim" else None
        if n.op == "broadcast_in_dim" and src is not None and src.type.rank == 0:
            return None     # already canonical
        if n.op == "broadcast_in_dim" and x in self.rw.constants and x.type.rank == 0:
            return None
        rw = self.rw
        c = rw.constant(np.array(s, dtype=out.dtype.np), f"{n.name or 'splat'}.scalar", out.dtype)
        return rw.add("broadcast_in_dim", c, name=n.name, shape=out.shape, broadcast_dimensions=())


def run(graph: Graph) -> Graph:
    """A new Graph with the local simplifications above applied in one sweep."""
    return _Simplifier(graph).run()

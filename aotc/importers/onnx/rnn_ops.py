"""ONNX RNN, GRU and LSTM, unrolled over the (static) sequence at import time.

aotc graphs have no loops, so a recurrence of T steps becomes T copies of the
cell. The input projection X·Wᵀ (plus the biases that do not depend on the
state) is ONE dot_general over all steps; each step adds only its recurrent
H·Rᵀ and the gate math, which fuses into a few kernels per step.

sequence_lens masks by select: a batch entry past its length keeps its state
and writes zeros to Y, so Y_h/Y_c hold the state of its last valid step (for
direction=reverse, its first step is the entry's last valid one; an entry of
length 0 gets zero states). Where the spec is silent, aotc follows
onnxruntime: activation_alpha/beta are consumed in order by the activations
that take them, with onnxruntime's defaults.
"""
from __future__ import annotations

import numpy as np

from aotc.importers.expr import Ex
from aotc.importers.onnx.ops import _softplus, register, reshape, scalar
from aotc.ir.graph import Value

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_DIRECTIONS = ("forward", "reverse", "bidirectional")
# lower-case name -> (takes alpha, takes beta, default alpha, default beta), as onnxruntime
_ACTIVATIONS = {
    "relu": (False, False, 0.0, 0.0), "tanh": (False, False, 0.0, 0.0), "sigmoid": (False, False, 0.0, 0.0),
    "affine": (True, True, 0.0, 0.0), "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 0.0, 0.0), "scaledtanh": (True, True, 0.0, 0.0),
    "hardsigmoid": (True, True, 0.2, 0.5), "elu": (True, False, 1.0, 0.0),
    "softsign": (False, False, 0.0, 0.0), "softplus": (False, False, 0.0, 0.0),
}


class _BadAttr(ValueError):
    """An attribute value aotc cannot convert; its message is the reason."""


def _activations(op: str, at: dict, ndir: int) -> list[list[tuple[str, float, float]]]:
    """Per direction, the (name, alpha, beta) of each activation slot (f; f, g; f, g, h)."""
    n = len(_DEFAULT_ACTS[op])
    names = [a.lower() for a in at.get("activations", _DEFAULT_ACTS[op] * ndir)]
    if len(names) != n * ndir:
        raise _BadAttr(f"{len(names)} activations given, {op} with {ndir} direction(s) takes {n * ndir}")
    alphas, betas = list(at.get("activation_alpha", [])), list(at.get("activation_beta", []))
    out = []
    for name in names:
        if name not in _ACTIVATIONS:
            raise _BadAttr(f"activation '{name}' (supported: {', '.join(sorted(_ACTIVATIONS))})")
        takes_a, takes_b, da, db = _ACTIVATIONS[name]
        alpha = (alphas.pop(0) if alphas else da) if takes_a else 0.0
        beta = (betas.pop(0) if betas else db) if takes_b else 0.0
        out.append((name, alpha, beta))
    return [out[d * n:(d + 1) * n] for d in range(ndir)]


def _check(at, node, opset, dtype_of):
    dt = dtype_of(node.input[0])
    if dt is not None and not dt.is_float:
        return f"{dt} input (float only)"
    direction = at.get("direction", "forward")
    if direction not in _DIRECTIONS:
        return f"direction '{direction}' (supported: {', '.join(_DIRECTIONS)})"
    if at.get("layout", 0) not in (0, 1):
        return f"layout={at['layout']} (supported: 0, 1)"
    if node.op_type == "LSTM" and at.get("input_forget", 0) not in (0, 1):
        return f"input_forget={at['input_forget']} (supported: 0, 1)"
    try:
        _activations(node.op_type, at, 2 if direction == "bidirectional" else 1)
    except _BadAttr as e:
        return str(e)


def _activate(x: Ex, act: tuple[str, float, float]) -> Ex:
    name, alpha, beta = act
    if name == "relu":
        return x.max(0)
    if name in ("tanh", "sigmoid"):
        return x.un("tanh" if name == "tanh" else "logistic")
    if name == "affine":
        return x * alpha + beta
    if name == "leakyrelu":
        return (x * alpha).where(x.cmp("LT", 0), x)
    if name == "thresholdedrelu":
        return x.where(x.cmp("GT", alpha), 0)
    if name == "scaledtanh":
        return (x * beta).un("tanh") * alpha
    if name == "hardsigmoid":
        return (x * alpha + beta).max(0).min(1)
    if name == "elu":
        return ((x.un("exp") - 1.0) * alpha).where(x.cmp("LT", 0), x)
    if name == "softsign":
        return x / (1.0 + x.un("abs"))
    return _softplus(x)


class _Cell:
    """One direction's weights, activations and options; `step` advances the state by one time step."""

    def __init__(self, ctx, op: str, at: dict, w: Value, r: Value, b: Value | None, p: Value | None, acts):
        self.ctx, self.op, self.acts = ctx, op, acts
        self.hidden = r.shape[-1]
        self.clip = at.get("clip")
        self.lbr = op == "GRU" and at.get("linear_before_reset", 0) != 0
        self.input_forget = op == "LSTM" and at.get("input_forget", 0) != 0
        h, g = self.hidden, _GATES[op]
        self.w, self.r = w, r
        if op == "GRU" and not self.lbr:    # the h gate's recurrence multiplies r * H first
            self.r, self.r_h = self._rows(r, 0, 2 * h), self._rows(r, 2 * h, 3 * h)
        self.rb_h = None                    # a recurrent bias that cannot move into the projection
        self.in_bias = None
        if b is not None:
            wb, rb = self._rows(b, 0, g * h), self._rows(b, g * h, 2 * g * h)
            if self.lbr:                    # Rbh sits inside r * (H·Rhᵀ + Rbh)
                self.rb_h = self._rows(rb, 2 * h, 3 * h)
                rb = ctx.add("concatenate", self._rows(rb, 0, 2 * h), scalar(ctx, 0, rb.dtype, (h,)), dimension=0)
            self.in_bias = ctx.add("add", wb, rb)
        self.p = None if p is None else [self._rows(p, k * h, (k + 1) * h) for k in range(3)]   # i, o, f

    def _rows(self, v: Value, lo: int, hi: int) -> Value:
        """v[lo:hi] along the leading axis."""
        return self.ctx.add("slice", v, start=(lo,) + (0,) * (v.type.rank - 1), limit=(hi,) + v.shape[1:],
                            stride=(1,) * v.type.rank)

    def project(self, x: Value) -> Value:
        """X·Wᵀ + the state-independent biases, for every time step at once: (..., gates*hidden)."""
        ctx = self.ctx
        xw = ctx.add("dot_general", x, self.w, lhs_batch=(), rhs_batch=(), lhs_contract=(2,), rhs_contract=(1,))
        if self.in_bias is None:
            return xw
        bias = ctx.add("broadcast_in_dim", self.in_bias, shape=xw.shape, broadcast_dimensions=(2,))
        return ctx.add("add", xw, bias)

    def _recur(self, h: Value, r: Value) -> Value:
        return self.ctx.add("dot_general", h, r, lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(1,))

    def _gate(self, v: Value, k: int) -> Ex:
        hs = self.hidden
        return Ex(self.ctx, self.ctx.add("slice", v, start=(0, k * hs), limit=(v.shape[0], (k + 1) * hs),
                                         stride=(1, 1)))

    def _pre(self, x: Ex) -> Ex:
        """Clip (if set) applies to every activation's input."""
        return x if self.clip is None else x.max(-float(self.clip)).min(float(self.clip))

    def _peep(self, pre: Ex, k: int, c: Value) -> Ex:
        """pre + P[k] * c where the LSTM has peepholes (k: 0 input, 1 output, 2 forget gate)."""
        if self.p is None:
            return pre
        vec = self.ctx.add("broadcast_in_dim", self.p[k], shape=c.shape, broadcast_dimensions=(1,))
        return pre + Ex(self.ctx, vec) * c

    def step(self, xt: Value, h: Value, c: Value | None) -> tuple[Value, Value | None]:
        """xt: this step's projection (batch, gates*hidden); returns the new (h, c)."""
        f = self.acts[0]
        hr = self._recur(h, self.r)
        if self.op == "RNN":
            return _activate(self._pre(Ex(self.ctx, xt) + hr), f).v, None
        if self.op == "GRU":
            z = _activate(self._pre(self._gate(xt, 0) + self._gate(hr, 0)), f)
            rr = _activate(self._pre(self._gate(xt, 1) + self._gate(hr, 1)), f)
            if self.lbr:
                rec = self._gate(hr, 2)
                if self.rb_h is not None:
                    rec = rec + self.ctx.add("broadcast_in_dim", self.rb_h, shape=h.shape, broadcast_dimensions=(1,))
                rec = rr * rec
            else:
                rec = Ex(self.ctx, self._recur((rr * h).v, self.r_h))
            hh = _activate(self._pre(self._gate(xt, 2) + rec), self.acts[1])
            return ((1.0 - z) * hh + z * h).v, None
        g = [self._gate(xt, k) + self._gate(hr, k) for k in range(4)]   # i, o, f, c
        i = _activate(self._pre(self._peep(g[0], 0, c)), f)
        fg = 1.0 - i if self.input_forget else _activate(self._pre(self._peep(g[2], 2, c)), f)
        cell = fg * c + i * _activate(self._pre(g[3]), self.acts[1])
        o = _activate(self._pre(self._peep(g[1], 1, cell.v)), f)
        return (o * _activate(cell, self.acts[2])).v, cell.v


def _take(ctx, v: Value, axis: int, k: int) -> Value:
    """v[k] along `axis`."""
    start = tuple(k if a == axis else 0 for a in range(v.type.rank))
    limit = tuple(k + 1 if a == axis else d for a, d in enumerate(v.shape))
    s = ctx.add("slice", v, start=start, limit=limit, stride=(1,) * v.type.rank)
    return reshape(ctx, s, v.shape[:axis] + v.shape[axis + 1:])


def _step_masks(ctx, lens: Value | None, steps: int, batch: int, hidden: int) -> list[Value | None]:
    """Per step, a (batch, hidden) bool 'step < length', or None where every entry is valid."""
    if lens is None:
        return [None] * steps
    known = ctx.maybe_static(lens)
    if known is not None and np.all(np.asarray(known) >= steps):
        return [None] * steps
    out = []
    for t in range(steps):
        valid = ctx.add("compare", lens, scalar(ctx, t, lens.dtype, (batch,)), direction="GT")
        out.append(ctx.add("broadcast_in_dim", valid, shape=(batch, hidden), broadcast_dimensions=(0,)))
    return out


def _run_direction(ctx, cell: _Cell, x: Value, layout: int, reverse: bool, h: Value, c: Value | None, masks):
    """Unroll one direction; returns (per-step outputs in time order, final h, final c)."""
    xw = cell.project(x)
    steps = x.shape[layout]
    ys: list[Value | None] = [None] * steps
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        h_new, c_new = cell.step(_take(ctx, xw, layout, t), h, c)
        if masks[t] is None:
            ys[t], h, c = h_new, h_new, c_new
        else:
            ys[t] = Ex(ctx, h_new).where(masks[t], 0).v
            h = ctx.add("select", masks[t], h_new, h)
            c = None if c is None else ctx.add("select", masks[t], c_new, c)
    if masks[0] is not None:    # an entry of length 0 ends with zero states, as in onnxruntime
        h = Ex(ctx, h).where(masks[0], 0).v
        c = None if c is None else Ex(ctx, c).where(masks[0], 0).v
    return ys, h, c


def _state(ctx, v: Value | None, layout: int, d: int, batch: int, hidden: int, dtype) -> Value:
    return scalar(ctx, 0, dtype, (batch, hidden)) if v is None else _take(ctx, v, layout, d)


def _stack(ctx, vs: list[Value], axis: int) -> Value:
    """Stack equal-shape values along a new axis `axis`."""
    parts = [reshape(ctx, v, v.shape[:axis] + (1,) + v.shape[axis:]) for v in vs]
    return parts[0] if len(parts) == 1 else ctx.add("concatenate", *parts, dimension=axis)


@register("RNN", "GRU", "LSTM", check=_check)
def _recurrent(ctx, ins, at):
    op = ctx.op_type
    ins = list(ins) + [None] * (8 - len(ins))
    x, w, r, b, lens, h0, c0, p = ins
    layout = at.get("layout", 0)
    direction = at.get("direction", "forward")
    ndir = 2 if direction == "bidirectional" else 1
    try:
        acts = _activations(op, at, ndir)
    except _BadAttr as e:
        raise ctx.fail(str(e)) from None
    hidden = r.shape[-1]
    if at.get("hidden_size", hidden) != hidden or w.shape[1] != _GATES[op] * hidden:
        raise ctx.model_error(f"hidden_size {at.get('hidden_size')} does not match W {w.type} / R {r.type}")
    batch = x.shape[1 - layout]
    masks = _step_masks(ctx, lens, x.shape[layout], batch, hidden)
    ys, hs, cs = [], [], []
    for d in range(ndir):
        cell = _Cell(ctx, op, at, _take(ctx, w, 0, d), _take(ctx, r, 0, d),
                     None if b is None else _take(ctx, b, 0, d), None if p is None else _take(ctx, p, 0, d),
                     acts[d])
        h = _state(ctx, h0, layout, d, batch, hidden, x.dtype)
        c = _state(ctx, c0, layout, d, batch, hidden, x.dtype) if op == "LSTM" else None
        y, h, c = _run_direction(ctx, cell, x, layout, direction == "reverse" or d == 1, h, c, masks)
        ys.append(y)
        hs.append(h)
        cs.append(c)
    # layout 0: Y (T, dirs, batch, hidden), states (dirs, batch, hidden); layout 1: batch first
    steps = [_stack(ctx, [ys[d][t] for d in range(ndir)], layout) for t in range(len(ys[0]))]
    outs = [_stack(ctx, steps, layout), _stack(ctx, hs, layout)]
    return outs + [_stack(ctx, cs, layout)] if op == "LSTM" else outs

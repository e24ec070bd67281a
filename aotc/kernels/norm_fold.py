"""A pre-norm GEMM's norm folded into its constant weights: the A tile is the raw input again.

A norm prologue (codegen_norm_prologue.py) normalizes every A element as it is
loaded, so the A tile cannot be copied by cp.async and each column block redoes
the norm in its main loop. Where the weights W, gamma and beta are constants the
norm is affine in x per row, and the GEMM splits into a GEMM of the raw input:

    LN(x) @ W = rstd[r] * (x @ W')[r, n] - mean[r] * rstd[r] * c1[n] + c2[n],
    W' = diag(gamma) W (in W's dtype),  c1 = colsum(W'),  c2 = beta @ W,

so the main loop runs on x and W' like any plain GEMM, and only the epilogue
reads the row statistics (the same pre-pass, codegen_norm_prologue.norm_row_stats,
its values indexed by the output row). RMSNorm is the case with no mean and no
beta. The analysis is symbolic over the region's nodes (`_Affine`): the lhs must be
a sum of terms (row statistic products) x (gamma-like column constants) x (x or 1)
with exactly one x term; anything else keeps the prologue.

Numerics: the correction acts on the f32 accumulator, never on a rounded GEMM
result. c1 is summed over the *rounded* W', so the mean term cancels the x term's
rounding exactly: the error is rstd * sum_k (x_k - mean)(W'_k - g_k W_k), bounded
by |x - mean| (the normalized input), not by |x|. What remains of the cancellation
is the f32 accumulation of x @ W', about sqrt(K) * 2^-24 * |mean| * |colsum W'|
before the rstd scale: negligible beside 16-bit operands, not beside f32 ones
(FOLDED_DTYPES says why only f16/bf16 GEMMs fold).

The derived constants are new Values with data (`Kernel.derived`): the package
places them with the weights (package/launch_plan.py). They are memoized per
graph, so the bucket variants of a dynamic region share one copy.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from aotc.ir import dtypes
from aotc.ir.graph import TensorType, Value
from aotc.kernels.codegen_norm_prologue import frontier, norm_groups
from aotc.kernels.emitter import literal

# Only 16-bit GEMMs fold. Their operands round to 2^-11 (2^-8) anyway, raw x is read exactly, and the
# fold makes the A tile asynchronous (GPT-2 small fp16: 376.3 -> 150.4 us predicted at batch 1). In f32
# the fold's cancellation is what remains: the f32 accumulation of x @ W' errs by about sqrt(K) 2^-24
# |mean| |colsum W'|, 2e-4 of the output at |mean| / std = 100 against the prologue's 1e-5, for 2.7%
# (GPT-2 small fp32 at batch 1: 1946.9 -> 1894.7 us); tf32 staging would round raw x, an error the mean
# term scales by |mean| / std. Both keep the exact normalizing prologue.
FOLDED_DTYPES = (dtypes.f16, dtypes.bf16)

_MEMO: dict[int, dict] = {}     # id(graph) -> {key: (W' Value, corrections, arrays)}, dropped with the graph


@dataclass(frozen=True)
class _Term:
    """scale * prod(row statistics ** power) * prod(column constants ** power), times x or not."""
    scale: float
    rows: tuple = ()          # ((Value, power), ...) sorted by name: row-shaped statistics of the pre-pass
    cols: tuple = ()          # ((Value, power), ...): constants over the norm's (= the GEMM's) K axis

    def times(self, other: "_Term") -> "_Term":
        return _Term(self.scale * other.scale, _merge(self.rows, other.rows), _merge(self.cols, other.cols))

    def inverse(self) -> "_Term":
        return _Term(1.0 / self.scale, tuple((v, -p) for v, p in self.rows), tuple((v, -p) for v, p in self.cols))


def _merge(a: tuple, b: tuple) -> tuple:
    power: dict = {}
    for v, p in a + b:
        power[v] = power.get(v, 0) + p
    return tuple(sorted(((v, p) for v, p in power.items() if p), key=lambda vp: (vp[0].name, id(vp[0]))))


@dataclass
class _Affine:
    """x_term * x + sum(consts): the symbolic value of one node of the lhs chain."""
    x: _Term | None = None
    consts: list = field(default_factory=list)

    def factor(self) -> _Term | None:
        """The single term of an x-free value, by which another can be multiplied."""
        return self.consts[0] if self.x is None and len(self.consts) == 1 else None

    def scaled(self, t: _Term) -> "_Affine":
        return _Affine(self.x.times(t) if self.x else None, [c.times(t) for c in self.consts])


@dataclass
class NormFold:
    """How one GEMM region runs on its raw input (see the module docstring)."""
    x: Value                  # what the A operand reads: the norm's input, lhs's shape and dtype
    weight: Value             # the graph constant the rhs reads (maybe through a transpose)
    folded: Value             # its stand-in param, W scaled by the x term's columns
    row_scale: _Term          # the accumulator's row factor (rows only)
    corrections: list         # [(_Term with rows only, Value c of shape (N,), f32)]
    arrays: dict              # derived Value -> np.ndarray
    unread: set               # region inputs no load reads any more (gamma, beta)


def plan_fold(graph, region, producer) -> NormFold | None:
    """The fold of `region`'s norm prologue into its weights, or None where the prologue stays."""
    anchor = region.anchor
    if anchor is None or anchor.op != "dot_general" or region.kind != "dot":
        return None
    lhs, rhs = anchor.inputs
    a = anchor.attrs
    if a["lhs_batch"] or a["rhs_batch"] or len(a["lhs_contract"]) != 1 or len(a["rhs_contract"]) != 1 \
            or a["lhs_contract"][0] != lhs.type.rank - 1 or lhs.dtype not in FOLDED_DTYPES \
            or rhs.dtype != lhs.dtype or a.get("out_dtype") is not None:
        return None
    members = [n for n in region.nodes if n is not anchor]
    groups = [g for g, in_prologue in norm_groups(members, anchor) if in_prologue]
    if len(groups) != 1:
        return None
    reduces = groups[0]
    stats = set(frontier(members, reduces[0].inputs[0].shape, reduces))
    weight, perm = _weight(rhs, producer, members, graph.constants)
    if weight is None or not _only_reader(graph, weight, rhs):
        return None
    produced = {v: n for n in members for v in n.outputs}
    walk = _Walk(produced, stats, graph.constants, lhs.shape)
    value = walk.eval(lhs)
    if value is None or value.x is None or walk.leaf.dtype != lhs.dtype or \
            any(len(t.cols) > 1 or any(p != 1 for _, p in t.cols) for t in [value.x] + value.consts):
        return None
    unread = _unread(walk.visited, members, stats, produced, {walk.leaf, weight}, region)
    folded, corrections, arrays = _derive(graph, weight, perm, a["rhs_contract"][0], value, lhs.dtype)
    return NormFold(walk.leaf, weight, folded, _Term(value.x.scale, value.x.rows), corrections, arrays, unread)


def _weight(rhs: Value, producer, members, constants) -> tuple[Value | None, tuple | None]:
    """(the graph constant rhs reads, the permutation rhs applies to it): rhs itself, or a transpose of it
    inside the region (ONNX Gemm's transB)."""
    node = producer.get(rhs)
    if node is not None and node in members:
        if node.op != "transpose" or node.inputs[0] not in constants:
            return None, None
        return node.inputs[0], tuple(node.attrs["permutation"])
    if rhs not in constants:
        return None, None
    return rhs, tuple(range(rhs.type.rank))


def _only_reader(graph, weight: Value, rhs: Value) -> bool:
    """Whether this GEMM's rhs is the weight's one use: a weight read elsewhere too (GPT-2's tied
    embedding and LM head) would be shipped twice, as W and as W'."""
    readers = [n for n in graph.nodes if weight in n.inputs]
    return weight not in graph.outputs and len(readers) == 1 and \
        (readers[0].outputs[0] is rhs or rhs in readers[0].inputs)


class _Walk:
    """Symbolic evaluation of the lhs chain down to its one full-shape input (the norm's x)."""

    def __init__(self, produced, stats, constants, shape):
        self.produced, self.stats, self.constants, self.shape = produced, stats, constants, tuple(shape)
        self.leaf: Value | None = None
        self.visited: set = set()
        self.memo: dict = {}

    def eval(self, v: Value) -> _Affine | None:
        if v not in self.memo:
            self.memo[v] = self._eval(v)
        return self.memo[v]

    def _eval(self, v: Value) -> _Affine | None:
        node = self.produced.get(v)
        if node is None:
            if v in self.constants or tuple(v.shape) != self.shape or (self.leaf is not None and v is not self.leaf):
                return None
            self.leaf = v
            return _Affine(_Term(1.0))
        self.visited.add(node)
        if node.op == "broadcast_in_dim" and tuple(v.shape) == self.shape:
            return self._broadcast(node)
        if tuple(v.shape) != self.shape:
            return None
        if node.op == "convert" and node.inputs[0].dtype.is_float and v.dtype.is_float:
            return self.eval(node.inputs[0])
        if node.op == "neg":
            x = self.eval(node.inputs[0])
            return x.scaled(_Term(-1.0)) if x else None
        if node.op not in ("add", "sub", "mul", "div"):
            return None
        x, y = (self.eval(w) for w in node.inputs)
        if x is None or y is None:
            return None
        if node.op in ("add", "sub"):
            if node.op == "sub":
                y = y.scaled(_Term(-1.0))
            if x.x is not None and y.x is not None:
                return None                       # two x terms: x @ W would be needed twice
            return _Affine(x.x or y.x, x.consts + y.consts)
        if node.op == "mul":
            f, other = (y.factor(), x) if y.factor() else (x.factor(), y)
            return other.scaled(f) if f is not None else None
        f = y.factor()
        if f is None or any(_zero(self.constants[c]) for c, _ in f.cols) or f.scale == 0:
            return None
        return x.scaled(f.inverse())

    def _broadcast(self, node) -> _Affine | None:
        src = node.inputs[0]
        dims = tuple(node.attrs["broadcast_dimensions"])
        last = len(self.shape) - 1
        if src in self.constants:
            arr = np.asarray(self.constants[src])
            if arr.size == 1:
                return _Affine(None, [_Term(float(arr.reshape(-1)[0]))])
            if dims == (last,) and src.shape == (self.shape[last],):
                return _Affine(None, [_Term(1.0, (), ((src, 1),))])
            return None
        if src in self.stats:           # a row statistic: no dim of it follows the K axis
            if last in dims and src.shape[dims.index(last)] != 1:
                return None
            return _Affine(None, [_Term(1.0, ((src, 1),))])
        inner = self.produced.get(src)
        if inner is not None and inner.op == "broadcast_in_dim" and inner.inputs[0] in self.constants \
                and np.asarray(self.constants[inner.inputs[0]]).size == 1:
            self.visited.add(inner)
            return _Affine(None, [_Term(float(np.asarray(self.constants[inner.inputs[0]]).reshape(-1)[0]))])
        return None


def _zero(a) -> bool:
    return bool(np.any(np.asarray(a, np.float64) == 0))


def _unread(chain, members, stats, produced, keep, region) -> set:
    """Region inputs that only the folded chain read (gamma, beta): they leave the kernel's params."""
    needed: set = set()
    stack = list(stats)
    while stack:                        # the pre-pass computes the statistics: their nodes stay read
        v = stack.pop()
        n = produced.get(v)
        if n is not None and n not in needed:
            needed.add(n)
            stack += list(n.inputs)
    read_elsewhere = {v for n in members if n not in chain or n in needed for v in n.inputs}
    return {v for n in chain for v in n.inputs if v in region.inputs and v not in keep and v not in read_elsewhere}


def _derive(graph, weight: Value, perm, rhs_k: int, value: _Affine, dtype) -> tuple:
    """(W' Value, [(row term, c Value)], arrays), memoized per graph by what they are computed from."""
    def col(t):
        return t.cols[0] if t.cols else None

    groups: dict = {}
    for t in value.consts:                 # one correction vector per distinct row product
        groups.setdefault(t.rows, []).append(t)
    key = (weight, col(value.x), tuple((rows, tuple((t.scale, col(t)) for t in ts)) for rows, ts in groups.items()))
    memo = _MEMO.get(id(graph))
    if memo is None:
        memo = _MEMO[id(graph)] = {}
        weakref.finalize(graph, _MEMO.pop, id(graph), None)
    if key not in memo:
        memo[key] = _compute(graph, weight, perm, rhs_k, value, groups, dtype)
    return memo[key]


def _compute(graph, weight, perm, rhs_k, value, groups, dtype) -> tuple:
    w = np.asarray(graph.constants[weight]).astype(np.float64)
    axis = perm[rhs_k]                                  # the weight's own axis that the GEMM contracts
    logical = np.transpose(w, perm)                     # rhs as the GEMM reads it
    logical = np.moveaxis(logical, rhs_k, 0).reshape(w.shape[axis], -1)       # (K, N), N in rhs order

    def along(vec, a):
        shape = [1] * a.ndim
        shape[axis] = -1
        return a * vec.reshape(shape)

    def column(pair):
        v, p = pair
        return np.asarray(graph.constants[v]).astype(np.float64).reshape(-1) ** p

    gx = column(value.x.cols[0]) if value.x.cols else None
    folded_w = (along(gx, w) if gx is not None else w).astype(dtype.np)      # rounded as the GEMM reads it
    folded_logical = np.moveaxis(np.transpose(folded_w.astype(np.float64), perm), rhs_k, 0).reshape(logical.shape)
    folded = Value(f"{weight.name}.normfold", TensorType(weight.shape, dtype))
    arrays = {folded: folded_w}
    corrections = []
    for i, (rows, terms) in enumerate(groups.items()):
        c = np.zeros(logical.shape[1])
        for t in terms:
            if t.cols and value.x.cols and t.cols == value.x.cols:
                c += t.scale * folded_logical.sum(axis=0)   # the rounded W': cancels x @ W' exactly (docstring)
            elif t.cols:
                c += t.scale * (column(t.cols[0])[:, None] * logical).sum(axis=0)
            else:
                c += t.scale * logical.sum(axis=0)
        cv = Value(f"{weight.name}.normfold.c{i}", TensorType((logical.shape[1],), dtypes.f32))
        arrays[cv] = c.astype(np.float32)
        corrections.append((_Term(1.0, rows), cv))
    return folded, corrections, arrays


def row_expression(term: _Term, stat_expr: dict) -> str:
    """C expression of a row-only term, each statistic by its pre-pass expression (`stat_expr`)."""
    parts = [literal(term.scale, dtypes.f32) if term.scale != 1 else ""]
    for v, p in term.rows:
        e = stat_expr[v]
        parts += [e] * p if p > 0 else [f"(1.0f / {e})"] * -p
    parts = [p for p in parts if p]
    return " * ".join(parts) if parts else "1.0f"


def corrected(b, fold: NormFold, acc: str, column: str) -> str:
    """C expression of the GEMM's value from accumulator `acc` of flat output column `column`: the row
    scale times acc plus the corrections (the stats are the epilogue overrides norm_row_stats left,
    indexed by the output row m)."""
    stat_expr = b.epilogue_overrides

    def times(term, e):
        r = row_expression(term, stat_expr)
        return e if r == "1.0f" else f"{r} * {e}"

    parts = [times(fold.row_scale, acc)] + [times(t, f"{b.param_names[c]}[{column}]") for t, c in fold.corrections]
    return "(" + " + ".join(parts) + ")"


def fold_epilogue(b, fold: NormFold) -> None:
    """The anchor's value in dot_epilogue (accumulator `accv`, column `n`): the corrected accumulator."""
    b.epilogue_overrides[b.region.anchor.outputs[0]] = corrected(b, fold, "accv", "n")


__all__ = ["NormFold", "plan_fold", "fold_epilogue", "corrected", "row_expression"]

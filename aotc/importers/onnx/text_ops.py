"""ONNX converter for TfIdfVectorizer over integer token ids.

Every attribute is a constant and a row's length C is static, so the n-gram
counting the reference does with a trie walk unrolls at import time: for
each pooled n-gram size n, every window (start s, skip distance d) that fits
in a row is known, and the tokens at s, s+d, ..., s+(n-1)d are gathered with
one constant index per gram position. Comparing them with all grams of that
size at once and AND-ing over positions gives a [N, windows, grams] match
mask; summing over windows counts each gram. A constant one-hot dot then
scatters the counts into the output columns (ngram_indexes may map several
grams to one column, whose counts then add), and the IDF/TFIDF weights
apply elementwise.

The enumeration follows onnx/reference/ops/op_tfidf_vectorizer.py:
skip distances are 1 .. max_skip_count+1; unigrams are counted at distance
1 only (they do not depend on the skip) unless min_gram_length is below 1;
n-gram ids are numbered across all sizes in pool order, including sizes
outside [min_gram_length, max_gram_length], whose grams are never counted;
a gram listed twice keeps its last id. String pools/inputs are not supported.
"""
from __future__ import annotations

import numpy as np

from aotc.importers.expr import Ex
from aotc.importers.onnx.ops import broadcast_to, convert, register, reshape, scalar
from aotc.ir import dtypes
from aotc.ir.graph import Value

MAX_MATCH_ELEMENTS = 1 << 26   # elements of one [N, windows, grams] match mask
_MODES = ("TF", "IDF", "TFIDF")


def _tfidf_check(at, node, opset, dtype_of):
    if at.get("pool_strings"):
        return "pool_strings (string n-grams; only integer token ids are supported)"
    src = dtype_of(node.input[0]) if node.input else None
    if src is not None and src not in (dtypes.i32, dtypes.i64):
        return f"input dtype {src.name} (supported: int32, int64 token ids)"
    if at.get("mode") not in _MODES:
        return f"mode={at.get('mode')!r} (supported: {', '.join(_MODES)})"


def pooled_grams(ctx, at) -> dict[tuple[int, ...], int]:
    """{gram: output column} for the grams the op counts (sizes in [min, max])."""
    pool = [int(v) for v in at.get("pool_int64s", [])]
    counts = [int(v) for v in at.get("ngram_counts", [])]
    indexes = [int(v) for v in at.get("ngram_indexes", [])]
    lo, hi = int(at.get("min_gram_length", 1)), int(at.get("max_gram_length", 1))
    ids: dict[tuple[int, ...], int] = {}
    next_id = 0
    for i, start in enumerate(counts):
        n = i + 1
        end = counts[i + 1] if i + 1 < len(counts) else len(pool)
        if end - start <= 0:
            continue
        k = (end - start) // n
        if lo <= n <= hi:
            for g in range(k):
                ids[tuple(pool[start + g * n:start + (g + 1) * n])] = next_id + g
        next_id += k
    if next_id > len(indexes):
        raise ctx.model_error(f"{next_id} pooled n-grams but only {len(indexes)} ngram_indexes")
    return {gram: indexes[i] for gram, i in ids.items()}


def _windows(n: int, c: int, min_len: int, max_skip: int) -> list[tuple[int, int]]:
    """(start, skip distance) of every window of an n-gram inside a row of length c."""
    skips = [1] if n == 1 and min_len == 1 else range(1, max_skip + 2)
    return [(s, d) for d in skips for s in range(c - d * (n - 1))]


def _count_size(ctx, x: Value, grams: list[tuple[int, ...]], wins) -> Value:
    """[N, len(grams)] f32 counts of the same-size `grams` over the windows `wins` of x [N, C]."""
    rows, k, g = x.shape[0], len(wins), len(grams)
    if rows * k * g > MAX_MATCH_ELEMENTS:
        raise ctx.fail(f"{len(grams)} {len(grams[0])}-grams over {k} windows of {rows} rows need a match "
                       f"mask of {rows * k * g} elements (limit {MAX_MATCH_ELEMENTS})")
    shape = (rows, k, g)
    match = None
    for j in range(len(grams[0])):
        idx = ctx.const(np.array([s + j * d for s, d in wins], np.int64))
        tok = ctx.add("broadcast_in_dim", ctx.add("gather", x, idx, axis=1), shape=shape,
                      broadcast_dimensions=(0, 1))
        want = ctx.add("broadcast_in_dim", ctx.const(np.array([gr[j] for gr in grams], x.dtype.np), x.dtype),
                       shape=shape, broadcast_dimensions=(2,))
        eq = ctx.add("compare", tok, want, direction="EQ")
        match = eq if match is None else ctx.add("and", match, eq)
    return ctx.add("reduce", convert(ctx, match, dtypes.f32), axes=(1,), kind="sum")


def _fits(gram: tuple[int, ...], dt) -> bool:
    info = np.iinfo(dt.np)
    return all(info.min <= v <= info.max for v in gram)


@register("TfIdfVectorizer", check=_tfidf_check)
def _tfidf_vectorizer(ctx, ins, at):
    x = ins[0]
    if x.type.rank > 2:
        raise ctx.model_error(f"input must be [C] or [N, C], got {x.type}")
    x2 = reshape(ctx, x, (1, 1) if x.type.rank == 0 else (1, x.shape[0]) if x.type.rank == 1 else x.shape)
    rows, c = x2.shape
    columns = pooled_grams(ctx, at)
    width = max(int(v) for v in at["ngram_indexes"]) + 1 if at.get("ngram_indexes") else 0
    out_shape = (width,) if x.type.rank < 2 else (rows, width)
    min_len, max_skip = int(at.get("min_gram_length", 1)), int(at.get("max_skip_count", 0))
    by_size: dict[int, list[tuple[int, ...]]] = {}
    for gram in columns:   # a token id outside the input dtype's range can never match
        if _fits(gram, x2.dtype):
            by_size.setdefault(len(gram), []).append(gram)
    total = None
    for n, grams in sorted(by_size.items()):
        wins = _windows(n, c, min_len, max_skip)
        if not wins:
            continue
        onehot = np.zeros((len(grams), width), np.float32)
        onehot[np.arange(len(grams)), [columns[gr] for gr in grams]] = 1.0
        part = ctx.add("dot_general", _count_size(ctx, x2, grams, wins), ctx.const(onehot, dtypes.f32),
                       lhs_batch=(), rhs_batch=(), lhs_contract=(1,), rhs_contract=(0,))
        total = part if total is None else ctx.add("add", total, part)
    if total is None:
        return scalar(ctx, 0.0, dtypes.f32, out_shape)
    return reshape(ctx, _weigh(ctx, Ex(ctx, total), at, width).v, out_shape)


def _weigh(ctx, counts: Ex, at, width: int) -> Ex:
    """TF: the counts; IDF: weight (or 1) where counted; TFIDF: weight * count."""
    mode, w = at["mode"], at.get("weights")
    w = [] if w is None else [float(v) for v in w]
    if w and len(w) < width:
        raise ctx.model_error(f"{len(w)} weights for {width} output columns")
    if mode == "TF" or (mode == "TFIDF" and not w):
        return counts
    shape = counts.v.shape
    weight = Ex(ctx, broadcast_to(ctx, ctx.const(np.array(w[:width], np.float32), dtypes.f32), shape)
                if w else scalar(ctx, 1.0, dtypes.f32, shape))
    if mode == "TFIDF":
        return counts * weight
    return weight.where(counts.cmp("GT", 0.0), 0.0)

"""The expression emitter: C statements that compute a region value at an index.

Every kernel family asks the same question many times: "what is value v at
multi-index (i0, i1, ...)?". For a value read from memory that is a load at
a linearized offset; for a value computed inside the region it is the op's C
expression over its operands, and injective ops (broadcast, reshape,
transpose, slice, concatenate, pad, gather, iota) turn into index arithmetic,
so they never touch memory. Results are memoized per (value, index) within
a lexical scope, so `x * sigmoid(x)` loads x once.

Indices are C expressions (strings); `idx_t` is `int` unless a tensor in the
kernel has 2**31 elements or more. Floating-point values are computed in
`float` whatever their storage type (f16/bf16/float8/float4 are converted at
loads and stores; float8 and float4 with aotc_convert.cuh's functions), f64 in
`double`. int4/uint4/int2/uint2 are held one per byte and wrapped to their bits
at converts and stores.
"""
from __future__ import annotations

import math

import numpy as np

from aotc.errors import UnsupportedError
from aotc.ir import dtypes
from aotc.ir.dtypes import DType
from aotc.ir.graph import Node, Value


def compute_type(dt: DType) -> str:
    """The C type a value is held in while computing."""
    if dt == dtypes.f64:
        return "double"
    if dt.is_narrow_int and dt.is_signed:
        return "signed char"
    return "float" if dt.is_float else dt.c


def _is_byte_float(dt: DType) -> bool:
    """float8, float4 and the e8m0 scale type: one byte per element, converted by aotc_convert.cuh's
    functions (storage only: whether a type is a tensor-core operand is `DType.is_float8`)."""
    return dt.is_float and dt.itemsize == 1


E8M0_ROUND_MODES = {"up": "AOTC_E8M0_UP", "down": "AOTC_E8M0_DOWN", "nearest": "AOTC_E8M0_NEAREST"}


def float8_encode(value: str, dt: DType, saturate: bool = False, round_mode: str = "down") -> str:
    """C expression: the float8 (or float4) byte of `value` (nearest even; see aotc_convert.cuh).

    e8m0 takes ONNX Cast's round_mode; a store re-encodes a value that is already a power of
    two (a convert rounded it), which 'down' keeps exactly, 2^-127 (code 0) included."""
    sat = "true" if saturate else "false"
    if dt.is_scale:
        return f"aotc_to_{dt.name}((double)({value}), {sat}, {E8M0_ROUND_MODES[round_mode]})"
    return f"aotc_to_{dt.name}((double)({value}), {sat})"


def load_expr(ptr: str, offset: str, dt: DType) -> str:
    if dt == dtypes.f16:
        return f"__half2float({ptr}[{offset}])"
    if dt == dtypes.bf16:
        return f"__bfloat162float({ptr}[{offset}])"
    if _is_byte_float(dt):
        return f"aotc_from_{dt.name}({ptr}[{offset}])"
    if dt.is_narrow_int and dt.is_signed:
        return f"aotc_load_i{dt.bits}({ptr}[{offset}])"
    return f"{ptr}[{offset}]"


def store_expr(ptr: str, offset: str, value: str, dt: DType) -> str:
    if dt == dtypes.f16:
        return f"{ptr}[{offset}] = __float2half({value});"
    if dt == dtypes.bf16:
        return f"{ptr}[{offset}] = __float2bfloat16({value});"
    if _is_byte_float(dt):   # non-saturating, as the interpreter's astype; a saturating convert already clamped
        return f"{ptr}[{offset}] = {float8_encode(value, dt)};"
    if dt.is_narrow_int:
        return f"{ptr}[{offset}] = aotc_store_{dt.bits}bit({value});"
    return f"{ptr}[{offset}] = {value};"


def _wrap_narrow(value: str, dt: DType) -> str:
    return f"aotc_wrap_{'i' if dt.is_signed else 'u'}{dt.bits}((long long)({value}))"


def literal(x, dt: DType) -> str:
    """A C literal for one scalar of dtype `dt`, exact for f32 and f64."""
    if dt == dtypes.f64:
        f = float(x)
        if math.isnan(f):
            return "((double)__int_as_float(0x7fc00000))"
        if math.isinf(f):
            return "((double)AOTC_INF)" if f > 0 else "(-(double)AOTC_INF)"
        return f"({f!r})" if ("." in repr(f) or "e" in repr(f)) else f"({f!r}.0)"
    if dt.is_float:
        f = float(np.float32(x))
        if math.isnan(f):
            return "__int_as_float(0x7fc00000)"
        if math.isinf(f):
            return "AOTC_INF" if f > 0 else "(-AOTC_INF)"
        return f"{f:.9g}f" if ("." in f"{f:.9g}" or "e" in f"{f:.9g}") else f"{f:.1f}f"
    if dt == dtypes.boolean:
        return "true" if bool(x) else "false"
    if dt == dtypes.i64:
        v = int(x)
        return f"({v}LL)" if v != -2**63 else "(-9223372036854775807LL - 1)"
    if dt in (dtypes.u64, dtypes.u32):
        return f"({int(x)}{'ULL' if dt == dtypes.u64 else 'u'})"
    return f"(({compute_type(dt)}){int(x)})"


def strides(shape) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def linear(idx, shape) -> str:
    """C expression of the row-major offset of multi-index `idx` in `shape`."""
    terms = []
    for i, s, d in zip(idx, strides(shape), shape):
        if d == 1 or i == "0":
            continue
        terms.append(i if s == 1 else f"({i}) * {s}")
    return " + ".join(terms) if terms else "0"


def _binary(op: str, a: str, b: str, dt: DType) -> str:
    if op in ("add", "sub", "mul"):
        return f"({a} {dict(add='+', sub='-', mul='*')[op]} {b})"
    if op == "div":
        return f"({a} / {b})" if dt.is_float else f"({b} == 0 ? ({dt.c})0 : ({dt.c})({a} / {b}))"
    if op == "rem" and dt == dtypes.f64:
        return f"fmod({a}, {b})"
    if op == "rem":
        return f"fmodf({a}, {b})" if dt.is_float else f"({b} == 0 ? ({dt.c})0 : ({dt.c})({a} % {b}))"
    if op == "pow" and dt == dtypes.f64:
        return f"pow({a}, {b})"
    if op == "pow":
        return _float_pow(a, b) if dt.is_float else f"(({dt.c})pow((double){a}, (double){b}))"
    if op in ("max", "min"):
        return f"aotc_{op}({a}, {b})"
    if op in ("shift_left", "shift_right"):   # out-of-range shifts saturate (C leaves them undefined)
        bits = dt.value_bits
        out = f"(({b}) < 0 || ({b}) >= {bits})" if dt.is_signed else f"(({b}) >= {bits})"
        if op == "shift_left":
            return f"({out} ? ({dt.c})0 : ({dt.c})({a} << {b}))"
        full = f"({a} < 0 ? ({dt.c})-1 : ({dt.c})0)" if dt.is_signed else f"({dt.c})0"
        return f"({out} ? {full} : ({dt.c})({a} >> {b}))"
    if op in ("and", "or", "xor"):
        if dt == dtypes.boolean:
            return f"({a} {_BOOL_OPS[op]} {b})"
        return f"({dt.c})({a} {_BIT_OPS[op]} {b})"
    raise UnsupportedError(f"no C expression for binary op '{op}'")


# x ** n for a literal small integer n, as multiplications: a negative base keeps its
# sign (powf(-2, 3) = -8 under any flags), and no powf call (several ulp, a slow path).
# x*x is powf's exact answer; x*x*x is within 1 ulp of it. Other exponents call powf.
_INT_POWERS = {"2.0f": "({0} * {0})", "3.0f": "({0} * {0} * {0})",
               "4.0f": "(({0} * {0}) * ({0} * {0}))", "-1.0f": "(1.0f / {0})"}


def _float_pow(a: str, b: str) -> str:
    return _INT_POWERS[b].format(a) if b in _INT_POWERS else f"powf({a}, {b})"


_UNARY_F = {"sqrt": "sqrtf({})", "rsqrt": "rsqrtf({})", "exp": "expf({})", "log": "logf({})",
            "tanh": "tanhf({})", "logistic": "(1.0f / (1.0f + expf(-{})))", "erf": "erff({})",
            "floor": "floorf({})", "ceil": "ceilf({})", "round_even": "rintf({})",
            "sin": "sinf({})", "cos": "cosf({})", "abs": "fabsf({})", "neg": "(-{})",
            "sign": "(float)(({0} > 0.0f) - ({0} < 0.0f))",
            "tan": "tanf({})", "asin": "asinf({})", "acos": "acosf({})", "atan": "atanf({})",
            "sinh": "sinhf({})", "cosh": "coshf({})", "asinh": "asinhf({})", "acosh": "acoshf({})",
            "atanh": "atanhf({})"}
_BOOL_OPS = {"and": "&&", "or": "||", "xor": "!="}
_BIT_OPS = {"and": "&", "or": "|", "xor": "^"}
_COMPARE = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


# f64 runs CUDA's double-precision library on the GPU and libm on the host: correctly rounded
# for sqrt/floor/ceil/rint/fabs (and + - * / fmod), within their documented 1-2 ulp otherwise,
# the same contract as the f32 functions above
_UNARY_D = {"sqrt": "sqrt({})", "rsqrt": "(1.0 / sqrt({}))", "exp": "exp({})", "log": "log({})",
            "tanh": "tanh({})", "logistic": "(1.0 / (1.0 + exp(-{})))", "erf": "erf({})",
            "floor": "floor({})", "ceil": "ceil({})", "round_even": "rint({})",
            "sin": "sin({})", "cos": "cos({})", "abs": "fabs({})", "neg": "(-{})",
            "sign": "(double)(({0} > 0.0) - ({0} < 0.0))",
            "tan": "tan({})", "asin": "asin({})", "acos": "acos({})", "atan": "atan({})",
            "sinh": "sinh({})", "cosh": "cosh({})", "asinh": "asinh({})", "acosh": "acosh({})",
            "atanh": "atanh({})"}


def _unary(op: str, a: str, dt: DType) -> str:
    if dt == dtypes.f64 and op in _UNARY_D:
        return _UNARY_D[op].format(a)
    if dt.is_float and op in _UNARY_F:
        return _UNARY_F[op].format(a)
    if op == "neg":
        return f"({dt.c})(-{a})"
    if op == "abs":
        return f"({dt.c})({a} < 0 ? -{a} : {a})"
    if op == "sign":
        return f"({dt.c})(({a} > 0) - ({a} < 0))"
    if op == "not":
        return f"(!{a})" if dt == dtypes.boolean else f"({dt.c})(~{a})"
    raise UnsupportedError(f"no C expression for unary op '{op}' on {dt}")


def _convert(a: str, src: DType, dst: DType, saturate: bool = False, round_mode: str = "up") -> str:
    if dst == dtypes.boolean:
        return f"({a} != 0)"
    if _is_byte_float(dst):   # rounded here, so later ops in the region see the float8 value
        return f"aotc_from_{dst.name}({float8_encode(a, dst, saturate, round_mode)})"
    if dst.is_float:
        return f"({compute_type(dst)})({a})"
    if dst.is_narrow_int:
        return _wrap_narrow(a if not src.is_float else f"(long long)({a})", dst)
    return f"({dst.c})({a})"


def _bitcast(a: str, src: DType, dst: DType) -> str:
    """Same-width reinterpretation (the op table checks the pairs: f32 <-> i32, and bytes)."""
    if src == dst:
        return a
    if dst == dtypes.boolean:   # as the op table: a nonzero byte reads as true
        return f"({a} != 0)"
    if (src, dst) == (dtypes.f32, dtypes.i32):
        return f"__float_as_int({a})"
    if (src, dst) == (dtypes.i32, dtypes.f32):
        return f"__int_as_float({a})"
    if (src, dst) == (dtypes.f32, dtypes.u32):
        return f"__float_as_uint({a})"
    if (src, dst) == (dtypes.u32, dtypes.f32):
        return f"__uint_as_float({a})"
    if src == dtypes.f64 and dst in (dtypes.i64, dtypes.u64):
        return f"({dst.c})__double_as_longlong({a})"
    if dst == dtypes.f64 and src in (dtypes.i64, dtypes.u64):
        return f"__longlong_as_double((long long)({a}))"
    if not src.is_float and not dst.is_float:   # bytes: two's-complement wrap, as a C cast does
        return f"({dst.c})({a})"
    raise UnsupportedError(f"no C expression for bitcast_convert {src} -> {dst}")


class Emitter:
    """Emits statements into `lines`; `value(v, idx)` returns a C expression for v at idx.

    members: nodes computed inside the kernel; params: external Value -> pointer
    name; consts: small constants inlined as literals; bands: constant masks computed from the
    index (band_constants.py); overrides: Value -> C
    expression already computed (e.g. an anchor's accumulator), or a function
    of the index giving one (a gated epilogue's two accumulators).
    """

    def __init__(self, members, producer, params: dict[Value, str], consts: dict[Value, np.ndarray],
                 overrides: dict[Value, str] | None = None, idx_t: str = "int", indent: int = 2,
                 views: dict | None = None, bands: dict | None = None):
        self.views = views or {}          # view param -> (its source's shape, strides into it)
        self.bands = bands or {}          # constant -> band_constants.Band: index math, not a load
        self.members = set(members)
        self.producer = producer
        self.params = params
        self.consts = consts
        self.overrides = dict(overrides or {})
        self.idx_t = idx_t
        self.lines: list[str] = []
        self.depth = indent
        self.scopes: list[dict] = [{}]
        self._n = 0

    # -- plumbing
    def emit(self, line: str):
        self.lines.append("  " * self.depth + line)

    def tmp(self, prefix: str = "t") -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def open(self, header: str):
        self.emit(header + " {")
        self.depth += 1
        self.scopes.append({})

    def close(self, trailer: str = "}"):
        self.scopes.pop()
        self.depth -= 1
        self.emit(trailer)

    def text(self) -> str:
        return "\n".join(self.lines)

    def _memo_get(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    # -- values
    def value(self, v: Value, idx) -> str:
        idx = tuple(str(i) for i in idx)
        if v in self.overrides:           # a C expression, or a function of the index
            o = self.overrides[v]
            return o(idx) if callable(o) else o
        if v in self.consts and v.type.size == 1:
            return literal(self.consts[v].reshape(-1)[0], v.dtype)
        if v in self.bands:               # value[..., i, j] = inside if j - i <= k else outside
            band = self.bands[v]
            inside, outside = literal(band.inside, v.dtype), literal(band.outside, v.dtype)
            if inside == outside:
                return inside
            return f"((({idx[-1]}) - ({idx[-2]}) <= {band.k}) ? {inside} : {outside})"
        key = (v, idx)
        hit = self._memo_get(key)
        if hit is not None:
            return hit
        node = self.producer.get(v)
        if node is not None and node in self.members:
            out = self._node(node, idx)
        elif v in self.params:
            out = self.tmp()
            self.emit(f"const {compute_type(v.dtype)} {out} = "
                      f"{load_expr(self.params[v], linear(idx, v.shape), v.dtype)};")
        else:
            raise UnsupportedError(f"emitter: value %{v.name} is neither computed nor a parameter")
        self.scopes[-1][key] = out
        return out

    def _node(self, n: Node, idx) -> str:
        from aotc.ir import ops
        cat = ops.category(n.op)
        out_t = n.outputs[0].dtype
        if cat == ops.ELEMENTWISE:
            args = [self.value(v, idx) for v in n.inputs]
            expr = self._elementwise(n, args)
            name = self.tmp()
            self.emit(f"const {compute_type(out_t)} {name} = {expr};")
            return name
        handler = getattr(self, "_" + n.op, None)
        if handler is None:
            raise UnsupportedError(f"emitter: op '{n.op}' cannot be fused into a loop body")
        return handler(n, idx)

    def _elementwise(self, n: Node, args: list[str]) -> str:
        in_t = n.inputs[0].dtype if n.inputs else n.outputs[0].dtype
        op = n.op
        if op == "compare":
            return f"({args[0]} {_COMPARE[n.attrs['direction']]} {args[1]})"
        if op == "select":
            return f"({args[0]} ? {args[1]} : {args[2]})"
        if op == "clamp":
            return f"aotc_min(aotc_max({args[1]}, {args[0]}), {args[2]})"
        if op == "convert":
            return _convert(args[0], in_t, dtypes.from_name(n.attrs["dtype"]), bool(n.attrs.get("saturate", False)),
                            n.attrs.get("round_mode", "up"))
        if op == "bitcast_convert":
            return _bitcast(args[0], in_t, dtypes.from_name(n.attrs["dtype"]))
        if len(args) == 2:
            return _binary(op, args[0], args[1], in_t)
        return _unary(op, args[0], in_t)

    # -- injective ops: index math only
    def _broadcast_in_dim(self, n: Node, idx) -> str:
        src = n.inputs[0]
        dims = n.attrs["broadcast_dimensions"]
        return self.value(src, [idx[d] if src.shape[i] != 1 else "0" for i, d in enumerate(dims)])

    def _reshape(self, n: Node, idx) -> str:
        src = n.inputs[0]
        if src.type.size == 1:
            return self.value(src, ["0"] * src.type.rank)
        flat = self.tmp("f")
        self.emit(f"const {self.idx_t} {flat} = {linear(idx, n.outputs[0].shape)};")
        sub = []
        for i, (s, d) in enumerate(zip(strides(src.shape), src.shape)):
            if d == 1:
                sub.append("0")
                continue
            e = flat if s == 1 else f"{flat} / {s}"
            sub.append(e if i == 0 else f"({e}) % {d}")
        return self.value(src, sub)

    def _transpose(self, n: Node, idx) -> str:
        perm = n.attrs["permutation"]
        sub = [""] * len(perm)
        for i, p in enumerate(perm):
            sub[p] = idx[i]
        return self.value(n.inputs[0], sub)

    def _slice(self, n: Node, idx) -> str:
        if n.outputs[0] in self.params:       # a view: the param points at the slice's first element
            src = n.inputs[0]
            shape, strides = self.views.get(n.outputs[0], (src.shape, n.attrs["stride"]))
            sub = [i if k == 1 else f"({i}) * {k}" for i, k in zip(idx, strides)]
            out = self.tmp()
            self.emit(f"const {compute_type(src.dtype)} {out} = "
                      f"{load_expr(self.params[n.outputs[0]], linear(sub, shape), src.dtype)};")
            return out
        sub = []
        for i, s, k in zip(idx, n.attrs["start"], n.attrs["stride"]):
            e = i if k == 1 else f"({i}) * {k}"
            sub.append(e if s == 0 else f"{e} + {s}")
        return self.value(n.inputs[0], sub)

    def _concatenate(self, n: Node, idx) -> str:
        ax = n.attrs["dimension"]
        out = self.tmp()
        self.emit(f"{compute_type(n.outputs[0].dtype)} {out};")

        def assign(src, local):
            sub = list(idx)
            sub[ax] = local
            self.emit(f"{out} = {self.value(src, sub)};")
        self.concat_branches(n, idx[ax], assign)
        return out

    def concat_branches(self, n: Node, at: str, body) -> None:
        """One if/else branch per operand of concatenate `n`, on its axis coordinate `at`; body(operand,
        coordinate within it) emits inside each."""
        offset = 0
        for j, src in enumerate(n.inputs):
            end = offset + src.shape[n.attrs["dimension"]]
            if j == 0:
                self.open(f"if ({at} < {end})")
            elif j == len(n.inputs) - 1:
                self.open("else")
            else:
                self.open(f"else if ({at} < {end})")
            body(src, at if offset == 0 else f"({at}) - {offset}")
            self.close()
            offset = end

    def _pad(self, n: Node, idx) -> str:
        src, pv = n.inputs
        out = self.tmp()
        self.emit(f"{compute_type(n.outputs[0].dtype)} {out} = {self.value(pv, [])};")
        sub, conds = [], []
        for i, lo, d in zip(idx, n.attrs["low"], src.shape):
            j = i if lo == 0 else f"(({i}) - {lo})"
            sub.append(j)
            if lo:
                conds.append(f"{j} >= 0")
            conds.append(f"{j} < {d}")
        self.open(f"if ({' && '.join(conds) or 'true'})")
        self.emit(f"{out} = {self.value(src, sub)};")
        self.close()
        return out

    def _iota(self, n: Node, idx) -> str:
        return f"(({compute_type(n.outputs[0].dtype)})({idx[n.attrs['dimension']]}))"

    def _dim_values(self, n: Node, idx) -> str:
        """Element idx[0] of a list of sizes (the dynamic ones are the kernel's dim arguments)."""
        values = list(n.attrs["values"])
        expr = str(values[-1])
        for j in reversed(range(len(values) - 1)):
            expr = f"({idx[0]} == {j} ? {values[j]} : {expr})"
        return f"(({compute_type(n.outputs[0].dtype)})({expr}))"

    def _gather(self, n: Node, idx) -> str:
        data, ind = n.inputs
        ax = n.attrs["axis"]
        r = ind.type.rank
        k = self.value(ind, idx[ax:ax + r])
        g = self.tmp("g")
        size = data.shape[ax]
        # negative indices count from the end; out-of-range ones are clamped so a
        # bad index can never read outside the buffer
        self.emit(f"{self.idx_t} {g} = ({self.idx_t})({k});")
        self.emit(f"{g} = {g} < 0 ? {g} + {size} : {g};")
        self.emit(f"{g} = {g} < 0 ? 0 : ({g} >= {size} ? {size - 1} : {g});")
        return self.value(data, list(idx[:ax]) + [g] + list(idx[ax + r:]))

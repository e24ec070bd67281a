"""MLIR access for the StableHLO importer: parse, types, attributes, constants, locations.

Everything that touches jaxlib's MLIR Python bindings directly lives here, so
the converters read plain Python values (tuples of ints, numpy arrays). The
bindings are imported lazily: `aotc --help` and `aotc run` never load jaxlib.

Accepted inputs: MLIR text, MLIR bytecode, StableHLO portable artifacts
(VHLO bytecode from `stablehlo.serialize_portable_artifact` or jax), and
serialized `jax.export.Exported` bytes (which hold a portable artifact; jax
itself is imported only for this form).
"""
from __future__ import annotations

import re

import numpy as np

from aotc.errors import ModelError, UnsupportedError
from aotc.ir import dtypes

MLIR_MAGIC = b"ML\xefR"
ELEMENT_TYPES = {"f32": dtypes.f32, "f16": dtypes.f16, "bf16": dtypes.bf16, "i64": dtypes.i64,
                 "i32": dtypes.i32, "i8": dtypes.i8, "ui8": dtypes.u8, "i1": dtypes.boolean,
                 "f64": dtypes.f64, "i16": dtypes.i16, "ui16": dtypes.u16, "ui32": dtypes.u32, "ui64": dtypes.u64,
                 "f8E4M3FN": dtypes.f8e4m3fn, "f8E5M2": dtypes.f8e5m2, "f8E4M3FNUZ": dtypes.f8e4m3fnuz,
                 "f8E5M2FNUZ": dtypes.f8e5m2fnuz, "i4": dtypes.i4, "ui4": dtypes.u4, "i2": dtypes.i2,
                 "ui2": dtypes.u2, "f4E2M1FN": dtypes.f4e2m1fn}


def new_context():
    """An MLIR context with every dialect jax emits (func alone needs the upstream registry)."""
    from jaxlib.mlir import ir
    from jaxlib.mlir._mlir_libs import _jax_mlir_ext
    from jaxlib.mlir.dialects import chlo, sdy, stablehlo
    reg = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(reg)
    ctx = ir.Context()
    ctx.append_dialect_registry(reg)
    ctx.load_all_available_dialects()
    stablehlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    sdy.register_dialect(ctx)
    return ctx


def is_text(data: bytes) -> bool:
    head = data.lstrip()[:64]
    return head.startswith((b"module", b"func.func", b"#loc", b"//", b"\"builtin.module\"", b"#"))


def looks_like_stablehlo(data: bytes) -> bool:
    """True for MLIR bytecode, MLIR text or a jax.export flatbuffer (by its embedded MLIR)."""
    data = bytes(data[:1 << 20]) if len(data) > 1 << 20 else bytes(data)
    return data.startswith(MLIR_MAGIC) or is_text(data) or _is_jax_export(data)


def _is_jax_export(data: bytes) -> bool:
    # A flatbuffer starts with the root table offset; jax's Exported embeds the
    # module as a portable artifact, so the MLIR magic appears inside it.
    return len(data) > 8 and not data.startswith(MLIR_MAGIC) and MLIR_MAGIC in data \
        and int.from_bytes(data[:4], "little") < len(data)


def parse(ctx, data: bytes):
    """(module, export_info) from text, bytecode, a portable artifact or jax.export bytes."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo
    export_info = None
    if not data.startswith(MLIR_MAGIC) and not is_text(data):
        data, export_info = _unwrap_jax_export(data)
    with ctx, ir.Location.unknown():
        if data.startswith(MLIR_MAGIC):
            notes: list[str] = []    # the deserializer's diagnostics, kept off stderr
            handler = ctx.attach_diagnostic_handler(lambda d: _keep_note(notes, d))
            try:   # portable artifacts are VHLO; plain bytecode fails here and parses below
                return stablehlo.deserialize_portable_artifact(ctx, data), export_info
            except Exception:  # noqa: BLE001 - the bindings raise several types
                # A damaged artifact (its producer says it is one, or jax.export wrapped it) is
                # refused here: the generic parser aborts the process on some of them.
                if export_info is not None or b"StableHLO_v" in data[:32]:
                    raise ModelError(f"cannot read the StableHLO portable artifact, corrupt or truncated "
                                     f"({'; '.join(notes[:2]) or 'rejected by the deserializer'})") from None
            finally:
                handler.detach()
        try:
            return ir.Module.parse(data), export_info
        except Exception as e:  # noqa: BLE001
            raise ModelError(f"cannot parse StableHLO module: {' '.join(str(e).split())[:500]}") from None


def _keep_note(notes: list, diagnostic) -> bool:
    """Keep a diagnostic's text (skipped where it is not UTF-8) and tell MLIR it is handled."""
    try:
        notes.append(" ".join(str(diagnostic.message).split())[:200])
    except Exception:  # noqa: BLE001 - the bindings raise RuntimeError on invalid UTF-8
        pass
    return True


def _unwrap_jax_export(data: bytes):
    try:
        from jax import export as jax_export
    except ImportError:
        raise UnsupportedError("reading serialized jax.export bytes needs jax (pip install 'aotc[jax]')") from None
    try:
        exp = jax_export.deserialize(bytearray(data))
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"input is neither MLIR nor a serialized jax.export.Exported "
                         f"({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
    return bytes(exp.mlir_module_serialized), exp


# ----------------------------------------------------------------- types

def tensor_type(t, what: str):
    """(shape, DType) of a ranked tensor type, None for each dynamic (`?`) dim; UnsupportedError otherwise."""
    from jaxlib.mlir import ir
    if not isinstance(t, ir.RankedTensorType):
        raise UnsupportedError(f"{what} has type {t} (only ranked tensors are supported)")
    et = str(t.element_type)
    if et not in ELEMENT_TYPES:
        raise UnsupportedError(f"{what} has element type {et} (supported: {', '.join(ELEMENT_TYPES)})")
    return tuple(None if t.is_dynamic_dim(i) else int(d) for i, d in enumerate(t.shape)), ELEMENT_TYPES[et]


def type_problem(t) -> str | None:
    try:
        tensor_type(t, "value")
    except UnsupportedError as e:
        return str(e).removeprefix("value has ")
    return None


# ----------------------------------------------------------------- attributes

def attr(op, name, default=None):
    a = op.attributes
    return a[name] if name in a else default


def ints(op, name, default=None) -> tuple[int, ...] | None:
    """A DenseI64ArrayAttr / DenseIntElementsAttr / ArrayAttr of ints as a tuple."""
    a = attr(op, name)
    if a is None:
        return default
    try:
        return tuple(int(x) for x in a)
    except TypeError:
        return tuple(int(x) for x in np.array(a).reshape(-1))


def int_matrix(op, name) -> np.ndarray | None:
    """A dense<[[lo, hi], ...]> padding attribute as an (n, 2) int array."""
    a = attr(op, name)
    if a is None:
        return None
    return elements_to_numpy(a).astype(np.int64)


def scalar(op, name, default=None):
    a = attr(op, name)
    return default if a is None else a.value


def enum_text(a) -> str:
    """`#stablehlo<comparison_direction LT>` -> 'LT'."""
    return str(a).rstrip(">").split()[-1]


# ----------------------------------------------------------------- constants

_HEX = re.compile(r'dense<"0x([0-9A-Fa-f]*)">')


def elements_to_numpy(a) -> np.ndarray:
    """A DenseElementsAttr as a numpy array of its aotc dtype (bf16 through the printed form)."""
    shape, dt = tensor_type(a.type, "constant")
    if getattr(a, "is_splat", False):
        try:
            v = a.get_splat_value()
            return np.full(shape, _scalar_value(v), dtype=dt.np)
        except TypeError:
            pass
    try:
        arr = np.array(a)
        if arr.dtype == np.bool_ or dt != dtypes.boolean:
            return np.require(arr.reshape(shape).astype(dt.np), requirements="C")
    except TypeError:   # bf16 and other types the buffer protocol lacks
        pass
    return _from_text(str(a), shape, dt)


def _scalar_value(v):
    if hasattr(v, "value"):
        return v.value
    return np.array(v).item()


def _from_text(text: str, shape, dt) -> np.ndarray:
    m = _HEX.search(text)
    if m:
        raw = bytes.fromhex(m.group(1))
        arr = np.frombuffer(raw, dtype=dt.np if dt != dtypes.boolean else np.uint8)
        if arr.size == 1 and int(np.prod(shape)) != 1:   # a hex splat
            arr = np.full(shape, arr[0])
        return np.require(arr.reshape(shape).astype(dt.np), requirements="C")
    body = text[text.index("dense<") + 6: text.rindex(">")].strip()
    body = body.split(":")[0].strip().rstrip(">")
    toks = re.findall(r"0x[0-9A-Fa-f]+|[-+]?(?:inf|nan|[0-9.]+(?:[eE][-+]?[0-9]+)?)|true|false", body)
    vals = [_token(t, dt) for t in toks]
    if len(vals) == 1:
        return np.full(shape, vals[0], dtype=dt.np)
    return np.array(vals, dtype=dt.np).reshape(shape)


def _token(t: str, dt):
    if t in ("true", "false"):
        return t == "true"
    if t.startswith("0x"):   # a float given by its bit pattern
        bits = int(t, 16)
        if dt.is_float:   # bf16, f16, f32, f64 and float8 alike: the pattern at the type's width
            return np.array([bits], f"u{dt.itemsize}").view(dt.np)[0]
        return np.array([bits], np.uint32).view(np.float32)[0]
    return float(t) if dt.is_float else int(t)


# ----------------------------------------------------------------- locations

_NAME = re.compile(r'loc\("((?:[^"\\]|\\.)*)"')
_FILE = re.compile(r'"([^"]+)":(\d+):(\d+)')


def describe_loc(loc) -> str:
    """A short human form of an MLIR location: 'jit(f)/tanh at prog.py:7:11' or 'unknown'."""
    text = str(loc)
    name = _NAME.match(text)
    f = _FILE.search(text)
    parts = []
    if name and not (f and name.start(1) == f.start(1)):
        parts.append(name.group(1))
    if f:
        parts.append(f"{f.group(1).rsplit('/', 1)[-1]}:{f.group(2)}:{f.group(3)}")
    return " at ".join(parts) if parts else "unknown location"


def loc_name(loc) -> str | None:
    """The name of a NameLoc (jax names arguments this way), else None."""
    m = _NAME.match(str(loc))
    if not m or _FILE.match(str(loc), 4):
        return None
    return m.group(1)

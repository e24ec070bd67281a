"""What the StableHLO importer supports, as data: the source of docs/stablehlo_ops.md.

SPEC_OPS is the op list of the StableHLO specification (the `### <op>`
sections of openxla/stablehlo docs/spec.md: the 96 ops of the v1.0 opset
plus collective_broadcast, composite, tan and the six dynamism ops specced
since). A test checks each name against the `stablehlo` dialect registered
in jaxlib's MLIR bindings, so a typo or a renamed op cannot hide. Whether an
op is supported comes from the converter table itself (importer.CONVERTERS);
this module adds the notes: restrictions of supported ops, one reason per
missing op, and the status of the dialect's ops that the spec leaves out.
The `chlo` dialect has no spec of its own: its table lists every chlo op
registered in jaxlib's bindings, with CHLO_NOTES as restrictions and the
importer's UNSUPPORTED reasons for the rest. Regenerate the page with
`python -m aotc.importers.stablehlo.support > docs/stablehlo_ops.md`.
"""
from __future__ import annotations

SPEC_OPS = (
    "abs", "add", "after_all", "all_gather", "all_reduce", "all_to_all", "and", "atan2", "batch_norm_grad",
    "batch_norm_inference", "batch_norm_training", "bitcast_convert", "broadcast_in_dim", "case", "cbrt", "ceil",
    "cholesky", "clamp", "collective_broadcast", "collective_permute", "compare", "complex", "composite",
    "concatenate", "constant", "convert", "convolution", "cosine", "count_leading_zeros", "custom_call", "divide",
    "dot_general", "dynamic_broadcast_in_dim", "dynamic_conv", "dynamic_gather", "dynamic_iota", "dynamic_pad",
    "dynamic_reshape", "dynamic_slice", "dynamic_update_slice", "exponential", "exponential_minus_one", "fft",
    "floor", "gather", "get_dimension_size", "get_tuple_element", "if", "imag", "infeed", "iota", "is_finite",
    "log", "log_plus_one", "logistic", "map", "maximum", "minimum", "multiply", "negate", "not",
    "optimization_barrier", "or", "outfeed", "pad", "partition_id", "popcnt", "power", "real", "recv", "reduce",
    "reduce_precision", "reduce_scatter", "reduce_window", "remainder", "replica_id", "reshape", "reverse", "rng",
    "rng_bit_generator", "round_nearest_afz", "round_nearest_even", "rsqrt", "scatter", "select",
    "select_and_scatter", "send", "shift_left", "shift_right_arithmetic", "shift_right_logical", "sign", "sine",
    "slice", "sort", "sqrt", "subtract", "tan", "tanh", "transpose", "triangular_solve", "tuple",
    "uniform_dequantize", "uniform_quantize", "while", "xor",
)

# Supported without a converter of their own.
STRUCTURAL = {"composite": "inlined through its decomposition function (like func.call)"}

_FLOAT = "float only"
_STATIC = "the {} operand(s) must be computable at import time"
_SHAPE = "the shape operand must be computable at import time from constants and dims (dynamic dims allowed)"
RESTRICTIONS: dict[str, str] = {
    "atan2": _FLOAT, "cbrt": _FLOAT, "exponential_minus_one": _FLOAT, "log_plus_one": _FLOAT, "tan": _FLOAT,
    "round_nearest_afz": _FLOAT, "dot_general": _FLOAT, "convolution": f"{_FLOAT}; batch_group_count 1",
    "batch_norm_grad": _FLOAT, "batch_norm_inference": _FLOAT, "batch_norm_training": _FLOAT,
    "bitcast_convert": "equal element widths (f32<->i32, i8<->ui8, ...); not f16<->bf16 or float8 (computed "
                       "in f32, which loses NaN bit patterns), not i1 or i4/ui4 (narrower than a byte)",
    "partition_id": "0: an engine is one partition of one replica", "replica_id": "0: as partition_id",
    "reduce_precision": "to bf16, f16 or f32 formats",
    "custom_call": "sharding / device-placement annotations (identity); jax.export's shape_assertion (decided at "
                   "compile time over the dims' ranges); stablehlo.dynamic_reduce_window (as reduce_window)",
    "get_dimension_size": "a dynamic dim's size is computed at run time",
    "reduce": "bodies: add, multiply, maximum, minimum, and, or (one per input), jax's argmax/argmin pair",
    "reduce_window": "one input; add / maximum / minimum / multiply bodies (multiply: float, as exp of window "
                     "sums of log|x| with signs and zeros counted); no base dilation; integer min pooling unsupported",
    "scatter": "update bodies: return the update (duplicates: the last wins, as XLA on the CPU), add, multiply, "
               "maximum, minimum, and/or for bool; out-of-bounds windows skipped; O(operand x updates) work",
    "select_and_scatter": "select body: one compare of its arguments; scatter body: add/multiply/maximum/minimum",
    "shift_left": "integers", "shift_right_arithmetic": "integers", "shift_right_logical": "integers",
    "real": "float operands (complex types unsupported)", "imag": "float operands (zeros)",
    "while": "unrolled: the condition must be computable at import time at every iteration (fori_loop with "
             "static bounds, scan); at most 1024 iterations",
    "case": "index known at import time: one branch inlined; otherwise all branches computed and selected",
    "if": "predicate known at import time: one branch inlined; otherwise both computed and selected",
    "dynamic_pad": _STATIC.format("padding"),
    "dynamic_gather": _STATIC.format("slice_sizes") + " (dynamic dims allowed)",
    "dynamic_conv": _STATIC.format("padding") + f"; {_FLOAT}",
    "dynamic_reshape": _SHAPE, "dynamic_broadcast_in_dim": _SHAPE, "dynamic_iota": _SHAPE,
    "dynamic_slice": "start indices may be traced", "dynamic_update_slice": "start indices may be traced",
    "sort": "comparator of elementwise ops; rank-based, O(n^2) per sorted row; TOTALORDER takes NaNs as positive",
    "map": "body of elementwise ops, over all dimensions",
    "popcnt": "integers; one shift per bit", "count_leading_zeros": "integers; one shift per bit",
}

# Ops of jaxlib's stablehlo dialect that the spec does not list (legacy, dynamism, XLA-internal).
NOT_IN_SPEC: dict[str, str] = {
    "broadcast": "supported (legacy form of broadcast_in_dim)",
    "dot": "supported (legacy form of dot_general)",
    "return": "supported (region terminator)",
    "async_start": "no: XLA-internal asynchronous wrapper", "async_done": "no: XLA-internal asynchronous wrapper",
    "create_token": "no: tokens are not supported", "cross-replica-sum": "no: multi-device collective",
    "einsum": "no: legacy op, not emitted by jax", "unary_einsum": "no: legacy op, not emitted by jax",
    "torch_index_select": "no: legacy op, not emitted by jax",
    "real_dynamic_slice": "supported (bounds computable at import time from constants and dims; constant strides)",
    "set_dimension_size": "no: bounded dynamic shapes (XLA's padded form) are not supported",
}

_COLLECTIVE = "multi-device collective; aotc compiles single-device engines"
_TOKEN = "side-effecting host/device communication through tokens; aotc engines are pure dataflow"
MISSING: dict[str, str] = {
    "after_all": "orders token-carrying side effects; aotc has no tokens (engines are pure dataflow)",
    "all_gather": _COLLECTIVE, "all_reduce": _COLLECTIVE, "all_to_all": _COLLECTIVE,
    "collective_broadcast": _COLLECTIVE, "collective_permute": _COLLECTIVE, "reduce_scatter": _COLLECTIVE,
    "infeed": _TOKEN, "outfeed": _TOKEN, "send": _TOKEN, "recv": _TOKEN,
    "complex": "complex element types are not supported",
    "fft": "complex element types are not supported, and there is no FFT primitive",
    "get_tuple_element": "tuple types are not supported (jax does not emit tuples)",
    "tuple": "tuple types are not supported (jax does not emit tuples)",
    "cholesky": "a sequential matrix factorization; no primitive (jax on the CPU calls LAPACK instead)",
    "triangular_solve": "a sequential substitution; no primitive (jax on the CPU calls LAPACK instead)",
    "rng": "random generation with implementation-defined hidden state",
    "rng_bit_generator": "needs ui32/ui64 state and the Philox/ThreeFry bit algorithms; no primitive",
    "uniform_quantize": "quantized element types (!quant.uniform) are not supported",
    "uniform_dequantize": "quantized element types (!quant.uniform) are not supported",
}


_F32 = "computed in f32 (f16/bf16 widened and rounded back)"
CHLO_NOTES: dict[str, str] = {
    "broadcast_select": "numpy-style broadcasting of the three operands",
    "conj": "real operands (complex types unsupported): identity",
    "next_after": "f32 only (steps the bit pattern)",
    "ragged_dot": "the [m,k] x [g,k,n] -> [m,n] form (ragged rows, no batch dims): every group's product, masked",
    "top_k": "rank-based, O(n^2) per row",
    "lgamma": _F32, "digamma": _F32, "erf_inv": _F32, "bessel_i1e": _F32, "zeta": f"{_F32}; s > 1",
    "polygamma": _F32, "mulhi": "integers; 64-bit through 32-bit halves",
    **{f"broadcast_{op}": f"broadcasting, then as `stablehlo.{op}`" for op in (
        "add", "and", "atan2", "compare", "divide", "maximum", "minimum", "multiply", "or", "power",
        "remainder", "shift_left", "shift_right_arithmetic", "shift_right_logical", "subtract", "xor")},
    **{f"broadcast_{op}": f"broadcasting, then as `chlo.{op}`" for op in ("next_after", "polygamma", "zeta")},
}


def _converters() -> dict:
    from aotc.importers.stablehlo import importer
    importer.load_converters()
    return importer.CONVERTERS


def registry_ops() -> list[str]:
    """Names of the ops of the `stablehlo` dialect registered in jaxlib's MLIR bindings."""
    import inspect

    from jaxlib.mlir.dialects import _stablehlo_ops_gen as gen

    from aotc.importers.stablehlo import mlir as M
    ctx = M.new_context()
    names = {c.OPERATION_NAME for _, c in inspect.getmembers(gen, inspect.isclass)
             if getattr(c, "OPERATION_NAME", None)}
    return sorted(n.split(".", 1)[1] for n in names if ctx.is_registered_operation(n))


def chlo_registry_ops() -> list[str]:
    """Names (without `chlo.`) of the ops of the `chlo` dialect registered in jaxlib's MLIR bindings."""
    import inspect

    from jaxlib.mlir.dialects import _chlo_ops_gen as gen

    from aotc.importers.stablehlo import mlir as M
    ctx = M.new_context()
    names = {c.OPERATION_NAME for _, c in inspect.getmembers(gen, inspect.isclass)
             if getattr(c, "OPERATION_NAME", None)}
    return sorted(n.split(".", 1)[1] for n in names if ctx.is_registered_operation(n))


def chlo_table() -> list[dict]:
    """One dict per registered chlo op: op, supported, notes (restrictions, or why it is refused)."""
    from aotc.importers.stablehlo import importer
    conv = _converters()
    rows = []
    for op in chlo_registry_ops():
        ok = f"chlo.{op}" in conv
        notes = CHLO_NOTES.get(op, "") if ok else importer.UNSUPPORTED.get(f"chlo.{op}", "no converter")
        rows.append({"op": op, "supported": ok, "notes": notes})
    return rows


def support_table() -> list[dict]:
    """One dict per spec op: op, supported (bool), notes (restrictions, or the reason it is missing)."""
    conv = _converters()
    rows = []
    for op in SPEC_OPS:
        ok = f"stablehlo.{op}" in conv or op in STRUCTURAL
        notes = (STRUCTURAL.get(op) or RESTRICTIONS.get(op, "")) if ok else MISSING[op]
        rows.append({"op": op, "supported": ok, "notes": notes})
    return rows


def extra_ops() -> list[str]:
    """Ops outside the spec and chlo that the importer accepts (legacy stablehlo ops, sdy)."""
    return sorted(n for n in _converters() if not n.startswith("chlo.")
                  and (n.split(".", 1)[1] not in SPEC_OPS or not n.startswith("stablehlo.")))


def render_markdown() -> str:
    rows = support_table()
    ok = [r for r in rows if r["supported"]]
    lines = ["# StableHLO ops supported by aotc", "",
             "Generated by `python -m aotc.importers.stablehlo.support > docs/stablehlo_ops.md`; "
             "a test checks that this page matches the converter table.", "",
             f"**{len(ok)} of the {len(rows)} ops of the StableHLO specification are supported.** "
             "Element types: f64, f32, f16, bf16, f8E4M3FN, f8E5M2, f8E4M3FNUZ, f8E5M2FNUZ, i64, i32, i16, i8, "
             "i4, i2, ui64, ui32, ui16, ui8, ui4, ui2, f4E2M1FN, i1 (float8, float4 and 4/2-bit integers are "
             "storage types: convert to compute). Dynamic (`?`) dims: those of jax.export's "
             "symbolic shapes, each with the range the user gives. Every unsupported op "
             "in a program is reported at once, with its location, before anything is compiled.", "",
             "| op | supported | restrictions / reason |", "|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['op']} | {'yes' if r['supported'] else '**no**'} | {r['notes'] or '-'} |")
    lines += ["", "Ops of the `stablehlo` dialect (jaxlib's MLIR bindings) that the spec does not list: "
              + "; ".join(f"`{op}`: {NOT_IN_SPEC[op]}" for op in sorted(NOT_IN_SPEC)) + ".", "",
              "Also accepted, outside the spec: " + ", ".join(f"`{n}`" for n in extra_ops())
              + ", and `func.call` (private functions are inlined)."]
    chlo = chlo_table()
    lines += ["", "## chlo", "",
              f"**{sum(r['supported'] for r in chlo)} of the {len(chlo)} ops of the `chlo` dialect registered in "
              "jaxlib's MLIR bindings are supported**, as decompositions onto aotc's primitive ops.", "",
              "| op | supported | restrictions / reason |", "|---|---|---|"]
    for r in chlo:
        lines.append(f"| {r['op']} | {'yes' if r['supported'] else '**no**'} | {r['notes'] or '-'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_markdown(), end="")

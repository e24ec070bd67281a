"""Which arithmetic each kernel runs: the `math` that `aotc inspect` shows per kernel.

A user who quantized a model wants to see that its convs really run in int8,
and one who asked for tf32 that the GEMMs took the tf32 tensor cores. The
kernel source is not in the engine, so the compiler records each kernel's math
in the manifest (`kernel_math`, name -> math) when it builds it, and where an
architecture runs something else, what (`kernel_math_by_arch`): fp8 kernels
run e4m3 mma in the sm_90 cubin and the PTX, but the sm_80 cubin has no e4m3
instruction and widens the operands to f16 (exact) for f16 mma.

Values: "int8" and "fp8" (codegen_mma8.py's kernels; "int8" also for the int8 attention kernel), "tf32" (dot_tf32),
"f16"/"bf16" (dot_mma, attention_mma), and for every other kernel the type it computes in:
"f32" for any float region (the emitter computes f16/bf16 in f32), else the
integer or bool type of its output ("i64" for index math).
"""
from __future__ import annotations

from aotc.kernels.builder import Kernel
from aotc.kernels.codegen_mma8 import math_of as _quantized_math

MATHS = ("f32", "tf32", "f16", "bf16", "int8", "fp8")
FP8_ON_SM80 = "fp8 operands widened to f16 (exact), f16 tensor cores"   # what sm_80 (no e4m3 mma) runs


def kernel_math(kernel: Kernel) -> str:
    """The arithmetic `kernel` runs on the newest target (sm_90) and on the host build."""
    quantized = _quantized_math(kernel.name, kernel.source)
    if quantized:
        return quantized
    if kernel.name.startswith("aotc_attention_int8_"):     # i8/u8 Q·K and P·V, exact int sums
        return "int8"
    if kernel.name.startswith("aotc_dot_tf32_"):
        return "tf32"
    if kernel.name.startswith("aotc_dot_mma_"):
        return kernel.region.anchor.inputs[0].dtype.name
    if kernel.name.startswith("aotc_attention_mma_"):      # f16/bf16 Q·K and P·V on mma.m16n8k16
        return kernel.region.payload.match.qk.inputs[0].dtype.name
    values = [v for n in kernel.region.nodes for v in list(n.inputs) + list(n.outputs)] + list(kernel.params)
    if any(v.dtype.is_float for v in values):
        return "f32"
    return kernel.region.root.dtype.name


def math_by_arch(kernel: Kernel, archs) -> dict[str, str]:
    """arch -> what that cubin runs, for the archs where it differs from kernel_math (else empty)."""
    if kernel_math(kernel) != "fp8":
        return {}
    return {a: FP8_ON_SM80 for a in archs if int(a.split("_")[1].rstrip("af")) < 89}


def manifest_fields(kernels: list[Kernel], archs) -> dict:
    """The manifest's `kernel_math` (every kernel) and `kernel_math_by_arch` (only the kernels that differ)."""
    math = {k.name: kernel_math(k) for k in kernels}
    by_arch = {k.name: math_by_arch(k, archs) for k in kernels}
    return {"kernel_math": math, "kernel_math_by_arch": {n: m for n, m in by_arch.items() if m}}


__all__ = ["MATHS", "FP8_ON_SM80", "kernel_math", "math_by_arch", "manifest_fields"]

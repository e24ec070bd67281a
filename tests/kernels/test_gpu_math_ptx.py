"""Which PTX instructions each math function aotc emits becomes, under the real NVRTC and aotc's flags.

The host build computes these functions with libm, so the GPU must compute the
IEEE/CUDA-precise versions: `/` and sqrtf correctly rounded, no flush to zero,
and no fast-math lowering (powf as lg2.approx -> ex2.approx is NaN for negative
bases; tanh.approx, sin.approx, cos.approx lose accuracy). Each function the
emitter can write is compiled alone, and its `.approx`/`.ftz` instructions are
compared with a recorded set. The recorded ones are CUDA's math library's own:
it calls ex2/rcp/rsqrt approximations on range-reduced arguments and corrects
them, which is how it keeps its documented ulp bounds (test_host_math.py checks
the host against those bounds). A new flag, a new NVRTC or a new emitted
function that changes a set fails here and must be looked at.
"""
from __future__ import annotations

import re

import pytest

from aotc.ir import dtypes
from aotc.kernels import emitter
from aotc.kernels.nvrtc_compile import MATH_FLAGS, _key, _options, compile_device

F32 = dtypes.f32

# function -> the approximate/flushing instructions in its PTX (rsqrtf is the instruction itself,
# 2 ulp, without ftz; the rest live inside CUDA's precise math library).
EXPECTED = {
    "sqrt": set(), "rsqrt": {"rsqrt.approx.f32"}, "exp": {"ex2.approx.ftz.f32"}, "log": set(),
    "tanh": {"ex2.approx.ftz.f32", "rcp.approx.ftz.f32"}, "logistic": {"ex2.approx.ftz.f32"},
    "erf": {"ex2.approx.ftz.f32"}, "floor": set(), "ceil": set(), "round_even": set(),
    "sin": set(), "cos": set(), "abs": set(), "neg": set(), "sign": set(),
    "tan": {"rcp.approx.ftz.f32"}, "asin": {"rsqrt.approx.ftz.f32"}, "acos": {"rsqrt.approx.ftz.f32"},
    "atan": {"rcp.approx.ftz.f32"}, "sinh": {"div.approx.ftz.f32", "ex2.approx.ftz.f32"},
    "cosh": {"div.approx.ftz.f32", "ex2.approx.ftz.f32"},
    "asinh": {"rcp.approx.ftz.f32", "rsqrt.approx.ftz.f32"}, "acosh": {"rsqrt.approx.ftz.f32"},
    "atanh": {"rcp.approx.ftz.f32"},
    "div": set(), "rem": {"div.approx.f32", "rcp.approx.ftz.f32"}, "pow": {"rcp.approx.ftz.f32"},
    "pow2": set(), "pow3": set(), "fma": set(),
}
# What fast math would have made of them; none of these may appear anywhere.
FAST_ONLY = ("lg2.approx", "sin.approx", "cos.approx", "tanh.approx", "sqrt.approx", "div.full",
             "ex2.approx.f32")
# Instructions that must be there: IEEE division, square root and reciprocal, a non-flushing fma.
REQUIRED = {"div": "div.rn.f32", "sqrt": "sqrt.rn.f32", "logistic": "rcp.rn.f32", "fma": "fma.rn.f32"}


def _expressions() -> dict[str, str]:
    out = {op: emitter._unary(op, "a", F32) for op in emitter._UNARY_F}
    out.update(div=emitter._binary("div", "a", "b", F32), rem=emitter._binary("rem", "a", "b", F32),
               pow=emitter._binary("pow", "a", "b", F32), pow2=emitter._binary("pow", "a", "2.0f", F32),
               pow3=emitter._binary("pow", "a", "3.0f", F32), fma="(a * b + c)")
    return out


def _source(exprs: dict[str, str]) -> str:
    lines = ['#include "aotc_prelude.cuh"', '#include "aotc_ops.cuh"']
    for name, e in exprs.items():
        lines.append(f'extern "C" __global__ void m_{name}(float *y, const float *x) '
                     f'{{ const float a = x[0], b = x[1], c = x[2]; y[0] = {e}; }}')
    return "\n".join(lines) + "\n"


def _per_entry(ptx: str) -> dict[str, str]:
    parts = re.split(r"\.visible \.entry m_(\w+)\(", ptx)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def _opcodes(body: str) -> set[str]:
    return set(re.findall(r"^\s*(?:@!?%p\d+\s+)?([a-z][\w.]*)", body, re.M))


def _approx_or_ftz(body: str) -> set[str]:
    return {op for op in _opcodes(body) if ".approx" in op or ".ftz" in op}


@pytest.fixture(scope="module", params=["compute_80", "compute_90"])
def ptx_by_function(request):
    exprs = _expressions()
    assert set(exprs) == set(EXPECTED), "a function the emitter writes has no recorded PTX here"
    return _per_entry(compile_device(_source(exprs), request.param).decode())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_emitted_function_becomes_the_recorded_instructions(ptx_by_function, name):
    body = ptx_by_function[name]
    assert _approx_or_ftz(body) == EXPECTED[name], name
    assert not [op for op in _opcodes(body) if op.startswith(FAST_ONLY)], name
    if name in REQUIRED:
        assert REQUIRED[name] in _opcodes(body)


def test_integer_powers_and_division_leave_no_library_call(ptx_by_function):
    """x**2 and x**3 are multiplications; powf's body is far longer (its slow path for negative bases)."""
    for name in ("pow2", "pow3"):
        assert "mul.f32" in ptx_by_function[name] and ".approx" not in ptx_by_function[name]
    assert len(ptx_by_function["pow"]) > 10 * len(ptx_by_function["pow2"])


def test_flags_are_precise_and_part_of_the_cache_key():
    opts = _options("sm_90")
    assert "--use_fast_math" not in opts and all(f in opts for f in MATH_FLAGS)
    assert set(MATH_FLAGS) == {"-ftz=false", "-prec-div=true", "-prec-sqrt=true", "-fmad=true"}
    key = _key("src", opts)
    assert "-ftz=false" in key[1] and "-prec-div=true" in key[1]
    assert _key("src", opts + ["--use_fast_math"]) != key

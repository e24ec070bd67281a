"""Engine dtype codes: one per IR dtype, the same numbers and sizes in Python, the C header and the
C reader, and every new dtype through a real engine on the cpu device."""
from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import aotc
from aotc.ir import dtypes
from aotc.kernels.host_compile import have_host_compiler
from aotc.package import runtime_binding as rb
from aotc.package.plan import DTYPE_CODES, DTYPE_SIZES
from tests.helpers.rng import fresh_rng

RUNTIME = Path(rb.__file__).parent / "runtime"


def test_every_ir_dtype_has_a_code_and_its_size():
    assert set(DTYPE_CODES) == set(dtypes.BY_NAME)
    assert sorted(DTYPE_CODES.values()) == list(range(1, len(DTYPE_CODES) + 1))
    for name, d in dtypes.BY_NAME.items():
        assert DTYPE_SIZES[name] == d.itemsize
        assert rb._np_dtype(name) == d.np


def test_the_c_header_and_reader_agree():
    header = (RUNTIME / "aotc_runtime.h").read_text()
    enum = {m.group(1).lower(): int(m.group(2)) for m in re.finditer(r"AOTC_DTYPE_(\w+) = (\d+)", header)}
    assert enum == DTYPE_CODES
    plan_c = (RUNTIME / "plan.c").read_text()
    sizes = re.search(r"dtype_sizes\[AOTC_DTYPE_COUNT\] = \{([^}]*)\}", plan_c, re.S).group(1)
    nums = [int(x) for x in re.sub(r"/\*.*?\*/", "", sizes, flags=re.S).replace("\n", " ").split(",")]
    assert int(re.search(r"#define AOTC_DTYPE_COUNT (\d+)", plan_c).group(1)) == len(nums) == len(DTYPE_CODES) + 1
    for name, code in DTYPE_CODES.items():
        assert nums[code] == DTYPE_SIZES[name], name


_ONNX = {"f64": TensorProto.DOUBLE, "i16": TensorProto.INT16, "u16": TensorProto.UINT16,
         "u32": TensorProto.UINT32, "u64": TensorProto.UINT64, "f8e4m3fn": TensorProto.FLOAT8E4M3FN,
         "f8e5m2": TensorProto.FLOAT8E5M2, "f8e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ,
         "f8e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ, "i4": TensorProto.INT4, "u4": TensorProto.UINT4,
         "i2": TensorProto.INT2, "u2": TensorProto.UINT2, "f4e2m1fn": TensorProto.FLOAT4E2M1,
         "f8e8m0fnu": TensorProto.FLOAT8E8M0}


@pytest.mark.skipif(not have_host_compiler(), reason="needs g++ for the host build")
def test_engine_io_in_every_new_dtype_runs_on_cpu(tmp_path):
    """One engine: each new dtype comes in, is cast to f32 and back (Cast saturates float8), goes out.
    e8m0 round-trips except code 0: 2^-127 is an f32 subnormal, and Cast's round_mode 'up' makes it 1."""
    rng, seed = fresh_rng()
    inputs, outputs, nodes, feeds = [], [], [], {}
    for name, code in _ONNX.items():
        d = dtypes.from_name(name)
        inputs.append(helper.make_tensor_value_info(f"x_{name}", code, [3, 5]))
        outputs.append(helper.make_tensor_value_info(f"y_{name}", code, [3, 5]))
        nodes += [helper.make_node("Cast", [f"x_{name}"], [f"f_{name}"], to=TensorProto.FLOAT),
                  helper.make_node("Cast", [f"f_{name}"], [f"y_{name}"], to=code)]
        if d.is_scale:
            codes = rng.integers(0, 256, (3, 5), dtype=np.uint8)
            codes.flat[:2] = (0, 255)
            feeds[f"x_{name}"] = codes.view(d.np)
        elif d.is_float:
            feeds[f"x_{name}"] = (rng.standard_normal((3, 5)) * 4).astype(np.float32).astype(d.np)   # f32-exact
        else:
            lo, hi = dtypes.int_range(d)
            feeds[f"x_{name}"] = rng.integers(max(lo, -2**20), min(hi, 2**20), (3, 5), endpoint=True).astype(d.np)
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs), opset_imports=[helper.make_opsetid("", 25)])
    aotc.compile(model, str(tmp_path / "m.engine"), arch="none")
    engine = rb.Engine(str(tmp_path / "m.engine"))
    assert {t.name: t.dtype for t in engine.inputs} == {f"x_{n}": n for n in _ONNX}
    out = engine.create_context("cpu").run(feeds)
    for name in _ONNX:
        got, x = out[f"y_{name}"], feeds[f"x_{name}"]
        want = np.maximum(x.view(np.uint8), 1) if name == "f8e8m0fnu" else x.view(np.uint8)
        assert got.dtype == x.dtype and np.array_equal(got.view(np.uint8), want), f"{name}, seed {seed}"
    assert out["y_i4"].view(np.uint8).max() <= 15       # one per byte, high bits zero (as ml_dtypes)
    assert ml_dtypes.int4 == out["y_i4"].dtype

"""The PLAN section of dynamic engines: round trip, the writer's refusals, and corruption of
every new field refused by both readers (engine_format.py and the C runtime), never a crash."""
from __future__ import annotations

import dataclasses
import struct
import subprocess
import sys
import zlib

import pytest

from aotc.errors import EngineFormatError
from aotc.package import engine_format as ef
from aotc.package import plan_section as ps
from aotc.package import runtime_binding as rb
from aotc.package.plan import BufferRef, DimSpec, Reg, ShapeOp, TensorSpec
from tests.package.dynamic_plans import CHECK_MESSAGE, make_dynamic_plan

FAKE_HOST = b"\x7fELF" + b"\2\1" + b"\0" * 12 + b"\x3e\0" + b"\0" * 100


def test_round_trip_keeps_every_dynamic_field():
    plan = make_dynamic_plan(FAKE_HOST)
    data = ef.engine_bytes(plan)
    back = ef.read_engine(data)
    assert back.inputs == plan.inputs and back.outputs == plan.outputs
    assert back.dims == plan.dims and back.program == plan.program and back.checks == plan.checks
    fields = lambda ls: [(l.kernel, l.grid, l.block, l.args, l.when, l.variant, l.region) for l in ls]  # noqa: E731
    assert fields(back.launches) == fields(plan.launches)
    assert back.launches[1].when == Reg(7) and back.launches[0].grid == (Reg(5), 1, 1)
    assert back.inputs[0].shape == (Reg(0), 16) and back.inputs[0].max_shape == (64, 16)
    assert back.outputs[1].max_shape is None and back.outputs[0].nbytes == 4096
    assert ef.engine_bytes(back) == data        # deterministic and lossless


def test_manifest_names_dims_symbolic_shapes_and_variants():
    man = ef.read_manifest(ef.engine_bytes(make_dynamic_plan()))
    assert man["format_version"] == 2
    assert man["dims"] == [{"name": "batch", "min": 0, "max": 64, "divisor": 1},
                           {"name": "seq", "min": 4, "max": 64, "divisor": 4}]
    shapes = {t["name"]: (t["shape"], t.get("max_shape")) for t in man["inputs"] + man["outputs"]}
    assert shapes == {"x": (["batch", 16], [64, 16]), "m": (["batch"], [64]), "u": (["seq"], [64]),
                      "y": (["batch*16"], [1024]), "which": ([1], None), "v": (["seq"], [64])}
    assert [(l["variant"], l["when"], l["grid"]) for l in man["launches"]] == [
        ("", None, ["r5", 1, 1]), ("batch<=8", "r7", ["r13", 1, 1]), ("batch>8", "r8", ["r5", 1, 1]),
        ("", None, ["r12", 1, 1])]
    assert man["checks"] == [CHECK_MESSAGE]


def test_without_compiler_shapes_inputs_show_dim_names():
    plan = make_dynamic_plan()
    plan.manifest = {}
    man = ef.read_manifest(ef.engine_bytes(plan))
    assert [t["shape"] for t in man["inputs"]] == [["batch", 16], ["batch"], ["seq"]]
    assert man["outputs"][0]["shape"] == [None]        # computed: not invented


def _edit_plan(plan, **changes):
    return dataclasses.replace(plan, **changes)


@pytest.mark.parametrize("change, message", [
    (lambda p: p.program.__setitem__(1, ShapeOp("mul", 0, 3)), "operands must be earlier registers"),
    (lambda p: p.program.__setitem__(0, ShapeOp("pow", 0, 0)), "unknown shape op"),
    (lambda p: p.program.__setitem__(0, ShapeOp("const", 1, 0, 16)), "shape op 0"),
    (lambda p: p.dims.__setitem__(0, DimSpec("batch", 9, 8)), "range 9..8"),
    (lambda p: p.dims.__setitem__(0, DimSpec("batch", 0, 1 << 31)), "fit|2\\^31"),
    (lambda p: p.dims.__setitem__(1, DimSpec("seq", 4, 64, 0)), "divisor 0"),
    (lambda p: p.dims.__setitem__(1, DimSpec("batch", 4, 64)), "duplicate dim name"),
    (lambda p: p.dims.__setitem__(1, DimSpec("se\nq", 4, 64)), "control character"),
    (lambda p: p.checks.__setitem__(0, (Reg(99), "x")), "check 0: register 99"),
    (lambda p: p.checks.__setitem__(0, (Reg(10), "two\nlines")), "control character"),
    (lambda p: p.inputs.__setitem__(0, TensorSpec("x", "f32", (Reg(3), 16), (64, 16))), "names a dim"),
    (lambda p: p.inputs.__setitem__(0, TensorSpec("x", "f32", (Reg(0), 16), (32, 16))), "covers the dim"),
    (lambda p: p.inputs.__setitem__(2, TensorSpec("u", "f32", (64,))), "'seq' is used by no input"),
    (lambda p: p.outputs.__setitem__(0, TensorSpec("y", "f32", (Reg(99),), (1024,))), "register 99"),
    (lambda p: setattr(p.launches[1], "when", Reg(14)), "predicate 14"),
    (lambda p: setattr(p.launches[0], "grid", (Reg(14), 1, 1)), "launch 0"),
    (lambda p: p.launches[3].args.__setitem__(2, BufferRef("dim", 14)), "kind 4 index 14"),
    (lambda p: p.launches[3].args.__setitem__(2, BufferRef("dim", 1, 8)), "kind 4 index 1 offset 8"),
])
def test_writer_refuses_what_the_reader_would(change, message):
    plan = make_dynamic_plan()
    change(plan)
    with pytest.raises(ValueError, match=message):
        ef.engine_bytes(plan)


# ------------------------------------------------------- corruption --

def _plan_span(data: bytes) -> tuple[int, int, int]:
    """(table index, offset, size) of the PLAN section."""
    count, toff = struct.unpack_from("<IQ", data, 36)
    for i in range(count):
        kind, _, _, off, size, _, _ = struct.unpack_from("<II16sQQII", data, toff + 48 * i)
        if kind == ef.SEC_PLAN:
            return i, off, size
    raise AssertionError("no PLAN section")


def _fix(d: bytearray, sec: int) -> bytes:
    count, toff = struct.unpack_from("<IQ", d, 36)
    off, size = struct.unpack_from("<QQ", d, toff + 48 * sec + 24)
    struct.pack_into("<I", d, toff + 48 * sec + 40, zlib.crc32(bytes(d[off:off + size])))
    struct.pack_into("<I", d, 56, zlib.crc32(bytes(d[toff:toff + 48 * count])))
    struct.pack_into("<I", d, 60, zlib.crc32(bytes(d[:60])))
    return bytes(d)


def _layout(plan_bytes: bytes) -> dict[str, int]:
    """Offsets (within PLAN) of each table of the section."""
    ni, no, npool, nk, nl, na, ns, _, nd, nops, nc, *_ = struct.unpack_from("<12I2Q", plan_bytes)
    sizes = [("tensors", 16 * (ni + no)), ("pool", 8 * npool), ("dims", 24 * nd), ("ops", 24 * nops),
             ("checks", 16 * nc), ("kernels", 8 * nk), ("launches", 48 * nl), ("args", 16 * na), ("strtab", ns)]
    out, pos = {}, 64
    for name, size in sizes:
        out[name] = pos
        pos += size
    return out


def _pool_start(plan_bytes: bytes, tensor: int) -> int:
    return struct.unpack_from("<I", plan_bytes, 64 + 16 * tensor + 12)[0]


def _corruptions(data: bytes) -> dict[str, bytes]:
    sec, poff, psize = _plan_span(data)
    p = data[poff:poff + psize]
    L = _layout(p)
    x_pool, u_pool, y_pool = _pool_start(p, 0), _pool_start(p, 2), _pool_start(p, 3)
    dim0_name = struct.unpack_from("<II", p, L["dims"])
    msg_off = struct.unpack_from("<I", p, L["checks"] + 4)[0]
    dim_arg = 16                                     # launch 3's third argument (seq by value)
    edits = {                                        # name: (offset in PLAN, format, value)
        "header reserved": (44, "I", 1),
        "dim 0 min above max": (L["dims"] + 8, "I", 65),
        "dim 0 max 2^31": (L["dims"] + 12, "I", 1 << 31),
        "dim 1 divisor 0": (L["dims"] + 24 + 16, "I", 0),
        "dim 0 reserved": (L["dims"] + 20, "I", 1),
        "dim 1 named like dim 0": (L["dims"] + 24, "8s", struct.pack("<II", *dim0_name)),
        "dim 0 empty name": (L["dims"] + 4, "I", 0),
        "op 1 reads itself": (L["ops"] + 24 + 4, "I", 3),
        "op 0 unknown opcode": (L["ops"], "I", len(ps.SHAPE_OPS)),
        "const with an operand": (L["ops"] + 4, "I", 1),
        "op 1 with an imm": (L["ops"] + 24 + 16, "q", 5),
        "op 2 reserved": (L["ops"] + 48 + 12, "I", 1),
        "check register out of range": (L["checks"], "I", 14),
        "check message control char": (L["strtab"] + msg_off, "B", 0x0A),
        "check message not utf-8": (L["strtab"] + msg_off, "B", 0xFF),
        "check message overlong utf-8": (L["strtab"] + msg_off, "2s", b"\xc0\xa0"),
        "check message surrogate": (L["strtab"] + msg_off, "3s", b"\xed\xa0\x80"),
        "input reg not a dim": (L["pool"] + 8 * x_pool, "Q", ps.REG_FLAG | 5),
        "input max below the dim's": (L["pool"] + 8 * (x_pool + 2), "Q", 10),
        "static dim max differs": (L["pool"] + 8 * (x_pool + 3), "Q", 17),
        "max entry a register": (L["pool"] + 8 * (x_pool + 3), "Q", ps.REG_FLAG | 0),
        "dim used by no input": (L["pool"] + 8 * u_pool, "Q", 64),
        "output reg out of range": (L["pool"] + 8 * y_pool, "Q", ps.REG_FLAG | 14),
        "when out of range": (L["launches"] + 48 + 40, "I", 14),
        "grid_regs bit 3": (L["launches"] + 44, "I", 8),
        "grid register out of range": (L["launches"] + 4, "I", 14),
        "static grid dim zero": (L["launches"] + 48 * 3 + 8, "I", 0),
        "dim arg register out of range": (L["args"] + 16 * dim_arg + 4, "I", 14),
        "dim arg with an offset": (L["args"] + 16 * dim_arg + 8, "Q", 8),
        "arg kind 5": (L["args"] + 16 * dim_arg, "I", 5),
    }
    out = {}
    for name, (pos, fmt, value) in edits.items():
        d = bytearray(data)
        struct.pack_into("<" + fmt, d, poff + pos, value)
        out[name] = _fix(d, sec)
    return out


@pytest.fixture(scope="module")
def dynamic_bytes() -> bytes:
    return ef.engine_bytes(make_dynamic_plan(FAKE_HOST))


def test_every_new_field_corrupted_is_refused_by_both_readers(dynamic_bytes):
    rb.Engine(dynamic_bytes)                      # the uncorrupted engine loads
    ef.read_engine(dynamic_bytes)
    cases = _corruptions(dynamic_bytes)
    assert len(cases) == 30
    for name, data in cases.items():
        with pytest.raises(EngineFormatError, match="corrupt engine") as py:
            ef.read_engine(data)
        with pytest.raises(EngineFormatError, match="corrupt engine") as c:
            rb.Engine(data)
        assert c.value.code == "DATA_LOSS", name
        assert "\n" not in str(py.value) and "\n" not in str(c.value), name


def test_c_reader_reports_the_dynamic_fields():
    engine = rb.Engine(ef.engine_bytes(make_dynamic_plan(FAKE_HOST)))
    assert engine.dims == [DimSpec("batch", 0, 64), DimSpec("seq", 4, 64, 4)]
    assert [(t.name, t.shape, t.max_shape) for t in engine.inputs] == [
        ("x", (Reg(0), 16), (64, 16)), ("m", (Reg(0),), (64,)), ("u", (Reg(1),), (64,))]
    assert [(t.name, t.shape, t.max_shape) for t in engine.outputs] == [
        ("y", (rb.COMPUTED_DIM,), (1024,)), ("which", (1,), None), ("v", (rb.COMPUTED_DIM,), (64,))]
    assert engine.shape_text(engine.inputs[0]) == "[batch,16]" and engine.shape_text(engine.outputs[0]) == "[?]"
    assert engine.arena_size == 4096


def test_random_corruption_of_a_dynamic_engine_never_crashes_and_readers_agree(tmp_path):
    """The loop of test_runtime.py (bit flips, u32/u64 stores, garbled spans) over a dynamic engine's
    PLAN, in a child process: the C runtime and the Python reader must accept and refuse alike."""
    from tests.package.test_runtime import CORRUPTION_SCRIPT, REPO
    path = tmp_path / "dyn.engine"
    ef.write_engine(make_dynamic_plan(FAKE_HOST), path)
    script = tmp_path / "corrupt.py"
    script.write_text(CORRUPTION_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), REPO, rb.library_path(), str(path), "3"],
                          capture_output=True, text=True, timeout=600)
    last = proc.stdout.strip().splitlines()[-1:] or ["(no output)"]
    assert proc.returncode == 0, f"at case {last[0]}\n{proc.stderr[-3000:]}"
    assert last[0].startswith("OK ") and int(last[0].split()[1]) > 3000, last

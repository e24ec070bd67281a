"""The C runtime through its Python binding: run on cpu, threads, input
errors, device errors, and a corruption loop that must never crash."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from aotc.errors import EngineFormatError, InputError, RuntimeFailure
from aotc.package import runtime_binding as rb
from aotc.package.engine_format import engine_bytes, write_engine
from aotc.package.plan import Launch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((10, 100)).astype(np.float32),
            "u": rng.standard_normal(1000).astype(np.float32)}


def _has_libcuda() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def test_run_on_cpu_matches_numpy(engine_file, expected_fn):
    engine = rb.Engine(engine_file)
    assert [(t.name, t.dtype, t.shape) for t in engine.inputs] == [("x", "f32", (10, 100)),
                                                                   ("u", "f32", (1000,))]
    assert [t.name for t in engine.outputs] == ["y", "z"] and engine.arena_size == 4256
    ctx = engine.create_context("cpu")
    for seed in range(3):
        inp = _inputs(seed)
        out = ctx.run(inp)
        want = expected_fn(inp["x"], inp["u"])
        np.testing.assert_allclose(out["y"], want["y"], rtol=1e-6)
        np.testing.assert_allclose(out["z"], want["z"], rtol=1e-6)
    ctx.close()


def test_engine_from_bytes_and_temp_file_fallback(engine_file, expected_fn, monkeypatch):
    monkeypatch.setenv("AOTC_RUNTIME_NO_MEMFD", "1")  # dlopen via mkstemp + unlink
    engine = rb.Engine(engine_file.read_bytes())
    inp = _inputs(7)
    out = engine.create_context().run(inp)
    np.testing.assert_allclose(out["z"], expected_fn(inp["x"], inp["u"])["z"], rtol=1e-6)


def test_engines_with_different_host_builds_stay_apart(plan_factory, host_lib, host_lib_sub,
                                                     expected_fn):
    # Each engine's host build is dlopen'ed from a memfd; fd numbers (and so
    # /proc/self/fd/N names) recur, and glibc matches dlopen by name first.
    inp = _inputs(3)
    want = expected_fn(inp["x"], inp["u"])
    for _ in range(3):
        a = rb.Engine(engine_bytes(plan_factory(host_lib)))
        ca = a.create_context()
        b = rb.Engine(engine_bytes(plan_factory(host_lib_sub)))
        cb = b.create_context()
        np.testing.assert_allclose(ca.run(inp)["z"], want["z"], rtol=1e-6)
        t = inp["x"].reshape(-1) - (want["z"] - inp["u"] - inp["x"].reshape(-1))  # x - bias
        np.testing.assert_allclose(cb.run(inp)["z"], t - inp["u"], rtol=1e-5, atol=1e-6)
        del ca, a


def test_threads_one_context_each(engine_file, expected_fn):
    engine = rb.Engine(engine_file)
    errors = []

    def work(tid: int):
        try:
            ctx = engine.create_context()
            for i in range(40):
                inp = _inputs(1000 * tid + i)
                out = ctx.run(inp)
                want = expected_fn(inp["x"], inp["u"])
                assert np.array_equal(out["y"], want["y"]) and np.array_equal(out["z"], want["z"])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {tid}: {e!r}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_input_errors_name_the_input(engine_file):
    ctx = rb.Engine(engine_file).create_context()
    inp = _inputs(0)
    with pytest.raises(InputError, match=r"unknown input\(s\) 'w'.*missing input\(s\) 'u'"):
        ctx.run({"x": inp["x"], "w": inp["u"]})
    with pytest.raises(InputError, match=r"input 'x': expected f32 \[10, 100\], got float64 \[10, 100\]"):
        ctx.run({"x": inp["x"].astype(np.float64), "u": inp["u"]})
    with pytest.raises(InputError, match=r"input 'u': expected f32 \[1000\], got float32 \[10, 100\]"):
        ctx.run({"x": inp["x"], "u": inp["x"]})
    out = ctx.run({"x": np.asfortranarray(inp["x"]), "u": inp["u"]})  # non-contiguous is fine
    assert out["y"].shape == (10, 100)


def test_cuda_device_gives_clean_error(engine_file):
    data = engine_file.read_bytes()
    ok, why = rb.check_engine(data, "cuda")
    if _has_libcuda():
        pytest.skip(f"this machine has libcuda ({why})")
    assert not ok and why == "libcuda.so.1 not found: no NVIDIA driver on this machine"
    with pytest.raises(RuntimeFailure, match="libcuda.so.1 not found: no NVIDIA driver") as info:
        rb.Engine(data).create_context("cuda")
    assert info.value.code == "UNAVAILABLE"
    with pytest.raises(RuntimeFailure, match="unknown device 'tpu'"):
        rb.Engine(data).create_context("tpu")


def test_check_engine_on_cpu(engine_file, plan_factory, host_lib):
    assert rb.check_engine(engine_file, "cpu") == (True, rb.check_engine(engine_file, "cpu")[1])
    assert rb.check_engine(engine_file, "cpu")[1].startswith("runnable on cpu")
    ok, why = rb.check_engine(engine_bytes(plan_factory()), "cpu")
    assert not ok and "no host build" in why
    bad = bytearray(engine_file.read_bytes())
    bad[8] = 9
    ok, why = rb.check_engine(bytes(bad), "cpu")
    assert not ok and "format version 9 is not supported" in why
    bad = bytearray(engine_file.read_bytes())
    bad[-5] ^= 0x10
    ok, why = rb.check_engine(bytes(bad), "cpu")
    assert not ok and "checksum mismatch" in why


def test_runtime_errors(plan_factory, host_lib, tmp_path):
    inp = _inputs(0)
    engine = rb.Engine(engine_bytes(plan_factory(host_lib, fail=True)))
    with pytest.raises(RuntimeFailure, match=r"kernel 'fail_k' \(launch 3\) failed on cpu with code 7"):
        engine.create_context().run(inp)
    plan = plan_factory(host_lib)
    plan.launches.append(Launch("mul_f32", (1, 1, 1), (1, 1, 1), 0, []))
    with pytest.raises(RuntimeFailure, match="lacks kernel 'mul_f32'"):
        rb.Engine(engine_bytes(plan)).create_context()
    with pytest.raises(RuntimeFailure, match="no host build"):
        rb.Engine(engine_bytes(plan_factory())).create_context()
    plan = plan_factory(b"\x7fELF" + b"\2\1" + b"\0" * 12 + b"\x3e\0" + b"\0" * 100)
    with pytest.raises(RuntimeFailure, match="cannot load the engine's host build"):
        rb.Engine(engine_bytes(plan)).create_context()
    with pytest.raises(RuntimeFailure, match="cannot open engine file") as info:
        rb.Engine(tmp_path / "missing.engine")
    assert info.value.code == "NOT_FOUND"
    with pytest.raises(EngineFormatError, match="bad magic"):
        rb.Engine(b"x" * 100)


CORRUPTION_SCRIPT = r"""
import ctypes, random, struct, sys, zlib
sys.path.insert(0, sys.argv[1])
from aotc.errors import EngineFormatError
from aotc.package import engine_format as ef

lib = ctypes.CDLL(sys.argv[2])
data = open(sys.argv[3], "rb").read()
seed = int(sys.argv[4])
rng = random.Random(seed)
P = ctypes.c_void_p
lib.aotc_engine_load_from_memory.restype = P
lib.aotc_engine_load_from_memory.argtypes = [ctypes.c_char_p, ctypes.c_size_t, P, ctypes.POINTER(P)]
lib.aotc_status_code.argtypes = [P]
lib.aotc_status_message.restype = ctypes.c_char_p
lib.aotc_status_message.argtypes = [P]
lib.aotc_status_free.argtypes = [P]
lib.aotc_engine_release.argtypes = [P]
for f in ("input", "output"):
    getattr(lib, f"aotc_engine_{f}_count").argtypes = [P]
    getattr(lib, f"aotc_engine_{f}_count").restype = ctypes.c_size_t
    getattr(lib, f"aotc_engine_{f}_info").argtypes = [P, ctypes.c_size_t, ctypes.c_char_p]
    getattr(lib, f"aotc_engine_{f}_info").restype = P
lib.aotc_engine_check.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
lib.aotc_engine_check.restype = P

class Opts(ctypes.Structure):
    _fields_ = [("verify_checksums", ctypes.c_int), ("cuda_device_ordinal", ctypes.c_int)]

def c_load(d, verify=1):
    out = P()
    st = lib.aotc_engine_load_from_memory(d, len(d), ctypes.byref(Opts(verify, 0)), ctypes.byref(out))
    if st:
        code = lib.aotc_status_code(st)
        msg = lib.aotc_status_message(st)
        lib.aotc_status_free(st)
        assert code in (3, 4) and msg, (code, msg)  # DATA_LOSS / UNIMPLEMENTED
        return False
    info = ctypes.create_string_buffer(256)
    for f in ("input", "output"):
        for i in range(getattr(lib, f"aotc_engine_{f}_count")(out.value) + 2):
            st = getattr(lib, f"aotc_engine_{f}_info")(out.value, i, info)
            if st: lib.aotc_status_free(st)
    why = ctypes.create_string_buffer(200)
    st = lib.aotc_engine_check(d, len(d), 0, why, len(why))
    if st: lib.aotc_status_free(st)
    lib.aotc_engine_release(out.value)
    return True

def py_load(d):
    try:
        ef.read_engine(d)
        return True
    except EngineFormatError:
        return False

count, toff = struct.unpack_from("<IQ", data, 36)
table = [struct.unpack_from("<II16sQQII", data, toff + 48 * i) for i in range(count)]

def fix(d, sec=None):
    if sec is not None:
        off, size = table[sec][3], table[sec][4]
        struct.pack_into("<I", d, toff + 48 * sec + 40, zlib.crc32(bytes(d[off:off + size])))
    struct.pack_into("<I", d, 56, zlib.crc32(bytes(d[toff:toff + 48 * count])))
    struct.pack_into("<I", d, 60, zlib.crc32(bytes(d[:60])))
    return bytes(d)

def case(name):
    print(name, flush=True)

assert c_load(data) and py_load(data)
n_cases = 0
first = table[0][3]
for n in sorted(set(list(range(0, first + 80)) + list(range(0, len(data), 97)) + [len(data) - 1])):
    case(f"truncate {n}")
    assert not c_load(data[:n]) and not c_load(data[:n], 0), n
    n_cases += 1
positions = list(range(toff + 48 * count)) + [rng.randrange(len(data)) for _ in range(1500)]
for pos in positions:
    d = bytearray(data)
    d[pos] ^= 1 << rng.randrange(8)
    case(f"flip byte {pos}")
    assert not c_load(bytes(d)), pos   # every byte is checked: header, table, sections, padding
    c_load(bytes(d), 0)
    n_cases += 1
values32 = [0, 1, 2, 255, 256, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFF0]
plan_sec = next(i for i, e in enumerate(table) if e[0] == 2)
poff, psize = table[plan_sec][3], table[plan_sec][4]
edits = [(pos, v) for pos in range(0, 64, 4) for v in values32 if pos not in (56, 60)]
edits += [(pos, v) for pos in range(toff, toff + 48 * count, 4) for v in values32]
edits += [(poff + pos, v) for pos in range(0, psize - 3, 4) for v in values32]
edits += [(poff + rng.randrange(psize - 3), rng.getrandbits(32)) for _ in range(500)]
for pos, v in edits:
    d = bytearray(data)
    struct.pack_into("<I", d, pos, v)
    d = fix(d, plan_sec if pos >= poff else None)
    case(f"set u32 at {pos} = {v:#x}")
    c_ok, p_ok = c_load(d), py_load(d)
    assert c_ok == p_ok, (pos, v, c_ok, p_ok)
    n_cases += 1
for pos in range(poff, poff + psize - 7, 8):
    for v in (1 << 63, (1 << 64) - 1, 1 << 40, 1 << 62):
        d = bytearray(data)
        struct.pack_into("<Q", d, pos, v)
        case(f"set u64 at {pos} = {v:#x}")
        d = fix(d, plan_sec)
        assert c_load(d) == py_load(d), (pos, v)
        n_cases += 1
for _ in range(300):
    d = bytearray(data)
    a = poff + rng.randrange(psize)
    b = min(poff + psize, a + rng.randrange(1, 64))
    d[a:b] = bytes(b - a) if rng.random() < 0.5 else bytes(rng.getrandbits(8) for _ in range(b - a))
    case(f"zero/garble plan [{a}, {b})")
    d = fix(d, plan_sec)
    assert c_load(d) == py_load(d), (a, b)
    n_cases += 1
print(f"OK {n_cases} cases", flush=True)
"""


@pytest.mark.parametrize("seed", [1, 2])
def test_corrupt_engines_never_crash(engine_file, tmp_path, seed):
    script = tmp_path / "corrupt.py"
    script.write_text(CORRUPTION_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), REPO, rb.library_path(), str(engine_file),
                           str(seed)], capture_output=True, text=True, timeout=600)
    last = proc.stdout.strip().splitlines()[-1:] or ["(no output)"]
    assert proc.returncode == 0, (f"corruption loop failed (seed {seed}, exit {proc.returncode}) "
                                  f"at case: {last[0]}\n{proc.stderr[-3000:]}")
    assert last[0].startswith("OK ") and int(last[0].split()[1]) > 3000, last


# ------------------------------------------------- serving API --

def _with_version(data: bytes, version: bytes) -> bytes:
    import struct
    import zlib
    d = bytearray(data)
    d[16:32] = version.ljust(16, b"\0")
    struct.pack_into("<I", d, 60, zlib.crc32(bytes(d[:60])))
    return bytes(d)


def test_aotc_version_range_is_checked(engine_file):
    data = engine_file.read_bytes()
    for version, code, message in [(b"1.0.0", "UNIMPLEMENTED", "engine written by aotc 1.0.0; this runtime "
                                    "runs engines from aotc 0.1.0 up to 0.x"),
                                   (b"0.0.9", "UNIMPLEMENTED", "engine written by aotc 0.0.9"),
                                   (b"0.1", "DATA_LOSS", "aotc version is not a NUL-padded"),
                                   (b"0.1.0\xff", "DATA_LOSS", "aotc version is not")]:
        bad = _with_version(data, version)
        with pytest.raises(EngineFormatError, match=message.split(";")[0]) as info:
            rb.Engine(bad)
        assert info.value.code == code and message in str(info.value)
        ok, why = rb.check_engine(bad, "cpu")
        assert not ok and message in why
    good = rb.Engine(_with_version(data, b"0.7.12rc1+local"))
    assert good.aotc_version == "0.7.12rc1+local"


def test_truncation_at_every_section_boundary_is_an_error(engine_file):
    from tests.fuzz.boundaries import section_boundaries
    data = engine_file.read_bytes()
    cuts = section_boundaries(data)
    assert len(cuts) > 30
    for n in cuts:
        with pytest.raises(EngineFormatError):
            rb.Engine(data[:n])


def test_engine_metadata_and_device_memory(engine_file):
    engine = rb.Engine(engine_file)
    assert engine.aotc_version == "0.1.0" and engine.weights_size == 4100
    assert engine.device_memory_size(0) == 4100
    assert engine.device_memory_size(3) == 4100 + 3 * 4352      # arena 4256 aligned to 256


def test_preallocated_outputs_are_filled_in_place(engine_file, expected_fn):
    ctx = rb.Engine(engine_file).create_context()
    inp = _inputs(11)
    y = np.full((10, 100), np.nan, np.float32)
    out = ctx.run(inp, outputs={"y": y})
    assert out["y"] is y and out["z"].shape == (1000,)
    np.testing.assert_allclose(y, expected_fn(inp["x"], inp["u"])["y"], rtol=1e-6)
    with pytest.raises(InputError, match=r"output 'y': expected a numpy f32 \[10, 100\] array, got float64"):
        ctx.run(inp, outputs={"y": np.zeros((10, 100))})
    with pytest.raises(InputError, match="C-contiguous and writeable"):
        ctx.run(inp, outputs={"y": np.zeros((100, 10), np.float32).T})
    with pytest.raises(InputError, match="unknown output"):
        ctx.run(inp, outputs={"w": y})


class _FakeCudaArray:
    """Only the interface: never dereferenced on the cpu device or in the checks."""

    def __init__(self, shape, typestr="<f4", strides=None, readonly=False, stream=None, ptr=0xDEAD0000):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, readonly),
                                         "strides": strides, "version": 3, "stream": stream}


def test_cuda_arrays_dispatch_without_copies():
    from aotc.package.plan import TensorSpec
    spec = TensorSpec("x", "f32", (10, 100))
    b = rb._cuda_buffer(spec, _FakeCudaArray((10, 100), stream=7), "input", "cuda")
    assert (b.ptr, b.nbytes, b.on_device, b.stream) == (0xDEAD0000, 4000, True, 7)
    assert rb._cuda_buffer(spec, _FakeCudaArray((10, 100), strides=(400, 4)), "input", "cuda").on_device
    for arr, message in [(_FakeCudaArray((100, 10)), r"expected f32 \[10, 100\], got CUDA float32 \[100, 10\]"),
                         (_FakeCudaArray((10, 100), "<f2"), "got CUDA float16"),
                         (_FakeCudaArray((10, 100), strides=(4, 40)), "not C-contiguous"),
                         (_FakeCudaArray((10, 100), ptr=0), "NULL data pointer")]:
        with pytest.raises(InputError, match=message):
            rb._cuda_buffer(spec, arr, "input", "cuda")
    with pytest.raises(InputError, match="output 'x': CUDA array is read-only"):
        rb._cuda_buffer(spec, _FakeCudaArray((10, 100), readonly=True), "output", "cuda")
    bufs = [rb._cuda_buffer(spec, _FakeCudaArray((10, 100), stream=s), "input", "cuda") for s in (5, 6)]
    assert rb._stream_of(bufs[:1]) == 5
    with pytest.raises(InputError, match="different streams"):
        rb._stream_of(bufs)


def test_cuda_array_on_cpu_context_is_refused(engine_file):
    ctx = rb.Engine(engine_file).create_context("cpu")
    inp = _inputs(1)
    with pytest.raises(InputError, match="input 'x' is a CUDA array.*device='cuda'"):
        ctx.run({"x": _FakeCudaArray((10, 100)), "u": inp["u"]})
    with pytest.raises(InputError, match="output 'z' is a CUDA array"):
        ctx.run(inp, outputs={"z": _FakeCudaArray((1000,))})
    assert not ctx.uses_cuda_graph


def test_c_enqueue_and_synchronize_on_cpu(engine_file, expected_fn):
    lib = rb._load()
    ctx = rb.Engine(engine_file).create_context()
    inp = _inputs(4)
    out = {"y": np.empty((10, 100), np.float32), "z": np.empty(1000, np.float32)}
    for name, arr in list(inp.items()):
        rb._check(lib.aotc_context_bind_input(ctx._ptr, name.encode(), arr.ctypes.data, arr.nbytes))
    for name, arr in out.items():
        rb._check(lib.aotc_context_bind_output(ctx._ptr, name.encode(), arr.ctypes.data, arr.nbytes))
    with pytest.raises(RuntimeFailure, match="a stream was given to a cpu context") as info:
        rb._check(lib.aotc_context_enqueue(ctx._ptr, 0x1234))
    assert info.value.code == "INVALID_ARGUMENT"
    rb._check(lib.aotc_context_enqueue(ctx._ptr, None))
    rb._check(lib.aotc_context_synchronize(ctx._ptr))
    np.testing.assert_allclose(out["z"], expected_fn(inp["x"], inp["u"])["z"], rtol=1e-6)


def test_many_threads_many_runs_identical_outputs(engine_file):
    engine = rb.Engine(engine_file)
    requests = [_inputs(500 + i) for i in range(16)]
    reference = [engine.create_context().run(r) for r in requests]
    errors = []

    def work(tid: int):
        ctx = engine.create_context(use_cuda_graph=bool(tid % 2))
        for k in range(60):
            i = (tid * 7 + k) % len(requests)
            out = ctx.run(requests[i])
            if not all(np.array_equal(out[n], reference[i][n]) for n in out):
                errors.append((tid, k))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]

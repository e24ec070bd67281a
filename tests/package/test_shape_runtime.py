"""The C runtime's shape program on the cpu device (shape.c): every shape in range runs right,
out-of-range and inconsistent shapes give one-line errors naming input, dim, value and range,
with nothing written; predicates pick the variant, zero grids are skipped, checks hold, and a
shape change allocates nothing."""
from __future__ import annotations

import ctypes
import dataclasses
import os
import shutil
import subprocess

import numpy as np
import pytest

from aotc.errors import InputError
from aotc.kernels.host_compile import have_host_compiler
from aotc.package import runtime_binding as rb
from aotc.package.engine_format import engine_bytes, write_engine
from tests.helpers.rng import fresh_rng
from tests.package.dynamic_plans import CHECK_MESSAGE, host_build, inputs, make_dynamic_plan, reference

pytestmark = pytest.mark.skipif(not have_host_compiler(), reason="needs g++ for the host build")


@pytest.fixture(scope="module")
def engine():
    return rb.Engine(engine_bytes(make_dynamic_plan(host_build())))


@pytest.fixture(scope="module")
def rng():
    return fresh_rng()[0]


def _poisoned(batch: int, seq: int) -> dict[str, np.ndarray]:
    return {"y": np.full(batch * 16, np.nan, np.float32), "which": np.array([-7], np.int32),
            "v": np.full(seq, np.nan, np.float32)}


def _check(out: dict, feeds: dict) -> None:
    want = reference(feeds)
    np.testing.assert_array_equal(out["which"], want["which"])
    np.testing.assert_allclose(out["y"], want["y"], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(out["v"], want["v"])


@pytest.mark.parametrize("batch", [1, 3, 8, 9, 17, 62])
@pytest.mark.parametrize("seq", [4, 28, 64])
def test_every_shape_matches_numpy_and_picks_its_variant(engine, rng, batch, seq):
    feeds = inputs(rng, batch, seq)
    out = engine.create_context().run(feeds, outputs=_poisoned(batch, seq))
    assert out["y"].shape == (batch * 16,) and out["v"].shape == (seq,)
    _check(out, feeds)


def test_one_context_alternating_shapes_gives_what_fresh_contexts_give(engine, rng):
    ctx = engine.create_context()
    for batch, seq in [(5, 8), (40, 64), (5, 8), (1, 4), (40, 64), (9, 12)] * 2:
        feeds = inputs(rng, batch, seq)
        out = ctx.run(feeds)
        fresh = engine.create_context().run(feeds)
        for k in out:
            np.testing.assert_array_equal(out[k], fresh[k])
        _check(out, feeds)


def test_batch_zero_skips_the_empty_launches(engine, rng):
    feeds = inputs(rng, 0, 12)
    out = engine.create_context().run(feeds, outputs=_poisoned(0, 12))
    assert out["y"].shape == (0,)
    assert out["which"][0] == -7                   # both variants had a zero grid: neither ran
    np.testing.assert_array_equal(out["v"], 2 * feeds["u"])


@pytest.mark.parametrize("shapes, message", [
    ({"x": (65, 16), "m": (65,)}, r"^input 'x' dim 0 \(batch\) is 65, outside 0\.\.64$"),
    ({"u": (68,)}, r"^input 'u' dim 0 \(seq\) is 68, outside 4\.\.64$"),
    ({"u": (0,)}, r"^input 'u' dim 0 \(seq\) is 0, outside 4\.\.64$"),
    ({"u": (6,)}, r"^input 'u' dim 0 \(seq\) is 6, not a multiple of 4 \(range 4\.\.64\)$"),
    ({"m": (3,)}, r"^input 'm' dim 0 \(batch\) is 3 but input 'x' gives batch = 4$"),
    ({"x": (64,)}, r"^input 'x' has rank 2, got a shape of rank 1$"),
    ({"x": (4, 15)}, r"^input 'x' dim 1 is 15, the engine's is 16 \(static\)$"),
    ({"x": (63, 16), "m": (63,)}, rf"^{CHECK_MESSAGE.replace('*', '[*]')} \(at batch=63, seq=8\)$"),
])
def test_bad_shapes_give_one_line_errors_and_write_nothing(engine, rng, shapes, message):
    feeds = inputs(rng, 4, 8)
    for name, shape in shapes.items():
        feeds[name] = rng.standard_normal(shape).astype(np.float32)
    ctx = engine.create_context()
    ctx.run(inputs(rng, 2, 4))                     # a good run first: the error must not reuse its shapes
    batch = feeds["x"].shape[0] if feeds["x"].ndim == 2 else 4
    poison = {"y": np.full(max(batch, 4) * 16, np.nan, np.float32), "which": np.array([-7], np.int32),
              "v": np.full(feeds["u"].shape[0], np.nan, np.float32)}
    before = {k: v.copy() for k, v in poison.items()}
    with pytest.raises(InputError, match=message) as info:
        ctx.run(feeds, outputs=poison)
    assert info.value.code == "INVALID_ARGUMENT"
    for k in poison:
        np.testing.assert_array_equal(poison[k], before[k])
    good = inputs(rng, 3, 8)                       # the context still serves good shapes
    _check(ctx.run(good), good)


def test_output_shape_needs_every_dynamic_input(engine):
    ctx = engine.create_context()
    with pytest.raises(InputError, match=r"^input 'x' has a dynamic shape \(dim 0 is batch\): set its shape") as e:
        ctx.output_shape("y")
    assert e.value.code == "FAILED_PRECONDITION"
    ctx.set_input_shape("x", (5, 16))
    ctx.set_input_shape("m", (5,))
    with pytest.raises(InputError, match="input 'u'"):
        ctx.output_shape("v")
    ctx.set_input_shape("u", (20,))
    assert ctx.output_shape("y") == (80,) and ctx.output_shape("v") == (20,) and ctx.output_shape("which") == (1,)
    ctx.set_input_shape("x", (6, 16))              # shapes persist; a change re-evaluates
    with pytest.raises(InputError, match="'m' dim 0 \\(batch\\) is 5 but input 'x' gives batch = 6"):
        ctx.output_shape("y")
    ctx.set_input_shape("m", (6,))
    assert ctx.output_shape("y") == (96,)
    with pytest.raises(InputError, match="outside 0..64"):
        ctx.set_input_shape("x", (-1, 16))
    assert ctx.output_shape("y") == (96,)          # a refused shape changes nothing
    with pytest.raises(InputError, match="engine has no input named 'q'") as e:
        ctx.set_input_shape("q", (1,))
    assert e.value.code == "NOT_FOUND"


def _c_api(engine):
    lib = engine._lib
    P = ctypes.c_void_p
    for name, args in [("aotc_context_bind_input", [P, ctypes.c_char_p, P, ctypes.c_size_t]),
                       ("aotc_context_bind_output", [P, ctypes.c_char_p, P, ctypes.c_size_t])]:
        getattr(lib, name).argtypes = args
    return lib


def test_max_size_buffers_fit_every_shape_and_small_ones_are_refused(engine, rng):
    """Callers binding their own buffers: the max byte_size always fits; one too small for the
    current shape is refused by the run, naming it."""
    ctx = engine.create_context()
    lib = _c_api(engine)
    bufs = {t.name: np.full(t.nbytes // 4, np.nan, np.float32) if t.dtype == "f32" else np.full(1, -7, np.int32)
            for t in engine.inputs + engine.outputs}
    for t in engine.inputs + engine.outputs:
        bind = lib.aotc_context_bind_input if t in engine.inputs else lib.aotc_context_bind_output
        rb._check(bind(ctx._ptr, t.name.encode(), bufs[t.name].ctypes.data, bufs[t.name].nbytes))
    for batch, seq in [(3, 8), (50, 64)]:
        feeds = inputs(rng, batch, seq)
        for k, v in feeds.items():
            bufs[k][:v.size] = v.reshape(-1)
            ctx.set_input_shape(k, v.shape)
        rb._check(lib.aotc_context_run(ctx._ptr))
        _check({"y": bufs["y"][:batch * 16], "which": bufs["which"], "v": bufs["v"][:seq]}, feeds)
    before = {k: v.copy() for k, v in bufs.items()}
    ctx.set_input_shape("m", (49,))                 # disagrees with x: the run launches nothing
    with pytest.raises(rb.RuntimeFailure, match="input 'm' dim 0 \\(batch\\) is 49 but input 'x' gives batch = 50"):
        rb._check(lib.aotc_context_run(ctx._ptr))
    for k in bufs:
        np.testing.assert_array_equal(bufs[k], before[k])
    ctx.set_input_shape("m", (50,))
    small = np.zeros(16, np.float32)
    rb._check(lib.aotc_context_bind_output(ctx._ptr, b"y", small.ctypes.data, small.nbytes))
    with pytest.raises(rb.RuntimeFailure, match="output 'y' is bound to a 64-byte buffer, its shape at this run "
                                                "needs 3200 bytes"):
        rb._check(lib.aotc_context_run(ctx._ptr))
    ctx.set_input_shape("x", (1, 16))
    ctx.set_input_shape("m", (1,))
    rb._check(lib.aotc_context_run(ctx._ptr))      # batch 1 needs exactly 64 bytes


def test_static_engines_keep_their_exact_binding_check(engine_file):
    eng = rb.Engine(engine_file)
    assert eng.dims == [] and all(t.max_shape is None for t in eng.inputs + eng.outputs)
    ctx = eng.create_context()
    ctx.set_input_shape("x", (10, 100))            # its own shape is accepted
    with pytest.raises(InputError, match="input 'x' dim 0 is 9, the engine's is 10"):
        ctx.set_input_shape("x", (9, 100))
    buf = np.zeros(999, np.float32)
    with pytest.raises(rb.RuntimeFailure, match="input 'u' needs 4000 bytes, got a 3996-byte buffer"):
        rb._check(_c_api(eng).aotc_context_bind_input(ctx._ptr, b"u", buf.ctypes.data, buf.nbytes))


SHAPE_C = r"""
/* The shape path from C: allocations while shapes change (there must be none, with
 * -DCOUNT_ALLOCS), then runs at several shapes and every kind of refusal (under ASan/UBSan). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "aotc_runtime.h"
static long allocs;
#ifdef COUNT_ALLOCS
void *__real_malloc(size_t); void *__real_calloc(size_t, size_t); void *__real_realloc(void *, size_t);
void *__wrap_malloc(size_t n) { ++allocs; return __real_malloc(n); }
void *__wrap_calloc(size_t a, size_t b) { ++allocs; return __real_calloc(a, b); }
void *__wrap_realloc(void *p, size_t n) { ++allocs; return __real_realloc(p, n); }
#endif
#define CHECK(x) do { aotc_status_t s_ = (x); if (s_) { printf("error: %s\n", aotc_status_message(s_)); return 1; } } while (0)
static int refused(aotc_status_t st, aotc_status_code_t code, const char *words) {
  int ok = st && aotc_status_code(st) == code && strstr(aotc_status_message(st), words);
  if (!ok) printf("expected %s '%s', got '%s'\n", aotc_status_code_string(code), words, aotc_status_message(st));
  aotc_status_free(st);
  return !ok;
}
int main(int argc, char **argv) {
  aotc_engine_t *e; aotc_context_t *c;
  (void)argc;
  CHECK(aotc_engine_load_from_file(argv[1], NULL, &e));
  CHECK(aotc_context_create(e, AOTC_DEVICE_CPU, &c));
  long before = allocs, changes = 0;
  for (int64_t b = 1; b <= 60; ++b) {
    int64_t x[2] = {b, 16}, m[1] = {b}, u[1] = {4 * (b % 16 + 1)}, y[AOTC_MAX_RANK];
    size_t rank;
    CHECK(aotc_context_set_input_shape(c, "x", 2, x));
    CHECK(aotc_context_set_input_shape(c, "m", 1, m));
    CHECK(aotc_context_set_input_shape(c, "u", 1, u));
    CHECK(aotc_context_get_output_shape(c, "y", &rank, y));
    if (rank != 1 || y[0] != 16 * b) { printf("y is %lld at batch %lld\n", (long long)y[0], (long long)b); return 1; }
    ++changes;
  }
  printf("allocations %ld over %ld shape changes\n", allocs - before, changes);
  static float x[64 * 16], m[64], u[64], y[1024], v[64];
  static int which[1];
  for (int i = 0; i < 64 * 16; ++i) x[i] = (float)(i % 13) - 6.0f;
  for (int i = 0; i < 64; ++i) m[i] = u[i] = (float)i;
  CHECK(aotc_context_bind_input(c, "x", x, sizeof x));
  CHECK(aotc_context_bind_input(c, "m", m, sizeof m));
  CHECK(aotc_context_bind_input(c, "u", u, sizeof u));
  CHECK(aotc_context_bind_output(c, "y", y, sizeof y));
  CHECK(aotc_context_bind_output(c, "which", which, sizeof which));
  CHECK(aotc_context_bind_output(c, "v", v, sizeof v));
  int64_t shapes[][2] = {{0, 4}, {1, 8}, {8, 64}, {9, 12}, {62, 4}, {3, 4}};
  for (int k = 0; k < 6; ++k) {
    int64_t xs[2] = {shapes[k][0], 16}, ms[1] = {shapes[k][0]}, us[1] = {shapes[k][1]};
    CHECK(aotc_context_set_input_shape(c, "x", 2, xs));
    CHECK(aotc_context_set_input_shape(c, "m", 1, ms));
    CHECK(aotc_context_set_input_shape(c, "u", 1, us));
    CHECK(aotc_context_run(c));
    if (v[shapes[k][1] - 1] != 2.0f * (float)(shapes[k][1] - 1)) { printf("v wrong at %d\n", k); return 1; }
  }
  int64_t bad_rank[3] = {1, 16, 1}, big[2] = {65, 16}, neg[1] = {-1}, odd[1] = {6}, m4[1] = {4}, m63[1] = {63},
          x63[2] = {63, 16};
  int fails = 0;
  fails += refused(aotc_context_set_input_shape(c, "x", 3, bad_rank), AOTC_STATUS_INVALID_ARGUMENT, "rank 2");
  fails += refused(aotc_context_set_input_shape(c, "x", 2, big), AOTC_STATUS_INVALID_ARGUMENT, "is 65, outside 0..64");
  fails += refused(aotc_context_set_input_shape(c, "m", 1, neg), AOTC_STATUS_INVALID_ARGUMENT, "is -1, outside");
  fails += refused(aotc_context_set_input_shape(c, "u", 1, odd), AOTC_STATUS_INVALID_ARGUMENT, "multiple of 4");
  fails += refused(aotc_context_set_input_shape(c, "nope", 1, odd), AOTC_STATUS_NOT_FOUND, "'nope'");
  fails += refused(aotc_context_set_input_shape(c, NULL, 1, odd), AOTC_STATUS_INVALID_ARGUMENT, "NULL");
  CHECK(aotc_context_set_input_shape(c, "m", 1, m4));
  fails += refused(aotc_context_run(c), AOTC_STATUS_INVALID_ARGUMENT, "but input 'x' gives batch = 3");
  CHECK(aotc_context_set_input_shape(c, "x", 2, x63));
  CHECK(aotc_context_set_input_shape(c, "m", 1, m63));
  fails += refused(aotc_context_run(c), AOTC_STATUS_INVALID_ARGUMENT, "must be at most 1000");
  size_t rank = 9;
  int64_t dims[AOTC_MAX_RANK];
  fails += refused(aotc_context_get_output_shape(c, "y", &rank, dims), AOTC_STATUS_INVALID_ARGUMENT, "at most");
  fails += refused(aotc_context_get_output_shape(c, "zz", &rank, dims), AOTC_STATUS_NOT_FOUND, "'zz'");
  if (rank != 0) fails++;
  aotc_context_t *fresh;
  CHECK(aotc_context_create(e, AOTC_DEVICE_CPU, &fresh));
  fails += refused(aotc_context_get_output_shape(fresh, "v", &rank, dims), AOTC_STATUS_FAILED_PRECONDITION,
                   "input 'x' has a dynamic shape");
  aotc_dim_info_t di;
  CHECK(aotc_engine_dim_info(e, 1, &di));
  if (aotc_engine_dim_count(e) != 2 || strcmp(di.name, "seq") || di.min != 4 || di.max != 64 || di.divisor != 4) fails++;
  fails += refused(aotc_engine_dim_info(e, 2, &di), AOTC_STATUS_INVALID_ARGUMENT, "dim index 2");
  aotc_tensor_info_t ti;
  CHECK(aotc_engine_output_info(e, 0, &ti));
  if (ti.dim_index[0] != AOTC_DIM_COMPUTED || ti.dims[0] != 1024) fails++;
  CHECK(aotc_engine_input_info(e, 0, &ti));
  if (ti.dim_index[0] != 0 || ti.dim_index[1] != AOTC_DIM_STATIC) fails++;
  aotc_context_release(fresh);
  aotc_context_release(c);
  aotc_engine_release(e);
  printf("%s\n", fails ? "FAILED" : "shape path OK");
  return fails != 0;
}
"""


def _shape_harness(tmp_path, flags: list[str], name: str) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    src_dir = os.path.join(os.path.dirname(rb.__file__), "runtime")
    (tmp_path / "shape_path.c").write_text(SHAPE_C)
    exe = tmp_path / name
    proc = subprocess.run([cc, "-std=c99", "-O1", "-g", "-I", src_dir, str(tmp_path / "shape_path.c"),
                           *[os.path.join(src_dir, f) for f in rb._SOURCES], *flags, "-o", str(exe),
                           "-ldl", "-lpthread"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(exe)


@pytest.fixture(scope="module")
def engine_on_disk(tmp_path_factory):
    path = tmp_path_factory.mktemp("dyn") / "dyn.engine"
    write_engine(make_dynamic_plan(host_build()), path)
    return path


def test_a_shape_change_allocates_nothing(tmp_path, engine_on_disk):
    wraps = ",".join(f"--wrap={f}" for f in ("malloc", "calloc", "realloc"))
    exe = _shape_harness(tmp_path, ["-DCOUNT_ALLOCS", f"-Wl,{wraps}"], "count_allocs")
    run = subprocess.run([exe, str(engine_on_disk)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines() == ["allocations 0 over 60 shape changes", "shape path OK"]


def test_the_shape_path_is_clean_under_asan_and_ubsan(tmp_path, engine_on_disk):
    exe = _shape_harness(tmp_path, ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"], "sanitized")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    run = subprocess.run([exe, str(engine_on_disk)], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    assert run.stdout.splitlines()[-1] == "shape path OK"


def _random_program(rng, n_dims: int, n_ops: int) -> list:
    from aotc.package.plan import SHAPE_OPS, ShapeOp
    names = [op for op in SHAPE_OPS if op != "const"]
    ops = []
    for k in range(n_ops):
        reg = n_dims + k
        if rng.random() < 0.3:
            ops.append(ShapeOp("const", imm=int(rng.choice([0, 1, -1, 3, -7, 2**31, -(2**40), 2**62]))))
        else:
            ops.append(ShapeOp(str(rng.choice(names)), int(rng.integers(reg)), int(rng.integers(reg))))
    return ops


def _first_failure(plan, values: dict) -> tuple[list | None, str | None]:
    """evaluate_program step by step: (registers, None), or (None, "zero" / "overflow") at the first
    instruction that divides by zero or leaves int64 (where the C runtime stops)."""
    from aotc.package.plan import evaluate_program
    for k in range(len(plan.program)):
        prefix = dataclasses.replace(plan, program=plan.program[:k + 1])
        try:
            last = evaluate_program(prefix, values)[-1]
        except ZeroDivisionError:
            return None, "zero"
        if not -2**63 <= last < 2**63:
            return None, "overflow"
    return evaluate_program(plan, values), None


def test_c_arithmetic_equals_the_python_reference_on_random_programs(host_lib):
    """Random programs (every op, negative and huge values): where Python's evaluate_program gives
    values that fit int64 the C runtime must hold the same (appended eq checks assert each
    register); where Python divides by zero or leaves int64, the C runtime refuses that shape."""
    from aotc.package.plan import DimSpec, EnginePlan, Reg, ShapeOp, TensorSpec
    rng, seed = fresh_rng()
    outcomes, buf = set(), np.zeros(100 * 100, np.uint8)
    for trial in range(400):     # at least 60 programs, and on until every outcome was seen
        if trial >= 60 and len(outcomes) == 3:
            break
        dims = [DimSpec("a", 0, 100), DimSpec("b", 0, 100)]
        ops = _random_program(rng, 2, 30)
        values = {"a": int(rng.integers(0, 101)), "b": int(rng.integers(0, 101))}
        plan = EnginePlan(inputs=[TensorSpec("x", "u8", (Reg(0), Reg(1)), (100, 100))], outputs=[], arena_size=0,
                          weights=b"", launches=[], dims=dims, program=list(ops), host_lib=host_lib)
        regs, bad = _first_failure(plan, values)
        if regs is not None and bad is None:
            for r, v in enumerate(regs):
                base = 2 + len(plan.program)
                plan.program += [ShapeOp("const", imm=v), ShapeOp("eq", r, base)]
                plan.checks.append((Reg(base + 1), f"register {r} is {v} in Python"))
        engine = rb.Engine(engine_bytes(plan))
        ctx = engine.create_context()
        ctx.set_input_shape("x", (values["a"], values["b"]))
        rb._check(_c_api(engine).aotc_context_bind_input(ctx._ptr, b"x", buf.ctypes.data, buf.nbytes))
        st = rb._take_status(ctx._lib.aotc_context_run(ctx._ptr))
        if regs is not None and bad is None:
            assert st is None, (seed, trial, st)
            outcomes.add("equal")
        else:
            want = "divide by zero" if bad == "zero" else "overflow"
            assert st and st[0] == "INVALID_ARGUMENT" and want in st[1], (seed, trial, st)
            outcomes.add(want)
    assert outcomes == {"equal", "overflow", "divide by zero"}, (seed, outcomes)


def test_a_dim_used_twice_by_one_input_must_agree_with_itself(host_lib):
    from aotc.package.plan import DimSpec, EnginePlan, Reg, TensorSpec
    plan = EnginePlan(inputs=[TensorSpec("a", "f32", (Reg(0), Reg(0)), (8, 8))],
                      outputs=[TensorSpec("d", "f32", (Reg(0),), (8,))], arena_size=0, weights=b"", launches=[],
                      dims=[DimSpec("n", 1, 8)], host_lib=host_lib)
    ctx = rb.Engine(engine_bytes(plan)).create_context()
    ctx.set_input_shape("a", (3, 4))
    with pytest.raises(InputError, match=r"^input 'a' dim 1 \(n\) is 4 but input 'a' gives n = 3$"):
        ctx.output_shape("d")
    ctx.set_input_shape("a", (5, 5))
    assert ctx.output_shape("d") == (5,)

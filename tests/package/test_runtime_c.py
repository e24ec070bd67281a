"""The C API from C: a small program (the seed of examples/hello_engine.c)
compiled with the system cc against aotc_runtime.h, run on the cpu device,
and under valgrind's leak checker where valgrind is installed."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from aotc.package import runtime_binding as rb

HELLO_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aotc_runtime.h"

#define EXPECT_CODE(expr, want)                                                  \
  do {                                                                           \
    aotc_status_t s_ = (expr);                                                   \
    if (aotc_status_code(s_) != (want)) {                                        \
      fprintf(stderr, "line %d: %s gave %s (%s), want %s\n", __LINE__, #expr,    \
              aotc_status_code_string(aotc_status_code(s_)), aotc_status_message(s_), \
              aotc_status_code_string(want));                                    \
      aotc_status_free(s_);                                                      \
      return aotc_make_error();                                                  \
    }                                                                            \
    aotc_status_free(s_);                                                        \
  } while (0)

static int failures = 0;
static aotc_status_t aotc_make_error(void) { ++failures; return NULL; }

static void *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  void *p = malloc(*size ? *size : 1);
  if (fread(p, 1, *size, f) != *size) { free(p); p = NULL; }
  fclose(f);
  return p;
}

/* Load, inspect, bind and run: the whole C API once. */
static aotc_status_t hello(const char *engine_path, float *x, float *u, float *y, float *z) {
  aotc_engine_t *engine = (aotc_engine_t *)1;
  aotc_engine_options_t options;
  aotc_engine_options_initialize(&options);
  EXPECT_CODE(aotc_engine_load_from_file("/nonexistent.engine", &options, &engine),
              AOTC_STATUS_NOT_FOUND);
  if (engine != NULL) return aotc_make_error(); /* out_ set to NULL on entry */
  AOTC_RETURN_IF_ERROR(aotc_engine_load_from_file(engine_path, &options, &engine));

  if (aotc_engine_input_count(engine) != 2 || aotc_engine_output_count(engine) != 2) return aotc_make_error();
  aotc_tensor_info_t info;
  AOTC_RETURN_IF_ERROR(aotc_engine_input_info(engine, 0, &info));
  if (strcmp(info.name, "x") || info.dtype != AOTC_DTYPE_F32 || info.rank != 2 ||
      info.dims[0] != 10 || info.dims[1] != 100 || info.byte_size != 4000) return aotc_make_error();
  EXPECT_CODE(aotc_engine_input_info(engine, 2, &info), AOTC_STATUS_INVALID_ARGUMENT);
  size_t index = 99;
  AOTC_RETURN_IF_ERROR(aotc_engine_find_output(engine, "z", &index));
  if (index != 1) return aotc_make_error();
  EXPECT_CODE(aotc_engine_find_input(engine, "nope", &index), AOTC_STATUS_NOT_FOUND);
  if (aotc_engine_arena_size(engine) != 4256 || aotc_engine_launch_count(engine) != 3) return aotc_make_error();
  const char *json; size_t json_size;
  AOTC_RETURN_IF_ERROR(aotc_engine_manifest(engine, &json, &json_size));
  if (json_size < 2 || json[0] != '{') return aotc_make_error();

  aotc_context_t *ctx = NULL, *ctx2 = NULL, *gpu = (aotc_context_t *)1;
  aotc_status_t cuda = aotc_context_create(engine, AOTC_DEVICE_CUDA, &gpu);
  printf("cuda: %s: %s\n", aotc_status_code_string(aotc_status_code(cuda)), aotc_status_message(cuda));
  aotc_status_free(cuda);
  if (gpu) aotc_context_release(gpu);
  AOTC_RETURN_IF_ERROR(aotc_context_create(engine, AOTC_DEVICE_CPU, &ctx));
  aotc_context_options_t ctx_options;
  aotc_context_options_initialize(&ctx_options);
  if (ctx_options.use_cuda_graph != 1) return aotc_make_error();
  ctx_options.use_cuda_graph = 0;
  AOTC_RETURN_IF_ERROR(aotc_context_create_with_options(engine, AOTC_DEVICE_CPU, &ctx_options, &ctx2));
  AOTC_RETURN_IF_ERROR(aotc_engine_output_info_by_name(engine, "z", &info));
  if (info.byte_size != 4000 || strcmp(info.name, "z")) return aotc_make_error();
  EXPECT_CODE(aotc_engine_input_info_by_name(engine, "z", &info), AOTC_STATUS_NOT_FOUND);
  if (info.name != NULL) return aotc_make_error(); /* out_info cleared on error */
  if (aotc_engine_device_memory_size(engine, 2) != 4100 + 2 * 4352 ||
      strcmp(aotc_engine_aotc_version(engine), "0.1.0")) return aotc_make_error();
  EXPECT_CODE(aotc_context_enqueue(ctx, (void *)0x10), AOTC_STATUS_INVALID_ARGUMENT);
  if (aotc_context_uses_cuda_graph(ctx)) return aotc_make_error();
  aotc_engine_release(engine); /* the contexts keep it alive */
  EXPECT_CODE(aotc_context_run(ctx), AOTC_STATUS_FAILED_PRECONDITION);
  EXPECT_CODE(aotc_context_bind_input(ctx, "x", x, 3999), AOTC_STATUS_INVALID_ARGUMENT);
  EXPECT_CODE(aotc_context_bind_input(ctx, "y", x, 4000), AOTC_STATUS_NOT_FOUND);
  AOTC_RETURN_IF_ERROR(aotc_context_bind_input(ctx, "x", x, 4000));
  AOTC_RETURN_IF_ERROR(aotc_context_bind_input(ctx, "u", u, 4000));
  AOTC_RETURN_IF_ERROR(aotc_context_bind_output(ctx, "y", y, 4000));
  AOTC_RETURN_IF_ERROR(aotc_context_bind_host_output(ctx, "z", z, 4000));
  AOTC_RETURN_IF_ERROR(aotc_context_run(ctx));
  /* A second context gives the same answer from its own arena. */
  float *z2 = (float *)calloc(1000, sizeof(float)), *y2 = (float *)calloc(1000, sizeof(float));
  AOTC_RETURN_IF_ERROR(aotc_context_bind_host_input(ctx2, "x", x, 4000));
  AOTC_RETURN_IF_ERROR(aotc_context_bind_input(ctx2, "u", u, 4000));
  AOTC_RETURN_IF_ERROR(aotc_context_bind_output(ctx2, "y", y2, 4000));
  AOTC_RETURN_IF_ERROR(aotc_context_bind_output(ctx2, "z", z2, 4000));
  AOTC_RETURN_IF_ERROR(aotc_context_run(ctx2));
  if (memcmp(z, z2, 4000) || memcmp(y, y2, 4000)) ++failures;
  free(z2);
  free(y2);
  aotc_context_release(ctx2);
  aotc_context_release(ctx);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 5) return 2;
  size_t nx, nu, ne;
  float *x = (float *)read_file(argv[2], &nx), *u = (float *)read_file(argv[3], &nu);
  float y[1000], z[1000];
  aotc_status_t st = hello(argv[1], x, u, y, z);
  if (st) {
    fprintf(stderr, "error: %s: %s\n", aotc_status_code_string(aotc_status_code(st)), aotc_status_message(st));
    aotc_status_free(st);
    return 1;
  }
  /* engine_check and load_from_memory on the same bytes, then a corrupt copy. */
  unsigned char *bytes = (unsigned char *)read_file(argv[1], &ne);
  char why[256];
  aotc_status_t check = aotc_engine_check(bytes, ne, AOTC_DEVICE_CPU, why, sizeof why);
  printf("check cpu: %s\n", why);
  if (check) ++failures;
  aotc_status_free(check);
  aotc_engine_t *engine = NULL;
  bytes[ne - 1] ^= 0x40;
  aotc_status_t bad = aotc_engine_load_from_memory(bytes, ne, NULL, &engine);
  if (aotc_status_code(bad) != AOTC_STATUS_DATA_LOSS || engine) ++failures;
  printf("corrupt: %s\n", aotc_status_message(bad));
  aotc_status_free(bad);
  free(bytes);
  FILE *f = fopen(argv[4], "wb");
  fwrite(y, sizeof(float), 1000, f);
  fwrite(z, sizeof(float), 1000, f);
  fclose(f);
  free(x);
  free(u);
  printf("%s\n", failures ? "FAILED" : "hello_engine: OK");
  return failures ? 1 : 0;
}
"""


@pytest.fixture(scope="module")
def hello_exe(tmp_path_factory):
    d = tmp_path_factory.mktemp("hello")
    src = d / "hello_engine.c"
    src.write_text(HELLO_C)
    lib = rb.library_path()
    include = os.path.join(os.path.dirname(rb.__file__), "runtime")
    exe = d / "hello_engine"
    cc = shutil.which("cc") or shutil.which("gcc")
    proc = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-I", include, str(src),
                           lib, f"-Wl,-rpath,{os.path.dirname(lib)}", "-o", str(exe)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


def _run(cmd, engine_file, tmp_path):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(1000).astype(np.float32)
    u = rng.standard_normal(1000).astype(np.float32)
    (tmp_path / "x.bin").write_bytes(x.tobytes())
    (tmp_path / "u.bin").write_bytes(u.tobytes())
    proc = subprocess.run([*cmd, str(engine_file), str(tmp_path / "x.bin"), str(tmp_path / "u.bin"),
                           str(tmp_path / "out.bin")], capture_output=True, text=True, timeout=300)
    return proc, x, u


def test_hello_engine_from_c(hello_exe, engine_file, tmp_path, expected_fn):
    proc, x, u = _run([str(hello_exe)], engine_file, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hello_engine: OK" in proc.stdout and "corrupt: corrupt engine:" in proc.stdout
    assert "check cpu: runnable on cpu" in proc.stdout
    out = np.frombuffer((tmp_path / "out.bin").read_bytes(), np.float32)
    want = expected_fn(x.reshape(10, 100), u)
    np.testing.assert_allclose(out[:1000], want["y"].reshape(-1), rtol=1e-6)
    np.testing.assert_allclose(out[1000:], want["z"], rtol=1e-6)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_hello_engine_has_no_leaks_or_invalid_accesses(hello_exe, engine_file, tmp_path):
    proc, _, _ = _run(["valgrind", "--quiet", "--leak-check=full", "--errors-for-leak-kinds=definite,indirect",
                       "--error-exitcode=99", str(hello_exe)], engine_file, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]

"""A hand-built dynamic engine for the shape-program tests: tiny CUDA C kernels, no compiler pipeline.

Dims: batch in 0..64, seq in 4..64 (multiples of 4). Inputs x (batch, 16),
m (batch,), u (seq,); outputs y (batch*16,), which (1,), v (seq,):
  t = x * w (w: 16 weights, per column; t in the arena), n = batch*16 by value
  y = t + m (per row), by one of two variants: batch <= 8 (32-thread blocks,
      writes which = 1) or batch > 8 (128-thread blocks, writes which = 2)
  v = 2 * u, with seq passed as a long long
and a check: batch*16 must be at most 1000 (so batch 63 and 64 are refused).
"""
from __future__ import annotations

import numpy as np

from aotc.package.plan import BufferRef, DimSpec, EnginePlan, Launch, Reg, ShapeOp, TensorSpec

SOURCE = r'''
#include "aotc_prelude.cuh"
// t[i] = x[i] * w[i % 16] for i < n.
extern "C" __global__ void dyn_mul_w(const float *x, const float *w, float *t, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) t[i] = x[i] * w[i % 16];
}
// y[i] = t[i] + m[i / 16]; which = 1 (the small-batch variant).
extern "C" __global__ void dyn_add_small(const float *t, const float *m, float *y, int *which, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = t[i] + m[i / 16];
  if (i == 0) which[0] = 1;
}
// The same for large batches; which = 2.
extern "C" __global__ void dyn_add_large(const float *t, const float *m, float *y, int *which, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = t[i] + m[i / 16];
  if (i == 0) which[0] = 2;
}
// v[i] = 2 * u[i] for i < n (n a 64-bit argument).
extern "C" __global__ void dyn_double(const float *u, float *v, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = 2.0f * u[i];
}
'''
KERNELS = ["dyn_mul_w", "dyn_add_small", "dyn_add_large", "dyn_double"]
WEIGHTS = np.linspace(-2.0, 2.0, 16, dtype=np.float32)
BATCH, SEQ = 0, 1                                   # dim registers
CHECK_MESSAGE = "batch*16 must be at most 1000"


def host_build() -> bytes:
    from aotc.kernels.host_compile import compile_host
    return compile_host(SOURCE, KERNELS)


def device_images() -> tuple[bytes, bytes]:
    """(sm_90 cubin, compute_90 PTX) of SOURCE, from NVRTC."""
    from aotc.kernels.nvrtc_compile import compile_device_with_ptx
    return compile_device_with_ptx(SOURCE, "sm_90")


def program() -> list[ShapeOp]:
    c = lambda v: ShapeOp("const", imm=v)  # noqa: E731
    return [c(16),                          # r2
            ShapeOp("mul", BATCH, 2),       # r3  n = batch*16
            c(128),                         # r4
            ShapeOp("ceildiv", 3, 4),       # r5  grid of 128-thread blocks over n
            c(8),                           # r6
            ShapeOp("le", BATCH, 6),        # r7  batch <= 8
            ShapeOp("lt", 6, BATCH),        # r8  batch > 8
            c(1000),                        # r9
            ShapeOp("le", 3, 9),            # r10 n <= 1000
            c(32),                          # r11
            ShapeOp("ceildiv", SEQ, 11),    # r12 grid of 32-thread blocks over seq
            ShapeOp("ceildiv", 3, 11)]      # r13 grid of 32-thread blocks over n


def make_dynamic_plan(host_lib: bytes = b"", cubins: dict | None = None, ptx: bytes = b"") -> EnginePlan:
    n, t = Reg(3), BufferRef("arena", offset=0)
    add_args = [t, BufferRef("input", 1), BufferRef("output", 0), BufferRef("output", 1), BufferRef("dim", 3)]
    launches = [
        Launch("dyn_mul_w", (Reg(5), 1, 1), (128, 1, 1), 0,
               [BufferRef("input", 0), BufferRef("weight"), t, BufferRef("dim", 3)], bytes=8, flops=1,
               region="t = x * w"),
        Launch("dyn_add_small", (Reg(13), 1, 1), (32, 1, 1), 0, add_args, when=Reg(7), variant="batch<=8",
               region="y = t + m"),
        Launch("dyn_add_large", (Reg(5), 1, 1), (128, 1, 1), 0, add_args, when=Reg(8), variant="batch>8",
               region="y = t + m"),
        Launch("dyn_double", (Reg(12), 1, 1), (32, 1, 1), 0,
               [BufferRef("input", 2), BufferRef("output", 2), BufferRef("dim", SEQ)], region="v = 2u"),
    ]
    return EnginePlan(
        inputs=[TensorSpec("x", "f32", (Reg(BATCH), 16), (64, 16)), TensorSpec("m", "f32", (Reg(BATCH),), (64,)),
                TensorSpec("u", "f32", (Reg(SEQ),), (64,))],
        outputs=[TensorSpec("y", "f32", (n,), (1024,)), TensorSpec("which", "i32", (1,)),
                 TensorSpec("v", "f32", (Reg(SEQ),), (64,))],
        arena_size=4096, weights=WEIGHTS.tobytes(), launches=launches,
        dims=[DimSpec("batch", 0, 64), DimSpec("seq", 4, 64, 4)], program=program(),
        checks=[(Reg(10), CHECK_MESSAGE)], host_lib=host_lib, cubins=dict(cubins or {}), ptx=ptx,
        ptx_arch="compute_90" if ptx else "",
        manifest={"shapes": {"x": ["batch", "16"], "m": ["batch"], "u": ["seq"], "y": ["batch*16"],
                             "v": ["seq"]}})   # as the compiler writes them: repr() of each dim


def inputs(rng, batch: int, seq: int) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((batch, 16)).astype(np.float32),
            "m": rng.standard_normal(batch).astype(np.float32),
            "u": rng.standard_normal(seq).astype(np.float32)}


def reference(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    x, m, u = feeds["x"], feeds["m"], feeds["u"]
    y = ((x * WEIGHTS[None, :]) + m[:, None]).reshape(-1)
    return {"y": y, "which": np.array([1 if len(m) <= 8 else 2], np.int32), "v": 2 * u}

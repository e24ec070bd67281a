"""Chain regions (fusion/chains.py) -> one block per image, one phase per anchor (templates/chain.cu).

Phase 0 is a reduction: thread e computes value e of its result (the image's e-th
row, e.g. one channel of a global pool) with a serial loop over the reduced extent.
Each later phase is a 1x1 conv on a 1x1 image, a GEMV: thread e computes output
channel e as a dot product over the previous phase's values, read from shared
memory. Every phase runs its region's epilogue before it stores; the last one
stores to `out`.
"""
from __future__ import annotations

import math

from aotc.kernels.codegen import Kernel, _acc_type, _Builder, _identity, _unravel
from aotc.kernels.emitter import linear, store_expr

BLOCK = 256


def _in_image(shape) -> str:
    return str(math.prod(shape[1:]))


def generate_chain(b: _Builder) -> Kernel:
    region = b.region
    batch = region.root.shape[0]
    overrides, phases, smem = {}, [], []
    for j, (anchor, result) in enumerate(region.payload.phases):
        last = j == len(region.payload.phases) - 1
        per = math.prod(result.shape[1:])
        em = b.emitter(indent=3, overrides=dict(overrides))
        em.open(f"for (int e = threadIdx.x; e < {per}; e += blockDim.x)")
        out_shape = anchor.outputs[0].shape
        idx = ["n"] + _unravel(em, "e", out_shape[1:], f"p{j}_")
        if anchor.op == "reduce":
            x = anchor.inputs[0]
            axes = anchor.attrs["axes"]
            kind = anchor.attrs["kind"]
            acc_t = _acc_type(x.dtype)
            em.emit(f"{acc_t} acc = {_identity(kind, x.dtype)};")
            extent = math.prod(x.shape[a] for a in axes)
            em.open(f"for ({b.idx_t} r = 0; r < {extent}; ++r)")
            red = _unravel(em, "r", [x.shape[a] for a in axes], f"q{j}_")
            full, ki, ri = [], iter(idx), iter(red)
            for d in range(x.type.rank):
                full.append(next(ri) if d in axes else next(ki))
            em.emit(f"acc = AOTC_COMBINE_{kind}(acc, ({acc_t})({em.value(x, full)}));")
            em.close()
        else:          # a 1x1 conv on a 1x1 image: out[n, 0, 0, o] = sum_c x[n, 0, 0, c] * w[o, 0, 0, c]
            x, w = anchor.inputs
            rnd = "aotc_tf32" if anchor.attrs.get("precision") == "tf32" else ""
            em.emit("float acc = 0.0f;")
            em.open(f"for (int c = 0; c < {x.shape[-1]}; ++c)")
            xv = em.value(x, ["n", "0", "0", "c"])
            wv = em.value(w, [idx[3], "0", "0", "c"])
            em.emit(f"acc += {rnd}({xv}) * {rnd}({wv});")
            em.close()
        em.overrides[anchor.outputs[0]] = "acc"
        ridx = idx if result.shape == out_shape else ["n"] + _unravel(em, "e", result.shape[1:], f"r{j}_")
        val = em.value(result, ridx)
        if last:
            em.emit(store_expr("out", linear(ridx, result.shape), val, result.dtype))
        else:
            em.emit(f"aotc_chain{j}[e] = {val};")
            smem.append(f"  __shared__ float aotc_chain{j}[{per}];")
            shape = result.shape
            overrides[result] = (lambda i, j=j, shape=shape: f"aotc_chain{j}[{linear(i[1:], shape[1:])}]")
        em.close()
        em.emit("__syncthreads();")
        phases.append(em.text())
    sizes = "/".join(_in_image(r.shape) for _, r in region.payload.phases)
    slots = dict(phases="\n".join(phases), smem="\n".join(smem), batch=batch, block=BLOCK, sizes=sizes)
    return b.finish("chain", slots, (min(batch, 65535), 1, 1), (BLOCK, 1, 1))

"""Chain regions (fusion/chains.py) -> one block per image, one phase per anchor (templates/chain.cu).

Phase 0 is a reduction: thread e computes value e of its result (the image's e-th
row, e.g. one channel of a global pool) with a serial loop over the reduced extent.
Each later phase is a 1x1 conv on a 1x1 image, a GEMV: thread e computes output
channel e as a dot product over the previous phase's values, read from shared
memory. Every phase runs its region's epilogue before it stores; the last one
stores to `out`, the others to their slice of one shared buffer. Each phase is
a fragment (chain_reduce.part, chain_gemv.part) filled here.
"""
from __future__ import annotations

import math

from aotc.kernels.builder import Kernel, KernelBuilder, acc_type, reduce_identity, unravel
from aotc.kernels.emitter import linear, store_expr
from aotc.kernels.template import instantiate

BLOCK = 256


def _in_image(shape) -> str:
    return str(math.prod(shape[1:]))


def generate_chain(b: KernelBuilder) -> Kernel:
    region = b.region
    batch = region.root.shape[0]
    overrides, phases, offset = {}, [], 0
    for j, (anchor, result) in enumerate(region.payload.phases):
        last = j == len(region.payload.phases) - 1
        per = math.prod(result.shape[1:])
        em_i = b.emitter(indent=3, overrides=dict(overrides))
        out_shape = anchor.outputs[0].shape
        idx = ["n"] + unravel(em_i, "e", out_shape[1:], f"p{j}_")
        em_a = b.emitter(indent=4, overrides=dict(overrides))
        if anchor.op == "reduce":
            x = anchor.inputs[0]
            axes = anchor.attrs["axes"]
            red = unravel(em_a, "r", [x.shape[a] for a in axes], f"q{j}_")
            full, ki, ri = [], iter(idx), iter(red)
            for d in range(x.type.rank):
                full.append(next(ri) if d in axes else next(ki))
            value = em_a.value(x, full)
            part = "chain_reduce.part"
            slots = dict(acc_t=acc_type(x.dtype), init=reduce_identity(anchor.attrs["kind"], x.dtype),
                         kind=anchor.attrs["kind"], extent=math.prod(x.shape[a] for a in axes), value=value,
                         idx_t=b.idx_t)
        else:          # a 1x1 conv on a 1x1 image: out[n, 0, 0, o] = sum_c x[n, 0, 0, c] * w[o, 0, 0, c]
            x, w = anchor.inputs
            xv = em_a.value(x, ["n", "0", "0", "c"])
            wv = em_a.value(w, [idx[3], "0", "0", "c"])
            part = "chain_gemv.part"
            slots = dict(chans=x.shape[-1], x=xv, w=wv,
                         rnd="aotc_tf32" if anchor.attrs.get("precision") == "tf32" else "")
        em = b.emitter(indent=3, overrides={**overrides, anchor.outputs[0]: "acc"})
        ridx = idx if result.shape == out_shape else ["n"] + unravel(em, "e", result.shape[1:], f"r{j}_")
        val = em.value(result, ridx)
        if last:
            em.emit(store_expr("out", linear(ridx, result.shape), val, result.dtype))
        else:          # the next phases read it from the shared buffer, at this phase's offset
            em.emit(f"aotc_chain[{offset} + e] = {val};")
            shape = result.shape
            overrides[result] = (lambda i, o=offset, shape=shape: f"aotc_chain[{o} + {linear(i[1:], shape[1:])}]")
            offset += per
        phases.append(instantiate(part, dict(slots, per=per, index=em_i.text(), load=em_a.text(),
                                             epilogue=em.text()), indent=4))
    sizes = "/".join(_in_image(r.shape) for _, r in region.payload.phases)
    slots = dict(phases="\n".join(phases), smem_floats=max(1, offset), batch=batch, block=BLOCK, sizes=sizes)
    return b.finish("chain", slots, (min(batch, 65535), 1, 1), (BLOCK, 1, 1))

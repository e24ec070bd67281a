"""Gated epilogues: SwiGLU/GeGLU over one GEMM's two column halves, computed in the GEMM kernel.

fusion.regions._gated_anchor finds y = act(D[..., :F]) * D[..., F:] with D = x @ [Wg | Wu]
(merge-dots builds that one GEMM from LLaMA's gate and up projections). The kernel runs
over 2F' = 2 * ceil(F / 32) * 32 columns, 64 per block: block x owns output columns
[32x, 32x + 32), and its local column l holds the gate or the up column (`half`) of output
column 32x + `offset`. The split follows each template's accumulator layout so that one
thread holds both halves of its output columns:

- SIMT (dot.cu): a thread holds l = tx + 16j (j < 4); half = l >> 5, so acc[i][j] pairs
  with acc[i][j ^ 2];
- mma (dot_mma.cu, dot_tf32.cu): a thread holds l = wn + 8j + 2t + (r & 1); half =
  (l >> 4) & 1, so acc[i][j][r] pairs with acc[i][j ^ 2][r].

The B loads read the weight column that a local column stands for (index math); the
epilogue of the half-0 element evaluates the region's epilogue with D read from the pair.
"""
from __future__ import annotations

import math

from aotc.kernels.emitter import Emitter, linear, store_expr

LAYOUTS = {   # half(l), offset(l), the paired accumulator
    "simt": ("({l} >> 5)", "({l} & 31)", "acc[i][j ^ 2]"),
    "mma": ("(({l} >> 4) & 1)", "((({l} >> 5) << 4) | ({l} & 15))", "acc[i][j ^ 2][r]"),
}


def gated_width(f: int) -> int:
    """Kernel columns for F output columns: 32 gate + 32 up per 64-column block."""
    return 2 * math.ceil(f / 32) * 32


def gated_b_load(emit_load, layout: str, f: int, idx_t: str, indent: int) -> str:
    """B-load code for kernel column `bn`: `emit_load(flat)` loads weight column `flat`."""
    half, off, _ = LAYOUTS[layout]
    pad = "  " * indent
    return "\n".join([
        f"{pad}const {idx_t} gl = bn - n0, gc = (n0 >> 1) + {off.format(l='gl')};",
        f"{pad}if (gc < {f}) {{",
        f"{pad}  const {idx_t} aotc_bn = {half.format(l='gl')} * {f} + gc;",
        emit_load("aotc_bn"),
        f"{pad}}}"])


def gated_epilogue(b, unravel, layout: str, bshape, mshape, f: int, indent: int) -> Emitter:
    """Epilogue + store of output (b, m, nc) from the half-0 accumulator `accv` and its pair."""
    _, off, pair = LAYOUTS[layout]
    d = b.region.anchor.outputs[0]

    def d_at(idx):
        if idx[-1] == "nc":
            return "accv"
        if idx[-1] == f"nc + {f}":
            return "accp"
        raise AssertionError(f"gated epilogue reads D at column {idx[-1]}")

    em = b.emitter(indent=indent, overrides={d: d_at})
    em.emit("if ((j & 2) != 0) continue;              // the up half: its thread's pair stores")
    em.emit(f"const {b.idx_t} nc = (n0 >> 1) + {off.format(l='(n - n0)')};")
    em.emit(f"if (nc >= {f}) continue;")
    em.emit(f"const float accp = {pair};")
    idx = (unravel(em, "b", bshape, "ob") if bshape else []) + unravel(em, "m", mshape, "om") + ["nc"]
    root = b.region.root
    em.emit(store_expr("out", linear(idx, root.shape), em.value(root, idx), root.dtype))
    return em

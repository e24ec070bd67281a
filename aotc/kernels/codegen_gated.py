"""Gated epilogues: an elementwise unit over k column blocks of one GEMM, computed in the GEMM kernel.

fusion.gated.gated_anchor finds epilogues that read D = x @ W in k equal column blocks
D[..., g*F:(g+1)*F]: SwiGLU/GeGLU over LLaMA's merged gate and up projections (k = 2,
act(D[..., :F]) * D[..., F:]) and an LSTM cell over the recurrent GEMM's four gates
(k = 4, i, o, f, c) or a GRU's (k = 3, z, r, n, laid out as 4 with the last slot empty). The
kernel runs over k * F' columns (F' = F rounded up to 64/k), 64 per
block: block x owns output columns [(64/k) x, (64/k)(x + 1)), and its local column l holds
gate g(l) of output column (64/k) x + offset(l). The split follows each template's
accumulator layout so that one thread holds all k gates of its output columns:

- SIMT (dot.cu): a thread holds l = tx + 16j (j < 4); k = 2: g = l >> 5 (acc[i][j] pairs with
  acc[i][j ^ 2]); k = 4: g = l >> 4 = j (acc[i][0..3] are the four gates);
- mma (dot_mma.cu, dot_tf32.cu): a thread holds l = wn + 8j + 2t + (r & 1); k = 2: g =
  (l >> 4) & 1 (acc[i][j][r] pairs with acc[i][j ^ 2][r]); k = 4: g = (l >> 3) & 3 = j.

The B loads read the weight column that a local column stands for (index math); the
thread holding gate 0 evaluates the region's epilogue with D read from its k accumulators,
and stores the root and any extra roots (an LSTM's c_t beside h_t).
"""
from __future__ import annotations


from aotc.ir import dims as D
from aotc.kernels.builder import unravel
from aotc.kernels.emitter import Emitter, linear, store_expr
from aotc.kernels.norm_fold import corrected
from aotc.kernels.template import instantiate

LAYOUTS = {   # (layout, k): gate(l), offset(l), the gate-g accumulator of this thread's column, skip
    ("simt", 2): ("({l} >> 5)", "({l} & 31)", lambda g: "accv" if g == 0 else "acc[i][j ^ 2]", "(j & 2) != 0"),
    ("mma", 2): ("(({l} >> 4) & 1)", "((({l} >> 5) << 4) | ({l} & 15))",
                 lambda g: "accv" if g == 0 else "acc[i][j ^ 2][r]", "(j & 2) != 0"),
    ("simt", 4): ("({l} >> 4)", "({l} & 15)", lambda g: f"acc[i][{g}]", "j != 0"),
    ("mma", 4): ("(({l} >> 3) & 3)", "((({l} >> 5) << 3) | ({l} & 7))", lambda g: f"acc[i][{g}][r]", "j != 0"),
}


def _slots(k: int) -> int:
    """Gate slots per column: k = 3 (a GRU's z, r, n in one GEMM) uses the 4-gate layout, slot 3 empty."""
    return 4 if k == 3 else k


def gated_width(f: int, k: int = 2) -> int:
    """Kernel columns for F output columns: 64/slots columns of each gate per 64-column block."""
    per = 64 // _slots(k)
    return _slots(k) * D.ceildiv(f, per) * per


def gated_b_load(emit_load, layout: str, f: int, idx_t: str, indent: int, k: int = 2) -> str:
    """B-load code for kernel column `bn`: `emit_load(flat)` loads weight column `flat` (0 past the gates)."""
    gate, off, _, _ = LAYOUTS[(layout, _slots(k))]
    real = "" if _slots(k) == k else f" && {gate.format(l='gl')} < {k}"
    return instantiate("gated_b_load.part", dict(
        idx_t=idx_t, slots=_slots(k), offset=off.format(l="gl"), f=f, real=real, gate=gate.format(l="gl"),
        load=emit_load("aotc_bn")), indent=2 * indent)


def gated_epilogue(b, layout: str, bshape, mshape, f: int, indent: int, k: int = 2) -> Emitter:
    """Epilogue + stores of output (b, m, nc) from this thread's k gate accumulators."""
    _, off, acc_of, skip = LAYOUTS[(layout, _slots(k))]
    d = b.region.anchor.outputs[0]
    columns = {"nc": 0} | {f"nc + {g * f}": g for g in range(1, k)}

    def d_at(idx):
        if idx[-1] not in columns:
            raise AssertionError(f"gated epilogue reads D at column {idx[-1]}")
        acc = acc_of(columns[idx[-1]])
        return corrected(b, b.fold, acc, idx[-1]) if b.fold is not None else acc    # norm_fold.py

    em = b.emitter(indent=indent, overrides={d: d_at})
    em.emit(f"if ({skip}) continue;              // another gate of a column this thread stores")
    em.emit(f"const {b.idx_t} nc = n0 / {_slots(k)} + {off.format(l='(n - n0)')};")
    em.emit(f"if (nc >= {f}) continue;")
    idx = (unravel(em, "b", bshape, "ob") if bshape else []) + unravel(em, "m", mshape, "om") + ["nc"]
    root = b.region.root
    em.emit(store_expr("out", linear(idx, root.shape), em.value(root, idx), root.dtype))
    for j, v in enumerate(b.region.extra_roots):
        em.emit(store_expr(f"out{j + 1}", linear(idx, v.shape), em.value(v, idx), v.dtype))
    return em

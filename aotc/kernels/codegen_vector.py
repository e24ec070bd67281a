"""16-byte vector accesses for loop regions: each thread computes VEC consecutive outputs.

A loop kernel moves bytes and does little else, so its memory instructions are
the cost: one 16-byte load or store moves 4 f32 (8 f16/bf16) elements where a
scalar access moves one. The vector path stores the root as 16-byte vectors and
loads as vectors the *direct* inputs: those with the root's shape and item size,
dense in memory (KernelBuilder.dense: not a column slice of a wider tensor),
that reach the root through elementwise ops only, so element i of the output
reads element i of them. Other inputs (broadcasts, transposes, gathers) keep
scalar loads through the emitter's index math. Where the root's last dim is whole
vectors, vector_rows.py takes over: any input whose rows the output's rows read
is a vector load there, through gathers, concatenations and the like. Pointers are checked for 16-byte
alignment at run time (the caller's output buffers may not be aligned); an
unaligned launch and the tail (total % VEC) take the scalar loop
(templates/loop_vector.part, placed in loop.cu's vector slot).
"""
from __future__ import annotations

from aotc.ir import dims as D
from aotc.ir import ops
from aotc.ir.graph import Value
from aotc.ir.walk import users_of, walk
from aotc.kernels.builder import unravel
from aotc.kernels.emitter import load_expr, store_expr
from aotc.kernels.template import instantiate
from aotc.kernels.vector_rows import RowVectors

MIN_ELEMENTS = 4096      # smaller loops gain nothing and would only grow the source
MAX_BODY = 4000          # characters of the scalar body


def _direct_params(b, root: Value) -> list[Value]:
    """Params whose every use inside the region, and every use downstream of those, is elementwise at
    the root's shape (one transpose among them reads element i for another output element)."""
    readers: dict = {}
    for n in b.region.nodes:
        for u in n.inputs:
            readers.setdefault(u, []).append(n)
    out = []
    for v in b.params:
        if v.shape != root.shape or v.dtype.itemsize != root.dtype.itemsize or not b.dense(v):
            continue
        downstream = walk(readers.get(v, []), lambda n: users_of(readers, n.outputs))
        if all(ops.category(n.op) == ops.ELEMENTWISE and n.outputs[0].shape == root.shape for n in downstream):
            out.append(v)
    return out


def vector_loop(b, scalar_body: str) -> tuple[str, str]:
    """(code of the vector loop, first element the scalar loop handles); ("", "0") when not worth it:
    small loops, 1- and 8-byte types, loops without a direct input, and bodies so large (a 200-way
    concatenate) that VEC copies of them would cost more compile time than the vectors save.

    A loop without a direct input still takes the vector path where the root's last dim is exactly one
    vector: each thread then stores one whole row of it with a 16-byte store, and each of its scalar loads
    walks the other dims across the warp (an NCHW f32 image cast, transposed and padded to 8 channels
    for a tensor-core stem conv reads 32 consecutive pixels of one plane per warp, not 4 of each)."""
    root = b.region.root
    size = root.dtype.itemsize
    total = root.type.size
    if size not in (2, 4) or D.upper(total) < MIN_ELEMENTS or not b.region.nodes or len(scalar_body) > MAX_BODY:
        return "", "0"
    vec = 16 // size
    last = root.shape[-1] if root.type.rank else 1
    if isinstance(last, int) and last % vec == 0:
        return _row_loop(b, root, vec)
    direct = _direct_params(b, root)
    if not direct:
        return "", "0"
    ptrs = ["out"] + [b.param_names[v] for v in direct]
    c = root.dtype.c
    em = b.emitter(indent=2)
    for v in direct:
        p = b.param_names[v]
        em.emit(f"const aotc_vec16<{v.dtype.c}> {p}v = reinterpret_cast<const aotc_vec16<{v.dtype.c}> *>({p})[q];")
    em.emit(f"aotc_vec16<{c}> res;")
    for e in range(vec):
        em.open(f"/* element {e} */")
        for v in direct:
            em.overrides[v] = load_expr(f"{b.param_names[v]}v.v", str(e), v.dtype)
        em.emit(f"const {b.idx_t} i = q * {vec} + {e};")
        idx = unravel(em, "i", root.shape, f"o{e}_")
        val = em.value(root, idx)
        em.emit(store_expr("res.v", str(e), val, root.dtype))
        em.close()
    return _finish(b, root, vec, ptrs, em)


def _row_loop(b, root: Value, vec: int) -> tuple[str, str]:
    """Rows of whole vectors (vector_rows.py): worth it when some input row is read as vectors, or when
    the row is one vector (each scalar load then walks the other dims across the warp)."""
    em = b.emitter(indent=2)
    em.emit(f"const {b.idx_t} i = q * {vec};")
    idx = unravel(em, "i", root.shape, "o")
    rows = RowVectors(b, em, vec)
    vals = rows.values(root, idx[:-1], idx[-1])
    if not rows.row_loads and root.shape[-1] != vec:
        return "", "0"
    em.emit(f"aotc_vec16<{root.dtype.c}> res;")
    for e, val in enumerate(vals):
        em.emit(store_expr("res.v", str(e), val, root.dtype))
    return _finish(b, root, vec, ["out"] + [b.param_names[v] for v in rows.row_loads], em)


def _finish(b, root: Value, vec: int, ptrs: list[str], em) -> tuple[str, str]:
    aligned = " | ".join(f"(unsigned long long)(const void *){p}" for p in ptrs)
    em.emit(f"reinterpret_cast<aotc_vec16<{root.dtype.c}> *>(out)[q] = res;")
    code = instantiate("loop_vector.part", dict(idx_t=b.idx_t, aligned=aligned, nvec=root.type.size // vec,
                                                body=em.text()), indent=2)
    return code, f"nvec * {vec}"

"""StableHLO importer: a JAX/StableHLO program (text, bytecode, portable artifact, jax.export) to a Graph.

The flow is read bytes -> parse with jaxlib's MLIR bindings (stablehlo_mlir.py)
-> pick the public entry function -> a pre-scan of every op reachable from it
(through func.call and composites) that reports every unsupported op, with its
MLIR location, in ONE UnsupportedError -> op by op conversion through the
converter table, inlining private functions as they are called.

StableHLO and the IR are close by design, so most converters are one line;
composite ops (chlo.erfc, exponential_minus_one, argmax-style variadic
reduces, general gathers) are decompositions onto primitive ops. Input names
come from the argument locations jax writes (`x`, `params['w']` -> `params.w`),
output names from `jax.result_info`; otherwise arg0.. / out0...

To support a new op, add a converter with `@register("dialect.op")` in one of
the stablehlo_*_ops.py modules (and a `check` if some attribute values are not
supported, so the pre-scan can report them).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable

import numpy as np

from aotc.errors import ModelError, UnsupportedError, VerifyError
from aotc.importers import stablehlo_mlir as M
from aotc.importers.static_values import StaticValues
from aotc.ir.dtypes import DType
from aotc.ir.graph import Graph, GraphBuilder, Value

CONVERTERS: dict[str, Callable] = {}
CHECKS: dict[str, Callable] = {}
_CALLS = ("func.call", "stablehlo.composite")
_RETURNS = ("func.return", "stablehlo.return")


def register(*names: str, check: Callable | None = None):
    """Register a converter `fn(cx, ins) -> Value | list[Value]` for StableHLO op names."""
    def deco(fn):
        for n in names:
            CONVERTERS[n] = fn
            if check is not None:
                CHECKS[n] = check
        return fn
    return deco


def import_stablehlo(model: str | bytes | os.PathLike) -> Graph:
    """Convert a StableHLO program (path or bytes, any of the accepted forms) to a Graph."""
    from aotc.importers import stablehlo_index_ops, stablehlo_nn_ops, stablehlo_ops  # noqa: F401
    from jaxlib.mlir import ir
    data, name = _read(model)
    ctx = M.new_context()
    module, exported = M.parse(ctx, data)
    with ctx, ir.Location.unknown():
        funcs = {str(op.attributes["sym_name"]).strip('"'): op for op in module.body.operations
                 if op.operation.name == "func.func"}
        main = _entry(funcs)
        _prescan(main, funcs)
        return _convert(main, funcs, exported, name)


def _read(model) -> tuple[bytes, str]:
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), "main"
    if isinstance(model, str) and not os.path.exists(model) and model.lstrip().startswith(("module", "func.func")):
        return model.encode(), "main"
    p = Path(model)
    if not p.exists():
        raise ModelError(f"model file not found: {model}")
    return p.read_bytes(), re.sub(r"\W", "_", p.stem) or "main"


def _entry(funcs: dict):
    public = [n for n, f in funcs.items()
              if "sym_visibility" not in f.attributes or str(f.attributes["sym_visibility"]) != '"private"']
    if "main" in funcs:
        return funcs["main"]
    if len(public) == 1:
        return funcs[public[0]]
    raise ModelError(f"cannot pick the entry function: no @main and {len(public)} public functions {public}")


def callee(op) -> str:
    a = op.attributes["callee" if op.operation.name == "func.call" else "decomposition"]
    return str(a).lstrip("@").strip('"')


def where(op) -> str:
    return f"{op.operation.name} ({M.describe_loc(op.location)})"


# ----------------------------------------------------------------- pre-scan

def _prescan(main, funcs: dict):
    """Every unsupported op or type reachable from `main`, reported at once."""
    problems: list[str] = []
    seen: set[str] = set()

    def scan(fn):
        blk = fn.regions[0].blocks[0]
        for a in blk.arguments:
            bad = M.type_problem(a.type)
            if bad:
                problems.append(f"argument {a.get_name()} of @{_sym(fn)}: {bad}")
        for op in blk.operations:
            name = op.operation.name
            if name in _RETURNS:
                continue
            if name in _CALLS:
                target = callee(op)
                if target not in funcs:
                    problems.append(f"{where(op)}: calls unknown function @{target}")
                elif target not in seen:
                    seen.add(target)
                    scan(funcs[target])
                continue
            reason = None
            if name not in CONVERTERS:
                reason = "no converter for this op"
            else:
                bad = [M.type_problem(v.type) for v in list(op.operands) + list(op.results)]
                bad = [b for b in bad if b]
                if bad:
                    reason = bad[0]
                elif name in CHECKS:
                    reason = CHECKS[name](op)
            if reason:
                problems.append(f"{where(op)}: {reason}")

    scan(main)
    if problems:
        uniq = list(dict.fromkeys(problems))
        raise UnsupportedError(f"{len(uniq)} unsupported item(s) in StableHLO module: " + "; ".join(uniq)
                               + f". Supported ops: {', '.join(sorted(CONVERTERS))}")


def _sym(fn) -> str:
    return str(fn.attributes["sym_name"]).strip('"')


# ----------------------------------------------------------------- conversion

class Ctx:
    """What a converter sees: the builder, the current MLIR op, static evaluation."""

    def __init__(self, b: GraphBuilder):
        self.b = b
        self.op = None
        self._values = StaticValues(b)

    @property
    def name(self) -> str:
        return self.op.operation.name

    def fail(self, reason: str) -> UnsupportedError:
        return UnsupportedError(f"{where(self.op)}: {reason}")

    def out_type(self, i: int = 0) -> tuple[tuple[int, ...], DType]:
        return M.tensor_type(self.op.results[i].type, f"result {i}")

    def add(self, op: str, *inputs: Value, **attrs) -> Value:
        return self.b.add(op, *inputs, name=self.name.split(".")[-1], **attrs)

    def const(self, array, dtype: DType | None = None) -> Value:
        return self.b.constant(np.asarray(array), name="c", dtype=dtype)

    def scalar(self, x, dtype: DType) -> Value:
        return self.const(np.array(x, dtype=dtype.np), dtype)

    def static(self, v: Value) -> np.ndarray | None:
        """The value of `v` computed now from constants, or None if it depends on an input."""
        return self._values.evaluate(v)[0]


def _convert(main, funcs: dict, exported, name: str) -> Graph:
    b = GraphBuilder(name)
    blk = main.regions[0].blocks[0]
    in_names = _input_names(blk.arguments, exported)
    args = []
    for a, n in zip(blk.arguments, in_names):
        shape, dt = M.tensor_type(a.type, f"argument {n}")
        args.append(b.input(n, shape, dt))
    cx = Ctx(b)
    outs = _run(cx, main, args, funcs, depth=0)
    return b.build(outs, _output_names(main, len(outs)))


def _run(cx: Ctx, fn, args: list[Value], funcs: dict, depth: int) -> list[Value]:
    if depth > 64:
        raise UnsupportedError(f"call depth over 64 at @{_sym(fn)} (recursive functions are not supported)")
    blk = fn.regions[0].blocks[0]
    env = dict(zip(blk.arguments, args))
    for op in blk.operations:
        name = op.operation.name
        ins = [env[v] for v in op.operands]
        if name in _RETURNS:
            return ins
        if name in _CALLS:
            outs = _run(cx, funcs[callee(op)], ins, funcs, depth + 1)
        else:
            cx.op = op
            outs = CONVERTERS[name](cx, ins)
            outs = [outs] if isinstance(outs, Value) else list(outs)
        if len(outs) != len(op.results):
            raise VerifyError(f"{where(op)}: converter gave {len(outs)} results for {len(op.results)} (importer bug)")
        for i, (r, v) in enumerate(zip(op.results, outs)):
            shape, dt = M.tensor_type(r.type, f"result {i}")
            if v.shape != shape or v.dtype != dt:
                raise VerifyError(f"{where(op)}: result {i} converted to {v.type}, StableHLO says "
                                  f"{dt.name}{list(shape)} (importer bug)")
            env[r] = v
    raise ModelError(f"function @{_sym(fn)} has no return")


# ----------------------------------------------------------------- names

def clean_name(s: str) -> str:
    """`params['w']` -> `params.w`, `args[0]` -> `args.0`; other odd characters become '_'."""
    s = re.sub(r"\[['\"]?([^\]'\"]*)['\"]?\]", r".\1", s.strip())
    s = re.sub(r"[^A-Za-z0-9_.]", "_", s).strip(".")
    return s


def _unique(names: list[str]) -> list[str]:
    out, seen = [], set()
    for n in names:
        m, k = n, 1
        while m in seen:
            m, k = f"{n}_{k}", k + 1
        seen.add(m)
        out.append(m)
    return out


def _input_names(arguments, exported) -> list[str]:
    paths = _export_paths(exported)
    names = []
    for i, a in enumerate(arguments):
        n = M.loc_name(a.location)
        n = clean_name(n) if n else ""
        if not n and paths and i < len(paths):
            n = paths[i]
        names.append(n or f"arg{i}")
    return _unique(names)


def _export_paths(exported) -> list[str] | None:
    """Dotted pytree paths of the kept arguments of a jax.export.Exported."""
    if exported is None:
        return None
    try:
        import jax
        n = len(exported.in_avals)
        leaves = jax.tree_util.tree_flatten_with_path(exported.in_tree.unflatten(list(range(n))))[0]
        paths = [clean_name(jax.tree_util.keystr(p)).removeprefix("0.").removeprefix("1.") for p, _ in leaves]
        return [paths[i] for i in exported.module_kept_var_idx]
    except Exception:  # noqa: BLE001 - metadata is a nicety; fall back to arg<i>
        return None


def _output_names(main, n: int) -> list[str]:
    infos = [None] * n
    ra = main.attributes["res_attrs"] if "res_attrs" in main.attributes else None
    if ra is not None:
        for i, d in enumerate(ra):
            if i < n and "jax.result_info" in d:
                infos[i] = str(d["jax.result_info"]).strip('"')
    names = []
    for i, info in enumerate(infos):
        s = clean_name(info.removeprefix("result")) if info else ""
        names.append(f"out{s}" if s[:1].isdigit() else (s or f"out{i}"))
    return _unique(names)

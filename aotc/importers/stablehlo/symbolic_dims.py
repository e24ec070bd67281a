"""Symbolic dims of a StableHLO program: names for its `?` dims, and jax's shape assertions decided at compile time.

A `jax.export` with `jax.export.symbolic_shape("b")` dims writes `?` for them
in the entry function's types. Its @main reads each dim once
(`get_dimension_size`), asserts what the symbolic shapes promise (`b >= 1`,
two inputs' `b` equal, a dim divisible by 2) in `shape_assertion` custom
calls, and passes the dims on to `@_wrapped_jax_export_main` as arguments
tagged `jax.global_constant = "b"`. aotc names each `?` dim, in order of
preference: as the Exported object's `in_avals` say (jax.export bytes), as
the global-constant argument it feeds (MLIR text from jax), else
`<input>_dim<i>` (also for a dim jax gave as an expression, `2*k`: the
program derives k from it and asserts what it needs). Dims with one name
are one dim.

A shape assertion's predicate is computed at import time from the dims
(DimExprs, see aotc/ir/dims.py) and decided over the ranges the user gave:
one that always holds is dropped; those that can fail inside the ranges are
refused together, in one error naming the ranges where all of them hold.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np

from aotc.errors import ModelError
from aotc.importers.stablehlo import mlir as M
from aotc.ir import dims as D
from aotc.ir.interpreter import evaluate_node

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")   # a bare dim name (not "2*k", not jax's "" for helpers)
_MAX_PROBES = 1 << 14     # values of a dim tried to find where an assertion holds


def data_arguments(main) -> list[int]:
    """Positions of the entry function's data arguments: all but jax's `_platform_index`."""
    attrs = main.attributes["arg_attrs"] if "arg_attrs" in main.attributes else None
    n = len(main.regions[0].blocks[0].arguments)
    return [i for i in range(n) if attrs is None or "jax.global_constant" not in attrs[i]
            or str(attrs[i]["jax.global_constant"]).strip('"') != "_platform_index"]


def platform_index(exported) -> int:
    """The value of jax's `_platform_index` argument: CUDA's place in a multi-platform export (aotc's
    kernels are CUDA's), else the first platform (MLIR text does not say which platforms there are)."""
    platforms = [str(p).lower() for p in getattr(exported, "platforms", ())]
    return platforms.index("cuda") if "cuda" in platforms else 0


def input_shapes(main, funcs: dict, exported, in_names: list[str], data: list[int]) -> list[tuple]:
    """The shapes of the data arguments (positions `data`), each `?` dim a DimExpr with its name."""
    args = list(main.regions[0].blocks[0].arguments)
    named = {**_global_constant_names(main, funcs), **_exported_names(exported, data)}
    shapes = []
    for i, n in zip(data, in_names):
        shape, _ = M.tensor_type(args[i].type, f"argument {n}")
        shapes.append(tuple(d if d is not None else D.sym(named.get((i, j), f"{n}_dim{j}"))
                            for j, d in enumerate(shape)))
    return shapes


def _exported_names(exported, data: list[int]) -> dict:
    """(argument, dim) -> name from a jax.export.Exported's in_avals (bare symbols only)."""
    if exported is None:
        return {}
    out = {}
    try:
        kept = list(exported.module_kept_var_idx)
        avals = [exported.in_avals[k] for k in kept]
    except (AttributeError, IndexError, TypeError):
        return {}
    for i, aval in zip(data, avals):
        for j, d in enumerate(aval.shape):
            if isinstance(d, int):
                continue
            text = str(d)
            if _NAME.fullmatch(text):   # an expression (2*k) keeps the default
                out[(i, j)] = text                                  # name; the program derives k from it
    return out


def _global_constant_names(main, funcs: dict) -> dict:
    """(argument, dim) -> name where get_dimension_size of the argument feeds a `jax.global_constant` argument."""
    from jaxlib.mlir import ir
    args = list(main.regions[0].blocks[0].arguments)
    out = {}
    for op in main.regions[0].blocks[0].operations:
        if op.operation.name != "func.call":
            continue
        fn = funcs.get(str(op.attributes["callee"]).lstrip("@").strip('"'))
        if fn is None or "arg_attrs" not in fn.attributes:
            continue
        for operand, attrs in zip(op.operands, fn.attributes["arg_attrs"]):
            if "jax.global_constant" not in attrs or not isinstance(operand, ir.OpResult):
                continue
            src = operand.owner
            if src.operation.name != "stablehlo.get_dimension_size":
                continue
            owner, name = src.operands[0], str(attrs["jax.global_constant"]).strip('"')
            if isinstance(owner, ir.BlockArgument) and owner in args and _NAME.fullmatch(name):
                out.setdefault((owner.arg_number, int(M.scalar(src, "dimension"))), name)
    return out


# ----------------------------------------------------------------- shape assertions

@dataclass
class FailedAssertion:
    """A shape assertion that fails somewhere in the ranges; `holds`: (dim, the values where it holds) when
    it is about one dim."""
    message: str
    problem: str
    holds: tuple[str, list[int]] | None = None


def check_assertion(cx, ins) -> FailedAssertion | None:
    """Decide a `shape_assertion` custom call over the dims' ranges: None when it always holds (dropped)."""
    message = _message(cx.op)
    nodes = _subgraph(cx, ins[0])
    if nodes is None:
        raise cx.fail(f"a shape assertion on run-time data, not on dims ({message})")
    try:
        pred = cx.static(ins[0])
    except D.DynamicDecisionError:    # the ranges' bounds do not decide it: try every value
        return _where_it_fails(message, nodes, ins[0])
    if not bool(np.all(np.asarray(pred, dtype=bool))):
        return FailedAssertion(message, f"it fails for every shape in the ranges ({_ranges(nodes)})")
    return None


def assertion_error(failed: list[FailedAssertion]) -> ModelError:
    """One error for every failed assertion, with the ranges (intersected per dim) where all of them hold."""
    text = "; ".join(f"{f.message}: {f.problem}" for f in failed)
    fixes = []
    if all(f.holds for f in failed):
        by_dim: dict[str, set] = {}
        for f in failed:
            name, values = f.holds
            by_dim[name] = by_dim.get(name, set(values)) & set(values)
        fixes = [_as_range(name, sorted(values)) for name, values in sorted(by_dim.items())]
    if fixes and all(fixes):
        text += f". Ranges where every assertion holds: {' '.join(f'--dynamic {x}' for x in fixes)}"
    return ModelError(f"the dynamic dims' ranges break the program's shape assertions: {text}")


def _as_range(name: str, values: list[int]) -> str | None:
    """`name=lo..hi[:step]` when `values` is an arithmetic progression, else None."""
    if not values:
        return None
    step = values[1] - values[0] if len(values) > 1 else 1
    if list(range(values[0], values[-1] + 1, step)) != values:
        return None
    return f"{name}={values[0]}..{values[-1]}" + (f":{step}" if step > 1 else "")


def _message(op) -> str:
    """jax's error message without its boilerplate: the sentence that says what is expected."""
    text = str(M.attr(op, "error_message", '"shape assertion failed"')).strip('"')
    # jax fills {0}, {1} with the run-time values; at compile time there are none
    text = re.sub(r"remainder \{\d+\}", "a remainder", re.sub(r",? but found \{\d+\}", "", text))
    parts = [p for p in re.split(r"(?<=\.) ", text) if p and not p.startswith("Input shapes do not match")]
    return parts[0].rstrip(".") if parts else "shape assertion failed"


def _ranges(nodes) -> str:
    rs = D.current_ranges()
    return ", ".join(f"{n} in {rs[n]}" if n in rs else f"{n} (no range)" for n in sorted(_symbols_of(nodes))) \
        or "no dynamic dims"


def _where_it_fails(message: str, nodes, v) -> FailedAssertion | None:
    """None when the predicate holds at every value in the ranges, else what fails and where it holds."""
    rs = D.current_ranges()
    names = sorted(_symbols_of(nodes))
    if not names or any(n not in rs for n in names):
        return FailedAssertion(message, f"it may fail ({_ranges(nodes)}); give every dim a range")
    grids = [range(rs[n].min, rs[n].max + 1, rs[n].divisor) for n in names]
    if int(np.prod([len(g) for g in grids])) > _MAX_PROBES:
        return FailedAssertion(message, f"the ranges do not decide it ({_ranges(nodes)}); narrow them so that "
                                        "it always holds")
    combos = [dict(zip(names, vals)) for vals in itertools.product(*grids)]
    ok = [_holds(nodes, v, env) for env in combos]
    if all(ok):
        return None
    if len(names) > 1:
        bad = next(env for env, good in zip(combos, ok) if not good)
        return FailedAssertion(message, f"it fails inside the ranges ({_ranges(nodes)}), e.g. at {bad}")
    name, r = names[0], rs[names[0]]
    holds = [env[name] for env, good in zip(combos, ok) if good]
    if not holds:
        return FailedAssertion(message, f"it fails for every {name} in {r}", (name, []))
    fix = _as_range(name, holds)
    where = f"it holds for {fix}" if fix else f"it holds for {len(holds)} of {len(ok)} values"
    return FailedAssertion(message, f"it fails for some {name} in {r}; {where}", (name, holds))


def _subgraph(cx, v) -> list | None:
    """The nodes computing `v` from constants and dim_values, in order, constants as `const` pseudo-nodes
    (None if it reads an input)."""
    producer = {o: n for n in cx.b.nodes for o in n.outputs}
    order, seen = [], set()

    def visit(x):
        if x in seen:
            return True
        if x in cx.b.constants:
            seen.add(x)
            order.append((x, cx.b.constants[x]))
            return True
        n = producer.get(x)
        if n is None:
            return False
        seen.add(x)
        if not all(visit(i) for i in n.inputs):
            return False
        order.append(n)
        return True

    return order if visit(v) else None


def _symbols_of(nodes) -> set:
    return set().union(*(D.symbols(list(n.attrs["values"])) for n in nodes
                         if not isinstance(n, tuple) and n.op == "dim_values"))


def _holds(nodes, v, env: dict) -> bool:
    """The predicate's value with the dims set to `env`: every size a plain int."""
    vals = {}
    for n in nodes:
        if isinstance(n, tuple):
            vals[n[0]] = n[1]
            continue
        attrs = D.specialize_value(n.attrs, env)
        for o, r in zip(n.outputs, evaluate_node(n.op, attrs, [vals[i] for i in n.inputs])):
            vals[o] = r
    return bool(np.all(vals[v]))

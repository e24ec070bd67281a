"""`aotc debug reduce`: shrink a failing ONNX model to a small subgraph that still fails.

Delta debugging (ddmin.py) over the model's nodes. A candidate is a subset of the
nodes in graph order, cut out as a model of its own (`cut`):

- a tensor a kept node reads that no kept node produces becomes a graph input, and it
  carries its recorded value: onnxruntime's value in a run of the whole model with every
  intermediate tensor as an output (initializers stay initializers). The values are
  stored as the reduced model's inputs in an .npz beside it (`reduced.onnx` ->
  `reduced.npz`), not as initializers: constant folding would then evaluate the very
  nodes under suspicion at compile time;
- the graph outputs are the kept nodes' results that no kept node reads (those some
  node of the model reads, or the model's outputs; an unread optional output is left
  out).

"Still fails" is either `--until COND` (metrics.Condition): the candidate is compiled
at `--precision` for the cpu device, run on the recorded inputs, and compared with
onnxruntime on the same inputs; or `--check CMD`, a shell command that exits 0 when the
candidate still fails (an interestingness test, as in C-Reduce), with `{model}` and
`{inputs}` replaced by the candidate's paths (the model path is appended when CMD names
neither). A candidate that does not import or compile does not fail.

With `--until`, the first try is the ONNX nodes of the first kernel beyond tolerance
(compare.py): when that subgraph fails already, delta debugging starts from those few
nodes instead of the whole model.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aotc.debug import onnx_model as om
from aotc.debug.ddmin import ddmin
from aotc.debug.inputs import random_inputs, read_npz
from aotc.debug.metrics import Condition, TensorError, measure, worst
from aotc.errors import AotcError


@dataclass
class Candidate:
    model: object               # onnx.ModelProto
    feeds: dict[str, np.ndarray]


@dataclass
class ReduceResult:
    model: object
    feeds: dict[str, np.ndarray]
    nodes: list[str]            # the kept nodes' names, in graph order
    original_nodes: int
    tests: int
    error: TensorError | None   # with --until: the reduced model's error


def _subgraph_reads(node) -> list[str]:
    """Every tensor a node reads, those its subgraphs (If/Loop/Scan bodies) take from outside included."""
    reads = [i for i in node.input if i]
    for attr in node.attribute:
        bodies = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
        for body in bodies:
            local = {i.name for i in body.input} | {t.name for t in body.initializer}
            for n in body.node:
                local.update(o for o in n.output if o)
            for n in body.node:
                reads += [r for r in _subgraph_reads(n) if r not in local]
    return reads


class Recorded:
    """The model and onnxruntime's value of every tensor in one run of it."""

    def __init__(self, proto, feeds: dict[str, np.ndarray]):
        self.proto = proto
        self.types = om.tensor_types(proto)
        self.values = dict(feeds)
        self.values.update(om.ort_run(proto, feeds, om.intermediate_tensors(proto), self.types))
        self.initializers = {t.name: t for t in proto.graph.initializer}
        self.outputs = {o.name for o in proto.graph.output}
        self.read = {r for n in proto.graph.node for r in _subgraph_reads(n)}

    def cut(self, nodes) -> Candidate | None:
        """The subgraph of `nodes` (graph order) as a model with its inputs, None if it has no output."""
        from onnx import helper
        produced = {o for n in nodes for o in n.output if o}
        reads = list(dict.fromkeys(r for n in nodes for r in _subgraph_reads(n)))
        cut_in = [r for r in reads if r not in produced and r not in self.initializers]
        if any(r not in self.values for r in cut_in):
            return None         # a tensor onnxruntime could not hand back: no value to carry
        read_inside = set(reads)
        outs = [o for n in nodes for o in n.output
                if o and (o in self.outputs or (o in self.read and o not in read_inside))]
        if not outs:
            return None
        inputs = [helper.make_tensor_value_info(r, helper.np_dtype_to_tensor_dtype(self.values[r].dtype),
                                                list(self.values[r].shape)) for r in cut_in]
        outputs = [self.types[o] if o in self.types else
                   helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(self.values[o].dtype),
                                                 list(self.values[o].shape)) for o in outs]
        inits = [self.initializers[r] for r in reads if r in self.initializers]
        graph = helper.make_graph(list(nodes), f"{self.proto.graph.name or 'model'}_reduced", inputs, outputs,
                                  _unique(inits))
        model = helper.make_model(graph, opset_imports=list(self.proto.opset_import),
                                  ir_version=self.proto.ir_version)
        model.functions.extend(self.proto.functions)
        return Candidate(model, {r: self.values[r] for r in cut_in})


def _unique(tensors) -> list:
    seen, out = set(), []
    for t in tensors:
        if t.name not in seen:
            seen.add(t.name)
            out.append(t)
    return out


def until_test(condition: Condition, precision: str = "fp32", keep_fp32=()):
    """A test: the candidate compiled at `precision` still meets `condition` against onnxruntime."""
    def test(c: Candidate) -> bool:
        error = engine_error(c, precision, keep_fp32)
        return error is not None and condition.holds(error)
    return test


def engine_error(c: Candidate, precision: str, keep_fp32=()) -> TensorError | None:
    """The candidate's engine outputs against onnxruntime's (None: it does not build or run)."""
    from aotc.compiler import compile_model
    from aotc.package.engine_format import engine_bytes
    from aotc.package.runtime_binding import Engine
    keep = [k for k in keep_fp32 if k in {om.node_name(n) for n in c.model.graph.node}]
    try:
        shapes = {n: tuple(c.feeds[n].shape) for n in om.symbolic_inputs(c.model) if n in c.feeds}
        plan = compile_model(c.model, arch="none", precision=precision, keep_fp32=keep, input_shapes=shapes or None).plan
        got = Engine(engine_bytes(plan)).create_context(device="cpu").run(c.feeds)
        want = om.ort_run(c.model, c.feeds)
    except AotcError:
        return None
    return worst(measure(got[name], want[name]) for name in want if name in got)


def check_command_test(command: str, workdir: str):
    """A test: `command` exits 0 on the candidate written to `workdir` (see the module docstring)."""
    def test(c: Candidate) -> bool:
        import onnx
        model_path, inputs_path = os.path.join(workdir, "candidate.onnx"), os.path.join(workdir, "candidate.npz")
        onnx.save(c.model, model_path)
        np.savez(inputs_path, **c.feeds)
        cmd = command.replace("{model}", shlex.quote(model_path)).replace("{inputs}", shlex.quote(inputs_path))
        if "{model}" not in command and "{inputs}" not in command:
            cmd = f"{command} {shlex.quote(model_path)}"
        return subprocess.run(cmd, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    return test


def reduce_model(model, test, *, inputs=None, seed: int = 0, seed_nodes=(), budget: int = 200,
                 progress=None) -> ReduceResult:
    """Shrink `model` to a subgraph for which `test(Candidate)` still holds (see the module docstring).

    `seed_nodes` (node names) is a first guess: tried first, and the start of the search if it fails.
    """
    say = progress or (lambda msg: None)
    proto = om.load_model(model)
    feeds = _feeds(proto, inputs, seed)
    say(f"recording every tensor of {len(proto.graph.node)} nodes with onnxruntime")
    rec = Recorded(proto, feeds)
    nodes = list(proto.graph.node)
    tests = 0

    def holds(subset) -> bool:
        nonlocal tests
        tests += 1
        c = rec.cut(subset)
        return c is not None and test(c)

    full = Candidate(proto, feeds)
    say("checking that the whole model fails")
    tests += 1
    if not test(full):
        raise AotcError("the model does not fail the check, so there is nothing to reduce")
    start = nodes
    seeds = set(seed_nodes)
    if seeds:
        guess = [n for n in nodes if om.node_name(n) in seeds]
        if guess and len(guess) < len(nodes):
            say(f"trying the {len(guess)} node(s) of the first kernel beyond tolerance")
            if holds(guess):
                start = guess
    say(f"delta debugging over {len(start)} nodes")
    kept, count = ddmin(start, holds, budget=budget,
                        on_round=lambda size, n: say(f"reduce: {size} node(s) still fail (after {n} tests)"))
    c = rec.cut(kept) if len(kept) < len(nodes) else full
    return ReduceResult(c.model, c.feeds, [om.node_name(n) for n in kept], len(nodes), tests, None)


def _feeds(proto, inputs, seed: int) -> dict[str, np.ndarray]:
    """The model's inputs: from a dict or an .npz by name, else random (which needs static shapes)."""
    from onnx import helper

    from aotc.ir import dtypes
    from aotc.package.plan import TensorSpec
    inits = {t.name for t in proto.graph.initializer}
    declared = [i for i in proto.graph.input if i.name not in inits]
    if inputs is not None:
        data = inputs if isinstance(inputs, dict) else read_npz(inputs)
        missing = [i.name for i in declared if i.name not in data]
        if missing:
            raise AotcError(f"the inputs lack {missing}; the model's inputs are {[i.name for i in declared]}")
        return {i.name: np.asarray(data[i.name]) for i in declared}
    specs = []
    for i in declared:
        tt = i.type.tensor_type
        if any(d.dim_param or not d.HasField("dim_value") for d in tt.shape.dim):
            raise AotcError(f"input '{i.name}' has symbolic dims; give its values with --inputs")
        try:
            dt = dtypes.from_numpy(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (KeyError, ValueError):
            raise AotcError(f"input '{i.name}' has an element type aotc does not support") from None
        specs.append(TensorSpec(i.name, dt.name, tuple(d.dim_value for d in tt.shape.dim)))
    return random_inputs(specs, seed)


def save(result: ReduceResult, path) -> Path:
    """Write the reduced model to `path` and its inputs beside it (.npz); returns the .npz path."""
    import onnx
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(result.model, path)
    npz = path.with_suffix(".npz")
    np.savez(npz, **result.feeds)
    return npz


def work_dir() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="aotc-reduce-")


__all__ = ["reduce_model", "ReduceResult", "Candidate", "Recorded", "until_test", "engine_error",
           "check_command_test", "save", "work_dir"]

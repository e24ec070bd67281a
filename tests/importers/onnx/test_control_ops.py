"""If, Loop and Scan (aotc/importers/onnx/control_ops.py) resolved at import time.

If folds to the branch a constant condition selects; Scan and Loop unroll.
Results are compared with onnxruntime through the importer + interpreter
(fresh random inputs, the seed in every failure message), one Loop and one
Scan also through compile + the runtime's `cpu` device; data-dependent control
flow must fail with an error that says why.
"""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import aotc.compiler
from aotc.errors import UnsupportedError
from aotc.importers.onnx import import_onnx
from aotc.ir.interpreter import interpret
from aotc.package.engine_format import engine_bytes
from aotc.package.runtime_binding import Engine
from tests.helpers.rng import fresh_rng, random_array

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def model_of(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def onnxruntime_outputs(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def compare(model, feeds, seed, node_op):
    g = import_onnx(model)
    assert not any(n.op == node_op for n in g.nodes)
    got, want = interpret(g, feeds), onnxruntime_outputs(model, feeds)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape, (a.shape, b.shape, f"seed {seed}")
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=f"seed {seed}")


def run_on_cpu_device(model, feeds):
    result = aotc.compiler.compile_model(model, arch="none", host=True)
    outs = Engine(engine_bytes(result.plan)).create_context("cpu").run(feeds)
    return [outs[o.name] for o in model.graph.output]


# ------------------------------------------------------------------ If

def if_model(cond_from_input: bool, cond_value: bool = True):
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [], [vi("t", F, [3, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", F, [3, 4])])
    nodes, inits, inputs = [], [], [vi("x", F, [3, 4])]
    if cond_from_input:
        inputs.append(vi("c", B, []))
    else:                          # computed from a static shape, as exporters do
        nodes += [helper.make_node("Shape", ["x"], ["s"]),
                  helper.make_node("ReduceSum", ["s"], ["n"], keepdims=0),
                  helper.make_node("Equal", ["n", "seven"], ["c"])]
        inits.append(onnx.numpy_helper.from_array(np.array(7 if cond_value else 8, np.int64), "seven"))
    nodes.append(helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="branch"))
    return model_of(nodes, inputs, [vi("y", F, [3, 4])], inits)


@pytest.mark.parametrize("cond", [True, False])
def test_constant_condition_inlines_the_taken_branch(cond):
    rng, seed = fresh_rng()
    g = import_onnx(if_model(False, cond))
    assert not any(n.op == "If" for n in g.nodes)
    x = random_array(rng, (3, 4))
    want = x * x if cond else -x
    np.testing.assert_allclose(interpret(g, {"x": x})[0], want, rtol=1e-6, err_msg=f"seed {seed}")


def test_input_dependent_condition_is_a_clear_error():
    with pytest.raises(UnsupportedError, match="If 'branch'.*condition .*depends on model input 'c'"):
        import_onnx(if_model(True))


# ------------------------------------------------------------------ Scan

def scan_model(steps: int, attrs: dict, x_axis: int, opset: int = 17):
    """State s[4]; scan inputs x (time on x_axis) and u[steps,4]; outer-scope weight w.

    s' = s * w + x_t;  outputs tanh(s') and s' - u_t, stacked per the attributes.
    """
    body = helper.make_graph([
        helper.make_node("Mul", ["s", "w"], ["sw"]),
        helper.make_node("Add", ["sw", "x_t"], ["s_out"]),
        helper.make_node("Tanh", ["s_out"], ["y1_t"]),
        helper.make_node("Sub", ["s_out", "u_t"], ["y2_t"]),
    ], "body", [vi("s", F, [4]), vi("x_t", F, [4]), vi("u_t", F, [4])],
        [vi("s_out", F, [4]), vi("y1_t", F, [4]), vi("y2_t", F, [4])])
    x_shape = [steps, 4] if x_axis == 0 else [4, steps]
    node = helper.make_node("Scan", ["s0", "x", "u"], ["s_final", "y1", "y2"], name="scan", body=body,
                            num_scan_inputs=2, **attrs)
    m = model_of([node], [vi("s0", F, [4]), vi("x", F, x_shape), vi("u", F, [steps, 4]), vi("w", F, [4])],
                 [vi("s_final", F, None), vi("y1", F, None), vi("y2", F, None)], opset=opset)
    return onnx.shape_inference.infer_shapes(m)


def scan_feeds(rng, steps, x_axis):
    return {"s0": random_array(rng, (4,)), "x": random_array(rng, (steps, 4) if x_axis == 0 else (4, steps)),
            "u": random_array(rng, (steps, 4)), "w": random_array(rng, (4,), low=0.5, high=0.9)}


@pytest.mark.parametrize("attrs,x_axis", [
    ({}, 0),
    ({"scan_input_axes": [1, 0], "scan_input_directions": [1, 0]}, 1),
    ({"scan_input_axes": [-1, 0], "scan_input_directions": [0, 1],
      "scan_output_axes": [1, -2], "scan_output_directions": [1, 0]}, 1),
], ids=["defaults", "axis1-reversed-input", "output-axes-and-directions"])
def test_scan_matches_onnxruntime(attrs, x_axis):
    rng, seed = fresh_rng()
    compare(scan_model(5, attrs, x_axis), scan_feeds(rng, 5, x_axis), seed, "Scan")


def test_scan_opset8_batched_with_directions():
    """Opset 8: batch axis 0, sequence axis 1, per-input directions, sequence_lens omitted."""
    rng, seed = fresh_rng()
    body = helper.make_graph([
        helper.make_node("Add", ["s", "a_t"], ["s1"]),
        helper.make_node("Mul", ["s1", "b_t"], ["s_out"]),
        helper.make_node("Identity", ["s_out"], ["y_t"]),
    ], "body", [vi("s", F, [3]), vi("a_t", F, [3]), vi("b_t", F, [3])], [vi("s_out", F, [3]), vi("y_t", F, [3])])
    node = helper.make_node("Scan", ["", "s0", "a", "b"], ["s_final", "y"], body=body, num_scan_inputs=2,
                            directions=[0, 1])
    model = model_of([node], [vi("s0", F, [2, 3]), vi("a", F, [2, 4, 3]), vi("b", F, [2, 4, 3])],
                     [vi("s_final", F, [2, 3]), vi("y", F, [2, 4, 3])], opset=8)
    feeds = {"s0": random_array(rng, (2, 3)), "a": random_array(rng, (2, 4, 3)),
             "b": random_array(rng, (2, 4, 3), low=0.5, high=1.1)}
    compare(model, feeds, seed, "Scan")


def test_scan_engine_on_cpu_device_matches_onnxruntime():
    rng, seed = fresh_rng()
    model = scan_model(6, {"scan_input_axes": [1, 0], "scan_output_directions": [0, 1]}, 1)
    feeds = scan_feeds(rng, 6, 1)
    for a, b in zip(run_on_cpu_device(model, feeds), onnxruntime_outputs(model, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=f"seed {seed}")


# ------------------------------------------------------------------ Loop

def loop_model(trips: int, cond_node=None, with_cond_input=False, trip_name="M"):
    """Carried acc[2,3]: acc' = acc * 0.9 + table[i]; scan output: acc' summed over axis 1.

    `cond_node` (a node producing 'cond_out' from 'i', 'acc_out', 'limit') replaces the identity condition.
    """
    cond_out = cond_node or helper.make_node("Identity", ["cond_in"], ["cond_out"])
    body = helper.make_graph([
        helper.make_node("Gather", ["table", "i"], ["row"], axis=0),
        helper.make_node("Mul", ["acc", "decay"], ["scaled"]),
        helper.make_node("Add", ["scaled", "row"], ["acc_out"]),
        helper.make_node("ReduceSum", ["acc_out", "one"], ["total"], keepdims=0),
        cond_out,
    ], "body", [vi("i", I64, []), vi("cond_in", B, []), vi("acc", F, [2, 3])],
        [vi("cond_out", B, []), vi("acc_out", F, [2, 3]), vi("total", F, [2])])
    inits = [onnx.numpy_helper.from_array(np.array(trips, np.int64), trip_name),
             onnx.numpy_helper.from_array(np.array([1], np.int64), "one"),
             onnx.numpy_helper.from_array(np.array(0.9, np.float32), "decay"),
             onnx.numpy_helper.from_array(np.array(2, np.int64), "limit"),
             onnx.numpy_helper.from_array(np.array(True), "go")]
    node = helper.make_node("Loop", [trip_name, "go" if with_cond_input else "", "acc0"], ["acc_final", "totals"],
                            name="loop", body=body)
    inputs = [vi("acc0", F, [2, 3]), vi("table", F, [8, 2, 3])]
    return model_of([node], inputs, [vi("acc_final", F, [2, 3]), vi("totals", F, [None, 2])], inits)


def loop_feeds(rng):
    return {"acc0": random_array(rng, (2, 3)), "table": random_array(rng, (8, 2, 3))}


def test_loop_with_constant_trip_count_matches_onnxruntime():
    rng, seed = fresh_rng()
    compare(loop_model(5), loop_feeds(rng), seed, "Loop")


def test_loop_ends_when_a_statically_known_condition_turns_false():
    """cond_out = i < 2 is known at import time: 3 iterations of a 100-trip loop."""
    rng, seed = fresh_rng()
    model = loop_model(100, helper.make_node("Less", ["i", "limit"], ["cond_out"]), with_cond_input=True)
    feeds = loop_feeds(rng)
    compare(model, feeds, seed, "Loop")
    assert onnxruntime_outputs(model, feeds)[1].shape == (3, 2)


def test_loop_with_nested_if_and_scan_matches_onnxruntime():
    """A body holding an If on the iteration number and a Scan over an outer-scope tensor."""
    rng, seed = fresh_rng()
    then_g = helper.make_graph([helper.make_node("Neg", ["acc"], ["picked"])], "then", [], [vi("picked", F, [3])])
    else_g = helper.make_graph([helper.make_node("Identity", ["acc"], ["kept"])], "else", [], [vi("kept", F, [3])])
    scan_body = helper.make_graph([helper.make_node("Add", ["s", "r"], ["s_out"]),
                                   helper.make_node("Mul", ["s_out", "r"], ["y"])], "sb",
                                  [vi("s", F, [3]), vi("r", F, [3])], [vi("s_out", F, [3]), vi("y", F, [3])])
    body = helper.make_graph([
        helper.make_node("Equal", ["i", "one"], ["is_one"]),
        helper.make_node("If", ["is_one"], ["flipped"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Scan", ["flipped", "rows"], ["acc_out", "ys"], body=scan_body, num_scan_inputs=1),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ], "body", [vi("i", I64, []), vi("cond_in", B, []), vi("acc", F, [3])],
        [vi("cond_out", B, []), vi("acc_out", F, [3]), vi("ys", F, [4, 3])])
    inits = [onnx.numpy_helper.from_array(np.array(3, np.int64), "M"),
             onnx.numpy_helper.from_array(np.array(1, np.int64), "one")]
    node = helper.make_node("Loop", ["M", "", "acc0"], ["acc_final", "all_ys"], body=body)
    model = model_of([node], [vi("acc0", F, [3]), vi("rows", F, [4, 3])],
                     [vi("acc_final", F, [3]), vi("all_ys", F, [None, 4, 3])], inits)
    feeds = {"acc0": random_array(rng, (3,)), "rows": random_array(rng, (4, 3), low=-0.8, high=0.8)}
    compare(model, feeds, seed, "Loop")


def test_loop_engine_on_cpu_device_matches_onnxruntime():
    rng, seed = fresh_rng()
    model, feeds = loop_model(4), loop_feeds(rng)
    for a, b in zip(run_on_cpu_device(model, feeds), onnxruntime_outputs(model, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=f"seed {seed}")


def test_data_dependent_termination_is_a_clear_error():
    """cond_out = sum(acc) < 2 depends on the input: the iteration count is not known at import time."""
    cond = helper.make_node("Less", ["total_sum", "limit_f"], ["cond_out"])
    model = loop_model(6, cond, with_cond_input=True)
    body = model.graph.node[0].attribute[0].g
    body.node.insert(4, helper.make_node("ReduceSum", ["total"], ["total_sum"], keepdims=0))
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(2.0, np.float32), "limit_f"))
    with pytest.raises(UnsupportedError, match=r"Loop 'loop'.*data-dependent termination.*model input 'acc0'"):
        import_onnx(model)


def test_loop_past_the_unrolling_cap_is_a_clear_error():
    with pytest.raises(UnsupportedError, match="Loop 'loop'.*trip count 5000.*unrolling cap of 1024"):
        import_onnx(loop_model(5000))


def test_unconvertible_op_inside_a_body_is_reported_by_the_prescan():
    model = loop_model(3)
    body = model.graph.node[0].attribute[0].g
    body.node.append(helper.make_node("Mystery", ["acc_out"], ["unused"], domain="com.example"))
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(UnsupportedError, match=r"Loop 'loop'.*subgraph has nodes aotc cannot convert: "
                                               r"Mystery \(no converter\)"):
        import_onnx(model)


def test_checks_of_body_nodes_run_in_the_prescan_with_body_dtypes():
    """An integer MatMul (float only) inside a Scan body is reported before conversion."""
    body = helper.make_graph([helper.make_node("MatMul", ["s", "x_t"], ["s_out"])], "body",
                             [vi("s", I64, [2, 2]), vi("x_t", I64, [2, 2])], [vi("s_out", I64, [2, 2])])
    node = helper.make_node("Scan", ["s0", "x"], ["s_final"], name="scan", body=body, num_scan_inputs=1)
    model = model_of([node], [vi("s0", I64, [2, 2]), vi("x", I64, [3, 2, 2])], [vi("s_final", I64, [2, 2])])
    with pytest.raises(UnsupportedError, match=r"Scan 'scan'.*MatMul \(integer i64 operands .*float only"):
        import_onnx(model)

"""reduce: subgraphs carry recorded values; delta debugging shrinks an 80-node model to its bad node."""
import numpy as np
import onnx
import pytest

from aotc.debug import reduce as R
from aotc.debug.compare import Session, run_compare
from aotc.debug.metrics import parse_condition
from aotc.debug.onnx_model import ort_run
from aotc.errors import AotcError
from tests.debug._models import chain, mlp
from tests.helpers.rng import fresh_rng

pytest.importorskip("onnxruntime")


def test_cut_reads_recorded_values_and_reproduces_them():
    rng, seed = fresh_rng()
    model = mlp()
    rec = R.Recorded(model, {"x": rng.standard_normal((4, 16)).astype(np.float32)})
    nodes = [n for n in model.graph.node if n.name in ("relu1", "fc2", "bias2")]
    c = rec.cut(nodes)
    onnx.checker.check_model(c.model)
    assert [i.name for i in c.model.graph.input] == ["hb"] and np.array_equal(c.feeds["hb"], rec.values["hb"])
    assert [o.name for o in c.model.graph.output] == ["ob"]
    assert {t.name for t in c.model.graph.initializer} == {"W2", "b2"}
    np.testing.assert_allclose(ort_run(c.model, c.feeds)["ob"], rec.values["ob"], rtol=1e-6, err_msg=str(seed))
    # a node whose results nobody reads and that is no model output leaves no output: no candidate
    assert rec.cut([]) is None


def test_reduce_with_a_predicate_shrinks_80_nodes():
    model = chain()
    assert len(model.graph.node) == 80
    seen = []

    def still_fails(c):
        seen.append(len(c.model.graph.node))
        onnx.checker.check_model(c.model)
        return any(n.name == "relu7" for n in c.model.graph.node)
    result = R.reduce_model(model, still_fails)
    assert result.nodes == ["relu7"] and result.original_nodes == 80
    assert [i.name for i in result.model.graph.input] == ["a7"] and result.tests <= 20
    assert seen[0] == 80 and min(seen) == 1


def test_a_model_that_does_not_fail_is_an_error():
    with pytest.raises(AotcError, match="does not fail"):
        R.reduce_model(mlp(), lambda c: False)


def test_reduce_until_an_fp16_engine_is_off(tmp_path):
    """The issue's check: ~80 nodes, one bad node (x1e5: past fp16's range) -> 4 nodes or fewer."""
    model = chain()
    session = Session(model, seed=0)
    first = run_compare(session, "fp16").main.first_bad
    assert first is not None and "scale12" in first.onnx_nodes
    test = R.until_test(parse_condition("rel>1e-2"), "fp16")
    result = R.reduce_model(model, test, inputs=session.feeds, seed_nodes=first.onnx_nodes)
    assert len(result.nodes) <= 4 and "scale12" in result.nodes
    error = R.engine_error(R.Candidate(result.model, result.feeds), "fp16")
    assert error.max_rel_err > 1e-2 or error.nonfinite
    npz = R.save(result, tmp_path / "out" / "reduced.onnx")
    assert npz == tmp_path / "out" / "reduced.npz"
    back = onnx.load(tmp_path / "out" / "reduced.onnx")
    assert [n.name for n in back.graph.node] == result.nodes
    assert set(np.load(npz).files) == {i.name for i in back.graph.input}
    assert R.engine_error(R.Candidate(result.model, result.feeds), "fp32").max_rel_err < 1e-4   # fp32 is fine


@pytest.mark.slow
def test_reduce_until_without_the_kernel_hint():
    model = chain()
    result = R.reduce_model(model, R.until_test(parse_condition("rel>1e-2"), "fp16"))
    assert len(result.nodes) <= 4


def test_check_command():
    """--check CMD: exit 0 means the candidate still fails; {model} is the candidate's path."""
    model = chain(blocks=6, bad=3)
    with R.work_dir() as tmp:       # node names are plain strings in the protobuf: grep finds them
        result = R.reduce_model(model, R.check_command_test("grep -q -a add4 {model}", tmp))
        assert result.nodes == ["add4"]
        result = R.reduce_model(model, R.check_command_test("grep -q -a relu2", tmp))     # path appended
        assert result.nodes == ["relu2"]

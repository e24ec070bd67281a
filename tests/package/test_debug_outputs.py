"""debug_outputs: every region's result becomes an extra output; the regions and kernels stay the production ones."""
import pytest

from aotc.compiler import generate_kernels
from aotc.debug.onnx_model import import_with_tensor_names
from aotc.errors import CompileError
from aotc.fusion.regions import partition
from aotc.hlo_passes.pipeline import run_pipeline
from aotc.package.debug_outputs import PREFIX, add_debug_outputs, compute_node_names
from tests.debug._models import mlp


@pytest.fixture(scope="module")
def optimized():
    graph, _ = import_with_tensor_names(mlp())
    g, _ = run_pipeline(graph)
    return g


def test_roots_become_outputs_after_the_production_ones(optimized):
    regions = partition(optimized)
    g, debug = add_debug_outputs(optimized, regions)
    assert g.outputs[:len(optimized.outputs)] == optimized.outputs
    assert g.signature_output_names()[:1] == ["y"]
    roots = [r.root for r in regions if r.root not in optimized.outputs]
    assert g.outputs[len(optimized.outputs):] == roots and len(debug) == len(roots)
    for d, v in zip(debug, roots):
        assert d.output.startswith(PREFIX + ".") and d.value == v.name
        assert regions[d.kernel].root is v and d.nodes == compute_node_names(regions[d.kernel])
    assert g.nodes == optimized.nodes and optimized.outputs == g.outputs[:1]    # the input graph is left alone


def test_kernel_sources_do_not_change(optimized):
    regions = partition(optimized)
    g, _ = add_debug_outputs(optimized, regions)
    _, prod, _ = generate_kernels(optimized, regions)
    _, dbg, writes = generate_kernels(g, regions)
    assert [k.source for k in dbg[:len(prod)]] == [k.source for k in prod]
    assert all(not r.nodes for r in dbg[len(prod):] for r in [r.region])     # only copies come after
    assert sorted(writes.values()) == list(range(len(g.outputs)))


def test_names_that_clash_with_model_outputs_are_an_error(optimized):
    regions = partition(optimized)
    first = next(r for r in regions if r.root not in optimized.outputs)
    clashing = optimized.with_nodes(optimized.nodes)
    clashing.output_names = [f"{PREFIX}.{regions.index(first)}.{first.root.name}"]
    with pytest.raises(CompileError, match="clash"):
        add_debug_outputs(clashing, regions)

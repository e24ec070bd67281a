"""Chain kernels (one block per image, pool then GEMVs through shared memory) on the host emulation."""
import pytest

from aotc.fusion import chains
from aotc.ir.graph import GraphBuilder
from aotc.kernels import codegen
from aotc.kernels.nvrtc_compile import compile_device
from tests.fusion.test_chains import squeeze_excite
from tests.helpers.rng import fresh_rng, random_array
from tests.kernels.test_codegen import check


@pytest.mark.parametrize("shape,squeeze,pool_in_chain", [
    ((3, 5, 7, 50), 13, True),          # odd channels, batch 3
    ((1, 9, 9, 300), 75, True),         # more channels than threads
    ((2, 4, 4, 40), 10, False),         # the pool on its own, the GEMVs chained
])
def test_squeeze_excite_chain(shape, squeeze, pool_in_chain, monkeypatch):
    if not pool_in_chain:
        monkeypatch.setattr(chains, "MAX_POOLED_PER_IMAGE", 10)
    rng, seed = fresh_rng()
    b = GraphBuilder()
    x = b.input("x", shape)
    graph = b.build([squeeze_excite(b, b.add("tanh", x), squeeze, rng=rng)])
    kernels = check(graph, [random_array(rng, shape)], seed, rtol=1e-5, atol=1e-6)
    chain = next(k for k in kernels if k.region.kind == "chain")
    assert len(chain.region.payload.phases) == (3 if pool_in_chain else 2)
    assert chain.grid == (shape[0], 1, 1)
    assert compile_device(codegen.module_source([chain]), "sm_90")[:4] == b"\x7fELF"

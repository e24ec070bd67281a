"""Size-bucket variants (aotc/kernels/variants.py): each one, forced, computes what the interpreter does."""
import numpy as np
import pytest

from aotc.bench.models.small import bert_encoder
from aotc.bench.models.zoo import with_dynamic_axes
from aotc.hlo_passes.pipeline import run_pipeline
from aotc.importers.onnx import import_onnx
from aotc.ir.dims import DimRange, dim_ranges
from aotc.ir.interpreter import interpret
from aotc.kernels.variants import buckets_for
from tests.helpers.host_run import run_on_host
from tests.helpers.rng import fresh_rng


def test_buckets_pin_dims_that_start_at_one_and_cap_long_ones():
    dims = {"batch": DimRange(1, 64), "sequence": DimRange(1, 512), "past": DimRange(0, 1000)}
    b = buckets_for(dims)
    assert [x.name for x in b] == ["batch=1,sequence=1", "sequence<=256,past<=256"]
    assert b[1].ranges(dims) == {"sequence": DimRange(1, 256), "past": DimRange(0, 256)}
    assert buckets_for({"n": DimRange(4, 8)}) == []


def _groups(launches):
    """Launches per region: variants of one region are adjacent and describe the same region."""
    groups = []
    for ln in launches:
        if groups and ln.variant and groups[-1][-1].variant and ln.region == groups[-1][-1].region:
            groups[-1].append(ln)
        else:
            groups.append([ln])
    return groups


def _forcing(name):
    def force(launches):
        out = []
        for g in _groups(launches):
            pick = next((ln for ln in g if ln.variant == name), None) or next(ln for ln in g if ln.variant in ("generic", ""))
            pick.when = None
            out.append(pick)
        return out
    return force


@pytest.fixture(scope="module")
def bert():
    model, _ = with_dynamic_axes(bert_encoder(batch=3, seq=7, max_pos=300, layers=1))
    g = import_onnx(model, dynamic={"batch_size": (1, 4), "sequence_length": (1, 300)})
    with dim_ranges(g.dims):
        g, _ = run_pipeline(g)
    return g


def _inputs(rng, b, s):
    return {"input_ids": rng.integers(0, 50, (b, s)), "token_type_ids": rng.integers(0, 2, (b, s)),
            "attention_mask": (rng.random((b, s)) < 0.8).astype(np.int64)}


@pytest.mark.parametrize("variant", [None, "generic", "batch_size=1,sequence_length=1", "sequence_length<=256"])
def test_each_variant_forced_matches_in_its_bucket(bert, variant):
    rng, seed = fresh_rng()
    shapes = {None: [(1, 1), (2, 1), (1, 255), (3, 300), (4, 257)], "generic": [(1, 1), (3, 300), (2, 17)],
              "batch_size=1,sequence_length=1": [(1, 1)], "sequence_length<=256": [(1, 1), (4, 256), (2, 9)]}[variant]
    sets = [_inputs(rng, b, s) for b, s in shapes]
    names = [v.name for v in bert.inputs]
    force = None if variant is None else _forcing(variant)
    results, kernels, _ = run_on_host(bert, None, shapes=[[f[n] for n in names] for f in sets], force=force)
    for f, got, shape in zip(sets, results, shapes):
        for i, (g, w) in enumerate(zip(got, interpret(bert, f))):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5, err_msg=f"{variant} output {i} at {shape}, seed {seed}")


def test_variants_exist_and_differ(bert):
    seen = {}
    run_on_host(bert, None, shapes=[], force=lambda ls: seen.setdefault("launches", ls))
    launches = seen["launches"]
    variants = {ln.variant for ln in launches}
    assert {"batch_size=1,sequence_length=1", "generic"} <= variants   # no BERT region changes at <=256
    pinned = [ln for ln in launches if ln.variant == "batch_size=1,sequence_length=1"]
    assert pinned and all(a.kind != "dim" for ln in pinned for a in ln.args)    # fully static kernels

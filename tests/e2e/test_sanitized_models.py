"""Real architectures run clean under the sanitizer, in forward and reverse order, and the
sanitized run computes what the plain host build computes."""
from __future__ import annotations

import numpy as np
import pytest

import aotc
from aotc.kernels.host_compile import have_host_compiler
from aotc.package.runtime_binding import Engine
from aotc.package.sanitize import read_report, sanitized_engine, summary_lines
from aotc.bench.models.real import mobilenetv2
from aotc.bench.models.small import bert_encoder, resnet_bottleneck

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not have_host_compiler(), reason="no host C++ compiler")]

BUILDERS = {
    "resnet_bottleneck": lambda: resnet_bottleneck(),
    "bert_encoder": lambda: bert_encoder(),
    "mobilenetv2_64px": lambda: mobilenetv2(size=64, classes=10),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_model_is_clean_under_the_sanitizer(name, tmp_path, monkeypatch):
    model, feeds = BUILDERS[name]()
    path = tmp_path / f"{name}.engine"
    aotc.compile(model, str(path), arch="none")
    want = Engine(str(path)).create_context(device="cpu").run(feeds)
    sanitized = tmp_path / f"{name}.sanitized.engine"
    sanitized.write_bytes(sanitized_engine(path.read_bytes()))
    for order in ("forward", "reverse"):
        report = tmp_path / f"{order}.jsonl"
        monkeypatch.setenv("AOTC_SANITIZE_REPORT", str(report))
        monkeypatch.setenv("AOTC_SANITIZE_ORDER", order)
        got = Engine(str(sanitized)).create_context(device="cpu").run(feeds)
        assert summary_lines(read_report(report)) == [], f"{name} ({order})"
        for k, w in want.items():
            np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-6, err_msg=f"{name}/{k} ({order})")

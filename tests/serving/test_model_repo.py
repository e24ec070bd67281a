"""The Triton model repository written for engines: layout, names, config text, refusals."""
from __future__ import annotations

import os

import pytest

from aotc.serving import model_repo
from aotc.serving.model_repo import ServingError


def test_repository_layout_per_engine(serving_engines, tmp_path):
    repo = tmp_path / "repo"
    names = model_repo.write_repository(str(repo), [serving_engines["mlp"][0], serving_engines["seq"][0]],
                                        instances=3)
    assert names == ["mlp", "seq"]
    for name in names:
        assert (repo / name / "1" / "model.engine").read_bytes() == open(serving_engines[name][0], "rb").read()
        assert (repo / name / "libtriton_aotc.so").stat().st_size > 0
        text = (repo / name / "config.pbtxt").read_text()
        assert f'name: "{name}"' in text and 'backend: "aotc"' in text
        assert "instance_group [{ kind: KIND_CPU, count: 3 }]" in text
    assert model_repo.is_repository(str(repo)) and not model_repo.is_repository(str(repo / "mlp"))


def test_cuda_instances_are_kind_gpu():
    assert "kind: KIND_GPU, count: 2, gpus: [0, 1]" in model_repo.config_text("m", "cuda", 2, (0, 1))
    assert "kind: KIND_GPU, count: 1 }" in model_repo.config_text("m", "cuda")


@pytest.mark.parametrize("call, message", [
    (lambda d, e: model_repo.write_repository(d, [e, os.path.join(d, "nope.engine")]), "no engine file at"),
    (lambda d, e: model_repo.write_repository(d, [e, e]), "would both be model 'mlp'"),
    (lambda d, e: model_repo.config_text("m", "tpu"), "unknown device 'tpu'"),
    (lambda d, e: model_repo.config_text("m", "cpu", 0), "--instances must be at least 1"),
    (lambda d, e: model_repo.model_name(os.path.join(d, "a b.engine")), "cannot name a model after 'a b.engine'"),
])
def test_refusals_say_what_to_fix(serving_engines, tmp_path, call, message):
    with pytest.raises(ServingError, match=message):
        call(str(tmp_path / "repo"), serving_engines["mlp"][0])
    assert not (tmp_path / "repo" / "mlp").exists()  # nothing half-written

"""The KServe manifests in docs/kserve parse, fit together (the InferenceService names the
ServingRuntime and its model format), point Triton at KServe's model mount, and list exactly the
files `aotc serve --write-repo` writes for the engine they serve."""
from __future__ import annotations

import os

import yaml
from click.testing import CliRunner

from aotc.cli.main import main

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "kserve")


def _load(name):
    with open(os.path.join(DOCS, name)) as f:
        return yaml.safe_load(f)


def test_the_manifests_fit_together():
    runtime, isvc = _load("serving-runtime.yaml"), _load("inference-service.yaml")
    assert runtime["kind"] == "ServingRuntime" and isvc["kind"] == "InferenceService"
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"]["name"] in [f["name"] for f in runtime["spec"]["supportedModelFormats"]]
    container = runtime["spec"]["containers"][0]
    assert "--model-repository=/mnt/models" in container["args"]
    assert "tritonserver" in container["image"] and container["command"] == ["tritonserver"]
    assert model["storageUri"].rstrip("/").endswith("/aotc-repo")


def test_the_inference_service_names_the_files_write_repo_writes(serving_engines, tmp_path):
    isvc = _load("inference-service.yaml")
    listed = sorted(isvc["metadata"]["annotations"]["aotc.dev/model-files"].split(","))
    repo = tmp_path / "aotc-repo"
    result = CliRunner().invoke(main, ["serve", "--write-repo", str(repo), serving_engines["mlp"][0]])
    assert result.exit_code == 0, result.output
    written = sorted(os.path.relpath(os.path.join(d, f), repo) for d, _, files in os.walk(repo) for f in files)
    assert listed == written

"""aotc engines served by the real tritonserver (nvidia-pytriton's Triton 2.51) through `aotc serve`,
queried with Triton's own client over HTTP and gRPC: health, metadata and config, binary and JSON
tensors against onnxruntime, a bad request failing alone, dynamic batching seen in the statistics,
and a clean shutdown on SIGTERM. Skipped (with the reason) where no tritonserver is installed."""
from __future__ import annotations

import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.serving.conftest import rand, reference
from tests.serving.server import Server, require_tritonserver

tritonclient = pytest.importorskip("tritonclient")
import tritonclient.grpc as tg  # noqa: E402
import tritonclient.http as th  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

PROTOCOLS = ("http", "grpc")
_CLIENTS = []  # closed before the server stops: Triton waits for open HTTP connections on SIGTERM


@pytest.fixture(scope="module")
def server(serving_engines, tmp_path_factory):
    require_tritonserver()
    log = tmp_path_factory.mktemp("triton") / "server.log"
    srv = Server([serving_engines[n][0] for n in ("mlp", "mlp_static", "seq", "t5")], str(log),
                 ["--instances", "2"])
    try:
        srv.wait_ready()
        yield srv
    finally:
        _close_clients()
        srv.stop()


def _client(server, protocol):
    c = th.InferenceServerClient(server.url_http) if protocol == "http" else tg.InferenceServerClient(server.url_grpc)
    _CLIENTS.append(c)
    return c


def _close_clients():
    while _CLIENTS:
        _CLIENTS.pop().close()


def _infer(client, protocol, model, feeds, binary=True):
    mod = th if protocol == "http" else tg
    inputs = []
    for name, arr in feeds.items():
        i = mod.InferInput(name, list(arr.shape), "FP32")
        if protocol == "http":
            i.set_data_from_numpy(arr, binary_data=binary)
        else:
            i.set_data_from_numpy(arr)
        inputs.append(i)
    if protocol == "http":
        outputs = [th.InferRequestedOutput(o, binary_data=binary) for o in _output_names(client, protocol, model)]
        return client.infer(model, inputs, outputs=outputs)
    return client.infer(model, inputs)


def _output_names(client, protocol, model):
    meta = client.get_model_metadata(model)
    return [o["name"] for o in meta["outputs"]] if protocol == "http" else [o.name for o in meta.outputs]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_server_and_models_are_live_and_ready(server, protocol):
    c = _client(server, protocol)
    assert c.is_server_live() and c.is_server_ready()
    for model in ("mlp", "mlp_static", "seq"):
        assert c.is_model_ready(model)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_metadata_and_config_come_from_the_engine(server, protocol):
    c = _client(server, protocol)
    if protocol == "http":
        meta, cfg = c.get_model_metadata("mlp"), c.get_model_config("mlp")
        static = c.get_model_config("mlp_static")
        assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 32]}]
        assert [o["shape"] for o in meta["outputs"]] == [[-1, 10]]
    else:
        meta, cfg = c.get_model_metadata("mlp"), c.get_model_config("mlp", as_json=True)["config"]
        static = c.get_model_config("mlp_static", as_json=True)["config"]
        assert [(i.name, i.datatype, list(i.shape)) for i in meta.inputs] == [("x", "FP32", [-1, 32])]
    assert cfg["backend"] == "aotc" and int(cfg["max_batch_size"]) == 32 and "dynamic_batching" in cfg
    assert [int(d) for d in cfg["input"][0]["dims"]] == [32]
    assert cfg["instance_group"][0]["kind"] == "KIND_CPU" and int(cfg["instance_group"][0]["count"]) == 2
    assert int(static.get("max_batch_size", 0)) == 0
    assert [int(d) for d in static["input"][0]["dims"]] == [4, 32]


@pytest.mark.parametrize("protocol, binary", [("http", True), ("http", False), ("grpc", True)])
def test_inference_matches_onnxruntime(server, serving_engines, protocol, binary):
    c = _client(server, protocol)
    cases = [("mlp", {"x": rand((3, 32), 1)}), ("mlp_static", {"x": rand((4, 32), 2)}),
             ("seq", {"x": rand((2, 9), 3)})]
    for model, feeds in cases:
        result = _infer(c, protocol, model, feeds, binary)
        for name, want in reference(serving_engines[model][1], feeds).items():
            got = result.as_numpy(name)
            assert got.shape == want.shape, (model, name)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_bad_request_errors_and_the_server_keeps_serving(server, serving_engines, protocol):
    c = _client(server, protocol)
    with pytest.raises(InferenceServerException, match=r"input 'x' dim 1 \(seq\) is 20, outside 1\.\.16"):
        _infer(c, protocol, "seq", {"x": rand((1, 20), 4)})
    with pytest.raises(InferenceServerException):
        _infer(c, protocol, "mlp", {"x": rand((2, 31), 5)})  # Triton's own shape check against the config
    feeds = {"x": rand((2, 6), 6)}
    result = _infer(c, protocol, "seq", feeds)
    np.testing.assert_allclose(result.as_numpy("y"), reference(serving_engines["seq"][1], feeds)["y"], rtol=1e-6)


def test_concurrent_clients_are_batched_and_statistics_show_it(server, serving_engines):
    onnx_path = serving_engines["mlp"][1]
    before = _client(server, "http").get_inference_statistics("mlp")["model_stats"][0]

    def client(i):
        protocol = "grpc" if i % 2 == 0 else "http"
        c = _client(server, protocol)
        for k in range(8):
            feeds = {"x": rand((1 + (i + k) % 3, 32), 100 * i + k)}
            (name, want), = reference(onnx_path, feeds).items()
            np.testing.assert_allclose(_infer(c, protocol, "mlp", feeds).as_numpy(name), want, rtol=1e-5, atol=1e-6)
        return True

    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(client, range(16)))
    stats = _client(server, "http").get_inference_statistics("mlp")["model_stats"][0]
    requests = stats["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
    executions = stats["execution_count"] - before["execution_count"]
    assert requests == 128
    assert executions < requests, "no two requests ever ran as one batch"
    assert max(int(b["batch_size"]) for b in stats["batch_stats"]) > 3  # rows: requests carry 1-3 each
    assert stats["inference_stats"]["compute_infer"]["ns"] > 0 and stats["inference_stats"]["queue"]["count"] > 0
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics}/metrics", timeout=30) as r:
        metrics = r.read().decode()
    counts = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
              if line.startswith(("nv_inference_request_success{", "nv_inference_exec_count{"))
              and 'model="mlp"' in line}
    assert counts["nv_inference_request_success"] >= 128
    assert 0 < counts["nv_inference_exec_count"] < counts["nv_inference_request_success"]


def test_a_model_with_two_int64_inputs_batches_both(server, serving_engines):
    """T5 layer: input_ids and attention_mask (int64) concatenated together, over gRPC."""
    onnx_path = serving_engines["t5"][1]

    def client(i):
        c = _client(server, "grpc")
        rng = np.random.default_rng(500 + i)
        for k in range(4):
            b = 1 + (i + k) % 3
            feeds = {"input_ids": rng.integers(0, 64, (b, 12)),
                     "attention_mask": (rng.random((b, 12)) > 0.2).astype(np.int64)}
            inputs = []
            for name, arr in feeds.items():
                t = tg.InferInput(name, list(arr.shape), "INT64")
                t.set_data_from_numpy(arr)
                inputs.append(t)
            (name, want), = reference(onnx_path, feeds).items()
            np.testing.assert_allclose(c.infer("t5", inputs).as_numpy(name), want, rtol=1e-5, atol=1e-5)
        return True

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(client, range(8)))


def test_sigterm_stops_the_server_cleanly(serving_engines, tmp_path):
    require_tritonserver()
    srv = Server([serving_engines["mlp"][0]], str(tmp_path / "server.log"))
    srv.wait_ready()
    try:
        c = _client(srv, "http")
        assert _infer(c, "http", "mlp", {"x": rand((1, 32), 7)}).as_numpy(
            _output_names(c, "http", "mlp")[0]).shape == (1, 10)
    finally:
        _close_clients()
    t0 = time.monotonic()
    assert srv.stop() == 0
    assert time.monotonic() - t0 < 20
    log = srv.text()
    assert "successfully unloaded 'mlp'" in log and "error" not in log.split("successfully unloaded")[-1].lower()

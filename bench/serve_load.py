"""Load test: one model served by Triton through the aotc backend and through Triton's Python
backend calling onnxruntime, the same clients against both.

    python -m bench.serve_load [--threads 8] [--requests 100] [--time-cap 60] [--rows 1]
                               [--protocol http|grpc] [--max-batch 32] [--instances 1] [--json]

The model is the small MLP of aotc.bench.models with a dynamic batch dim
(1..--max-batch), compiled once. Both models get dynamic batching with the
same max_batch_size and instance count, so the server forms the same kind of
batches for both; the Python model concatenates its requests and splits the
result as the aotc backend does. N client threads send M requests each (or
stop at the time cap), each of --rows rows drawn from a pool of fresh random
inputs whose onnxruntime outputs were computed beforehand; every response is
checked against them. Reported per model: requests/s, p50/p99 latency, errors,
checked responses, and Triton's mean batch size (requests per execution);
`aotc_direct` is the baseline without a server: one aotc context in this
process running the same requests one after another.
The aotc model runs on the `cpu` device (the host build of its CUDA kernels,
for validation, not speed); with a GPU pass --device cuda.
"""
from __future__ import annotations

import argparse
import json
import os
import site
import sys
import sysconfig
import tempfile
import threading
import time

import numpy as np

PYTHON_MODEL = '''
import os
import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


# tensors cross through DLPack both ways: nvidia-pytriton's stub is built against numpy 1.x, and
# its as_numpy() and Tensor(name, array) do not carry numpy 2 arrays' bytes
def _tensor(name, array):
    return pb_utils.Tensor.from_dlpack(name, np.ascontiguousarray(array).__dlpack__())


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.sess.get_inputs()]
        self.outputs = [o.name for o in self.sess.get_outputs()]

    def execute(self, requests):
        arrays = [[np.from_dlpack(pb_utils.get_input_tensor_by_name(r, n)) for n in self.inputs] for r in requests]
        outs = self.sess.run(None, {n: np.concatenate([a[k] for a in arrays]) for k, n in enumerate(self.inputs)})
        responses, start = [], 0
        for a in arrays:
            rows = a[0].shape[0]
            responses.append(pb_utils.InferenceResponse(
                [_tensor(n, o[start:start + rows]) for n, o in zip(self.outputs, outs)]))
            start += rows
        return responses
'''


def _python_config(name, onnx_model, max_batch, instances):
    from onnx import TensorProto
    types = {TensorProto.FLOAT: "TYPE_FP32", TensorProto.INT64: "TYPE_INT64", TensorProto.INT32: "TYPE_INT32"}

    def tensors(values):
        out = []
        for v in values:
            t = v.type.tensor_type
            dims = [d.dim_value if d.dim_value else -1 for d in t.shape.dim][1:]
            out.append(f'{{ name: "{v.name}", data_type: {types[t.elem_type]}, dims: {dims} }}')
        return ", ".join(out)
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch}\n'
            f'input [{tensors(onnx_model.graph.input)}]\noutput [{tensors(onnx_model.graph.output)}]\n'
            f'dynamic_batching {{ }}\ninstance_group [{{ kind: KIND_CPU, count: {instances} }}]\n')


def build_repo(work, max_batch, instances, device):
    """Compiles the model and writes both Triton models; returns (repo, onnx model)."""
    import onnx

    import aotc
    from aotc.bench.models import small, zoo
    from aotc.serving import model_repo
    model, _ = zoo.with_dynamic_axes(small.mlp(batch=4), axes=("batch",))
    repo = os.path.join(work, "repo")
    engine = os.path.join(work, "aotc_mlp.engine")
    aotc.compile(model, engine, arch="none" if device == "cpu" else None, dynamic={"batch": (1, max_batch)})
    model_repo.write_repository(repo, [engine], device, instances)
    ort_dir = os.path.join(repo, "ort_mlp", "1")
    os.makedirs(ort_dir)
    onnx.save(model, os.path.join(ort_dir, "model.onnx"))
    with open(os.path.join(ort_dir, "model.py"), "w") as f:
        f.write(PYTHON_MODEL)
    with open(os.path.join(repo, "ort_mlp", "config.pbtxt"), "w") as f:
        f.write(_python_config("ort_mlp", model, max_batch, instances))
    return repo, model


def python_backend_usable() -> bool:
    """Can Triton's Python backend stub embed this interpreter (it links libpython3.x.so)?"""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    return bool(sysconfig.get_config_var("Py_ENABLE_SHARED")) and os.path.exists(
        os.path.join(libdir, sysconfig.get_config_var("LDLIBRARY") or ""))


def python_backend(server, root):
    """A `python` backend folder for this interpreter: the server's libtriton_python.so and the stub
    built for this Python version (nvidia-pytriton ships one per version)."""
    if not server.backends_dir or not os.path.isdir(os.path.join(server.backends_dir, "python")):
        raise SystemExit("this tritonserver has no python backend; the onnxruntime comparison needs one")
    if not python_backend_usable():
        raise SystemExit("this Python has no shared libpython, which Triton's Python backend stub loads")
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = os.path.join(os.path.dirname(server.backends_dir), "python_backend_stubs", ver, "triton_python_backend_stub")
    folder = os.path.join(root, "python")
    os.makedirs(folder)
    src = os.path.join(server.backends_dir, "python")
    for name in os.listdir(src):
        if name != "__pycache__":
            os.symlink(os.path.join(src, name), os.path.join(folder, name))
    if os.path.isfile(stub):
        os.symlink(stub, os.path.join(folder, "triton_python_backend_stub"))
    return root


def start_server(repo, work):
    import subprocess

    from aotc.serving.backend_build import backend_directory
    from aotc.serving.tritonserver import find_tritonserver, free_ports, server_command
    server = find_tritonserver()
    backends = os.path.join(work, "backends")
    python_backend(server, backends)
    backend_directory(backends)
    http, grpc, metrics = free_ports(3)
    env = server.env()
    env["LD_LIBRARY_PATH"] = os.pathsep.join([sysconfig.get_config_var("LIBDIR") or "", env.get("LD_LIBRARY_PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(site.getsitepackages())  # numpy and onnxruntime for the stub
    log = open(os.path.join(work, "server.log"), "w")
    proc = subprocess.Popen(server_command(server, [repo], backends, "127.0.0.1", http, grpc, metrics), env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    return proc, log, http, grpc


def wait_ready(proc, url, log_path, timeout=180):
    import tritonclient.http as th
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"tritonserver exited ({proc.returncode}); log: {log_path}")
        c = th.InferenceServerClient(url)
        try:
            if c.is_server_ready():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        finally:
            c.close()
        time.sleep(0.25)
    raise SystemExit(f"tritonserver not ready after {timeout} s; log: {log_path}")


def load(model_name, url, protocol, pool, threads, requests, time_cap):
    """N threads x M requests against one model; every response checked."""
    import tritonclient.grpc as tg
    import tritonclient.http as th
    mod = th if protocol == "http" else tg
    latencies, errors, checked = [], [], [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + time_cap

    def worker(t):
        client = mod.InferenceServerClient(url)
        mine = []
        try:
            for k in range(requests):
                if time.monotonic() > stop_at:
                    break
                x, want, out_name = pool[(t * requests + k) % len(pool)]
                inp = mod.InferInput("x", list(x.shape), "FP32")
                inp.set_data_from_numpy(x)
                t0 = time.perf_counter()
                try:
                    got = client.infer(model_name, [inp]).as_numpy(out_name)
                except Exception as e:  # noqa: BLE001 - counted, reported
                    with lock:
                        errors.append(str(e).splitlines()[0])
                    continue
                mine.append(time.perf_counter() - t0)
                if got is None or got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-5):
                    with lock:
                        errors.append("wrong result")
                    continue
                with lock:
                    checked[0] += 1
        finally:
            client.close()
            with lock:
                latencies.extend(mine)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    lat = np.array(latencies) * 1e3 if latencies else np.array([float("nan")])
    return {"requests": len(latencies), "errors": len(errors), "first_error": errors[0] if errors else None,
            "checked": checked[0], "wall_s": round(wall, 3), "requests_per_s": round(len(latencies) / wall, 1),
            "p50_ms": round(float(np.percentile(lat, 50)), 3), "p99_ms": round(float(np.percentile(lat, 99)), 3)}


def direct(engine_path, device, pool, count, time_cap):
    """The baseline without a server: one aotc context in this process runs the same requests one
    after another (no batching, no transport)."""
    import aotc
    ctx = aotc.Engine(engine_path).create_context(device)
    latencies, errors = [], 0
    stop_at = time.monotonic() + time_cap
    t0 = time.perf_counter()
    for k in range(count):
        if time.monotonic() > stop_at:
            break
        x, want, out_name = pool[k % len(pool)]
        t = time.perf_counter()
        got = ctx.run({"x": x})[out_name]
        latencies.append(time.perf_counter() - t)
        errors += not np.allclose(got, want, rtol=1e-4, atol=1e-5)
    wall = time.perf_counter() - t0
    ctx.close()
    lat = np.array(latencies) * 1e3
    return {"requests": len(latencies), "errors": int(errors), "first_error": "wrong result" if errors else None,
            "checked": len(latencies) - int(errors), "wall_s": round(wall, 3),
            "requests_per_s": round(len(latencies) / wall, 1), "p50_ms": round(float(np.percentile(lat, 50)), 3),
            "p99_ms": round(float(np.percentile(lat, 99)), 3), "mean_batch": 1.0}


def mean_batch(url, model):
    import tritonclient.http as th
    c = th.InferenceServerClient(url)
    try:
        s = c.get_inference_statistics(model)["model_stats"][0]
    finally:
        c.close()
    return round(s["inference_count"] / max(1, s["execution_count"]), 2)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--requests", type=int, default=100, help="requests per thread")
    ap.add_argument("--time-cap", type=float, default=60.0, help="seconds per model, at most")
    ap.add_argument("--rows", type=int, default=1, help="batch rows per request")
    ap.add_argument("--protocol", choices=["http", "grpc"], default="http")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--instances", type=int, default=1)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import onnxruntime as ort
    with tempfile.TemporaryDirectory(prefix="serve-load-") as work:
        repo, model = build_repo(work, args.max_batch, args.instances, args.device)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        out_name = sess.get_outputs()[0].name
        rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
        pool = []
        for _ in range(64):
            x = rng.standard_normal((args.rows, 32)).astype(np.float32)
            pool.append((x, sess.run(None, {"x": x})[0], out_name))
        proc, log, http, grpc = start_server(repo, work)
        try:
            wait_ready(proc, f"127.0.0.1:{http}", log.name)
            url = f"127.0.0.1:{http if args.protocol == 'http' else grpc}"
            results = {}
            for name in ("aotc_mlp", "ort_mlp"):
                r = load(name, url, args.protocol, pool, args.threads, args.requests, args.time_cap)
                r["mean_batch"] = mean_batch(f"127.0.0.1:{http}", name)
                results[name] = r
            results["aotc_direct"] = direct(os.path.join(repo, "aotc_mlp", "1", "model.engine"), args.device, pool,
                                            args.threads * args.requests, args.time_cap)
        finally:
            proc.terminate()
            proc.wait(60)
            log.close()
    if args.json:
        print(json.dumps({"args": vars(args), "results": results}, indent=1))
    else:
        print(f"{args.threads} threads x {args.requests} requests, {args.rows} row(s) each, {args.protocol}, "
              f"max_batch {args.max_batch}, {args.instances} instance(s), aotc on {args.device}")
        print(f"{'model':<11} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'batch':>6} {'checked':>8} {'errors':>6}")
        for name, r in results.items():
            print(f"{name:<11} {r['requests_per_s']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['mean_batch']:>6} "
                  f"{r['checked']:>8} {r['errors']:>6}" + (f"  ({r['first_error']})" if r["errors"] else ""))
    return 1 if any(r["errors"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

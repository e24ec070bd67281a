"""Preflight of a GPU session: is everything the GPU checks need here, and is there a GPU?

Why: a borrowed GPU machine is fresh and offline, and its minutes are few.
Each check below says in one line what is present or what is missing and
how to get it, before any model is compiled. Fatal gaps (no NVRTC, no CUDA
headers for it, no runtime library, no driver) stop bench/gpu_all.sh; the
rest (g++ and its headers for host builds, competitors) only narrow it.

The stand-in driver (aotc.testing.fakecuda) passes as the GPU only with
`--stand-in`, so its results are never mistaken for a GPU's.

    python -m aotc.bench.gpu_preflight [--stand-in] [--json rows.json]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from importlib import metadata

from aotc.bench.gpu_report import Rows, one_line

PINNED = {"cuda-bindings": "13.0.3", "nvidia-cuda-nvrtc": "13.0.88", "nvidia-cuda-runtime": "13.0.96",
          "nvidia-cuda-crt": "13.0.88", "nvidia-cuda-cccl": "13.0.85"}
FP16_KERNEL = ('#include <cuda_fp16.h>\n'
               'extern "C" __global__ void k(__half *x) { x[threadIdx.x] = __float2half(1.0f); }\n')


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _packages(rows: Rows) -> None:
    for mod, dist, why in [("numpy", "numpy", "everything"), ("onnx", "onnx", "model builders"),
                           ("onnxruntime", "onnxruntime", "the onnxruntime comparison")]:
        v = _version(dist) or (_version("onnxruntime-gpu") if dist == "onnxruntime" else None)
        fatal = mod != "onnxruntime"
        rows.add("package " + dist, None, bool(v) or not fatal, version=v,
                 detail=None if v else f"not installed (pip install {dist}): needed for {why}")
    for dist, pin in PINNED.items():
        v = _version(dist)
        ok = v is not None and v.split(".")[0] == pin.split(".")[0]
        need = "NVRTC's CUDA headers (cuda_fp16.h)" if dist == "nvidia-cuda-runtime" else \
            "host builds with g++" if dist in ("nvidia-cuda-crt", "nvidia-cuda-cccl") else "NVRTC and the driver API"
        rows.add("package " + dist, None, ok or dist in ("nvidia-cuda-crt", "nvidia-cuda-cccl"), version=v,
                 detail=None if ok else f"{'version ' + v if v else 'not installed'}; needed for {need} "
                                        f"(pip install {dist}=={pin})")


def _nvrtc(rows: Rows) -> None:
    try:
        from aotc.kernels.nvrtc_compile import compile_device, cuda_include_dir
        inc = cuda_include_dir()
        cubin = compile_device(FP16_KERNEL, "sm_90")
        rows.add("NVRTC fp16 compile", None, len(cubin) > 0, detail=f"sm_90 cubin, headers from {inc}")
    except Exception as e:  # noqa: BLE001 - any failure here is the finding
        rows.add("NVRTC fp16 compile", None, False,
                 detail=f"{one_line(e)} (NVRTC needs cuda_fp16.h from nvidia-cuda-runtime 13.x: "
                        f"pip install nvidia-cuda-runtime=={PINNED['nvidia-cuda-runtime']})")


def _host_compiler(rows: Rows, required: bool) -> bool:
    cxx = (os.environ.get("CXX") or "g++").split()[0]
    ok = shutil.which(cxx) is not None
    detail = None if ok else f"no {cxx}: host builds (the cpu comparison) are skipped (apt-get install g++)"
    if ok:
        try:
            from aotc.kernels.host_compile import compile_host
            compile_host('extern "C" __global__ void k(float *x) { x[threadIdx.x] = 1.0f; }\n', ["k"])
            detail = f"{cxx} builds the host emulation"
        except Exception as e:  # noqa: BLE001
            ok = False
            detail = (f"{one_line(e)[:200]} (host builds need nvidia-cuda-crt and nvidia-cuda-cccl: "
                      f"pip install nvidia-cuda-crt=={PINNED['nvidia-cuda-crt']} "
                      f"nvidia-cuda-cccl=={PINNED['nvidia-cuda-cccl']})")
    rows.add("host compiler", None, ok or not required, usable=ok, detail=detail)
    return ok


def _runtime(rows: Rows) -> None:
    try:
        from aotc.package import runtime_binding as rb
        rows.add("aotc runtime", None, True, version=rb.runtime_version(), detail=rb.library_path())
    except Exception as e:  # noqa: BLE001
        rows.add("aotc runtime", None, False, detail=f"{one_line(e)} (needs cc to build it, or pip install -e .)")


def _driver(rows: Rows, stand_in: bool) -> None:
    from aotc.testing.fakecuda import active
    if active() and not stand_in:
        rows.add("driver", None, False, detail="AOTC_LIBCUDA names the stand-in driver: pass --stand-in to run "
                                               "the checks on it (its results are not a GPU's)")
        return
    if stand_in and not active():
        rows.add("driver", None, False, detail="--stand-in without the stand-in: "
                                               "eval \"$(python -m aotc.testing.fakecuda --env)\" first")
        return
    try:
        from cuda.bindings import driver as cu
        err, = cu.cuInit(0)
        if int(err) != 0:
            raise RuntimeError(f"cuInit: {err}")
        err, dev = cu.cuDeviceGet(0)
        err, name = cu.cuDeviceGetName(100, dev)
        err, major = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        err, minor = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        err, version = cu.cuDriverGetVersion()
        label = name.split(b"\0")[0].decode()
        rows.add("driver", None, True, device=label, arch=f"sm_{major}{minor}", driver=version,
                 stand_in=stand_in)
    except Exception as e:  # noqa: BLE001
        rows.add("driver", None, False, detail=f"no usable CUDA driver: {one_line(e)}")


def _competitors(rows: Rows) -> None:
    for dist, mod in [("torch", "torch"), ("tensorrt", "tensorrt"), ("onnxruntime-gpu", "onnxruntime")]:
        v = _version(dist)
        rows.add("optional " + dist, None, True, version=v, detail=None if v else "not installed: its rows "
                                                                                     "say so")


def run(stand_in: bool, json_path: str | None = None) -> Rows:
    rows = Rows("preflight", json_path)
    _packages(rows)
    _nvrtc(rows)
    _host_compiler(rows, required=stand_in)  # the stand-in runs kernels through the host build
    _runtime(rows)
    _driver(rows, stand_in)
    _competitors(rows)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stand-in", action="store_true", help="accept the stand-in CUDA driver as the GPU")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = run(args.stand_in, args.json)
    for r in rows.rows:
        extra = "  ".join(f"{k}={v}" for k, v in r.items()
                          if k not in ("check", "model", "precision", "status", "detail") and v is not None)
        print(f"{'ok' if r['status'] == 'pass' else 'MISSING':<8} {r['model']:<30} {extra} "
              f"{r.get('detail') or ''}".rstrip(), flush=True)
    host = next(r for r in rows.rows if r["model"] == "host compiler")
    rows.write(host_builds=bool(host.get("usable")))
    return 1 if rows.failed else 0


if __name__ == "__main__":
    sys.exit(main())

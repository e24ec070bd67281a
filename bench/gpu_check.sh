#!/usr/bin/env bash
# GPU check, one command on a machine with an NVIDIA GPU and no
# network (the device image has numpy, onnx, onnxruntime, cuda-bindings and
# the NVRTC wheel): build the C runtime in place, then compile the e2e models
# and compare --device cuda with --device cpu and onnxruntime.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
bash bench/gpu_install.sh
python3 -m aotc.bench.gpu_preflight || { echo "preflight failed: see the MISSING lines above"; exit 1; }
python3 -m bench.gpu_check

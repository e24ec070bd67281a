#!/usr/bin/env bash
# GPU check, one command on a machine with an NVIDIA GPU and no
# network (the device image has numpy, onnx, onnxruntime, cuda-bindings and
# the NVRTC wheel): build the C runtime in place, then compile the e2e models
# and compare --device cuda with --device cpu and onnxruntime.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>/dev/null \
  || echo "(editable install unavailable: the binding builds the runtime with cc on first use)"
python3 -m bench.gpu_check

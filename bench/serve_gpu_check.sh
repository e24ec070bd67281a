#!/usr/bin/env bash
# The serving GPU check, one command on a machine with an NVIDIA GPU: the Triton backend's
# KIND_GPU instance on the real cuda device (through the stand-in Triton of tests/serving,
# under ASan), then, where a tritonserver is installed ($AOTC_PYTRITON_DIR, PATH, ...), the
# load benchmark with cuda instances: through Triton against one context without a server.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
AOTC_SERVE_REAL_GPU=1 python3 -m pytest -p no:xdist -q tests/serving/test_backend_c.py -k kind_gpu
if python3 -c "from aotc.serving.tritonserver import find_tritonserver; find_tritonserver()" 2>/dev/null; then
  python3 -m bench.serve_load --device cuda --instances 2 --threads 16 --requests 200 --time-cap 120
else
  echo "no tritonserver here: the load benchmark with cuda instances is still owed"
fi

#!/usr/bin/env bash
# GPU check for the fusion/kernels issue, one command on a machine with an NVIDIA GPU
# (about 10 minutes of device time): the five full-size architectures on --device cuda
# vs --device cpu vs onnxruntime in fp32, tf32 and fp16 (implicit-GEMM and depthwise
# conv, tf32 and f16 mma, flash attention all on the real chip), then the kernel
# benchmark (GEMM, conv, attention, elementwise vs torch / onnxruntime-cuda where
# installed), then split-K on/off timed side by side for ResNet-50, BERT-base, ViT-B/16.
# Exits non-zero if any engine disagrees beyond bench/gpu_check.py's TOLERANCE.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
bash bench/gpu_install.sh
python3 -m aotc.bench.gpu_preflight || { echo "preflight failed: see the MISSING lines above"; exit 1; }
status=0
python3 -m bench.gpu_check fp32,tf32,fp16 --models small || status=1
python3 -m bench.gpu_check fp32,fp16 --models zoo || status=1
python3 -m bench.gpu_check fp32,tf32,fp16 --models real --no-cpu || status=1
python3 -m bench.gpu_kernels --precisions fp32,tf32,fp16 || status=1
python3 -m bench.gpu_split_k --precisions fp32,fp16 || status=1
exit $status

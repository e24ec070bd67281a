#!/usr/bin/env bash
# GPU benchmark, one command on a machine with an NVIDIA GPU (fits
# in 10 minutes of device time): the e2e suite (full-size ResNet-50,
# MobileNetV2, BERT-base, GPT-2 small, ViT-B/16 first, then the small
# models) at batch 1 and 32, fp32 and fp16, on --device cuda, against
# onnxruntime's CUDA provider, TensorRT, torch eager and torch.compile
# (torchvision models only) and JAX where installed; each missing one is a
# "not installed" row. Timing is device-resident (inputs and outputs stay on
# the GPU). The table shows p50/p99, throughput, max error against
# onnxruntime CPU fp32 and % of each engine's H200 roofline floor. Cases
# left when the 420 s budget is spent are listed as skipped.
# Results: bench_gpu.json / bench_gpu.csv in $OUT (or the current directory).
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
bash bench/gpu_install.sh
python3 -m aotc.bench.gpu_preflight || { echo "preflight failed: see the MISSING lines above"; exit 1; }
dest="${OUT:-.}"
python3 -m bench.suite --device cuda --models real,small --batches 1,32 --precisions fp32,tf32,fp16 \
  --against onnxruntime,tensorrt,torch,jax --arch sm_90 --iterations 100 --warmup 10 --max-seconds 3 \
  --budget-s "${AOTC_BENCH_BUDGET_S:-420}" --json "$dest/bench_gpu.json" --csv "$dest/bench_gpu.csv" "$@"

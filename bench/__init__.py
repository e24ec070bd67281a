"""The project's benchmark and GPU-check scripts, run as modules from the repository root.

    python -m bench.suite                 aotc vs onnxruntime on the e2e models (`aotc bench` per case)
    python -m bench.fusion_report         kernels, bytes and compile time of the real architectures
    python -m bench.runtime_overhead      runtime library size, engine load time, per-run host overhead
    python -m bench.rnn_compile           ONNX LSTM/GRU unrolled over T steps: launches and compile time
    python -m bench.gpu_check             on a GPU: cuda vs cpu vs onnxruntime (also bench/gpu_check.sh)
    python -m bench.gpu_kernels           on a GPU: GEMM, conv, attention, elementwise vs torch
    python -m bench.gpu_split_k           on a GPU: split-K on and off
    python -m bench.gpu_runtime_check     on a GPU: CUDA graph replay vs plain launches, multi-context throughput

They import aotc as installed (`pip install -e .`) and the shared model
builders from aotc.bench.models; this folder is not part of the installed
package.
"""

"""Benchmarking aotc engines against onnxruntime, TensorRT, torch and JAX (`aotc bench`).

source.py    what was given (ONNX, StableHLO, engine) and the --batch override
measure.py   the timing loop, p50/p99, input sets, max abs/rel error
systems.py   the system interface, aotc and onnxruntime, the accuracy reference
competitors.py  TensorRT, torch (eager, torch.compile), JAX: optional packages
cuda_mem.py  device buffers for device-resident timing on cuda
driver.py    run_bench: build, check, time every system alike
report.py    the table, JSON, CSV and the PNG chart
"""
from aotc.bench.driver import COMPETITORS, parse_against, run_bench
from aotc.bench.source import Source, load_source, onnx_source

__all__ = ["COMPETITORS", "Source", "load_source", "onnx_source", "parse_against", "run_bench"]

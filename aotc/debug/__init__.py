"""`aotc debug`: find the kernel that breaks accuracy, keep the culprits in f32, shrink a failing model.

- compare.py: a debug build of the engine (every region's result also an output, see
  aotc.package.debug_outputs) run beside onnxruntime; the error of every kernel and the
  first one beyond tolerance;
- bisect.py: a small set of ONNX nodes to keep in f32 (`--keep-fp32`) so an fp16/bf16
  engine meets the tolerance;
- reduce.py: delta debugging over a model's nodes down to a small subgraph that still fails.

What they share: metrics.py (the error measure and `--until` conditions), onnx_model.py
(the ONNX side: names, onnxruntime runs, subgraphs), inputs.py (random or .npz inputs).
"""

"""Competitors that need optional packages: TensorRT, torch, JAX.

Each reports itself unavailable with one line instead of failing: "not
installed (pip install ...)" when its package is missing, "not applicable
(...)" when it cannot honestly run this input (torch without the model's
torch source: converting ONNX back to torch would time a translation, not
torch; JAX without a StableHLO program; TensorRT off the GPU).
"""
from __future__ import annotations

import numpy as np

from aotc.bench.systems import System, missing


class TensorRTSystem(System):
    """TensorRT through its Python package: the build trtexec does (ONNX parser, builder, engine)."""
    name = "tensorrt"


    def unavailable(self):
        if self.source.kind != "onnx":
            return f"not applicable (TensorRT builds from ONNX; the input is {self.source.kind})"
        why = missing("tensorrt", "tensorrt")
        if why:
            return why
        if self.device != "cuda":
            return "not applicable (TensorRT runs on the cuda device only)"
        return None

    def build(self):
        import tensorrt as trt
        from aotc.bench import cuda_mem
        logger = trt.Logger(trt.Logger.ERROR)
        builder = trt.Builder(logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse(self.source.model_bytes()):
            raise RuntimeError("TensorRT's ONNX parser: " + "; ".join(
                str(parser.get_error(i)) for i in range(parser.num_errors)))
        config = builder.create_builder_config()
        if self.precision == "fp32":          # TensorRT enables TF32 by default: fp32 means fp32
            config.clear_flag(trt.BuilderFlag.TF32)
        elif self.precision == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        elif self.precision == "bf16":
            config.set_flag(trt.BuilderFlag.BF16)
        blob = builder.build_serialized_network(network, config)
        if blob is None:
            raise RuntimeError("TensorRT failed to build the engine")
        self.engine = trt.Runtime(logger).deserialize_cuda_engine(blob)
        self.context = self.engine.create_execution_context()
        self.stream = cuda_mem.new_stream()
        self.tensors = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.is_input = {n: self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in self.tensors}
        self.outs = {}
        for n in self.tensors:
            if not self.is_input[n]:
                shape = tuple(self.context.get_tensor_shape(n))
                dtype = trt.nptype(self.engine.get_tensor_dtype(n))
                self.outs[n] = cuda_mem.DeviceArray(shape, dtype)
                self.context.set_tensor_address(n, self.outs[n].ptr)

    def prepare(self, feeds):
        from aotc.bench import cuda_mem
        return {n: cuda_mem.DeviceArray.from_host(feeds[n]) for n in self.tensors if self.is_input[n]}

    def launch(self, prepared):
        for n, arr in prepared.items():
            self.context.set_tensor_address(n, arr.ptr)
        if not self.context.execute_async_v3(self.stream):
            raise RuntimeError("TensorRT execute_async_v3 failed")

    def sync(self):
        from aotc.bench import cuda_mem
        cuda_mem.stream_synchronize(self.stream)

    def run(self, feeds):
        self.launch(self.prepare(feeds))
        self.sync()
        return [self.outs[n].to_host() for n in self.output_names]


class TorchSystem(System):
    """torch eager (or `torch.compile`) on the model's own torch source (source.torch_module)."""

    def __init__(self, source, device, output_names, precision="fp32", arch=None, compiled=False):
        super().__init__(source, device, output_names, precision, arch)
        self.compiled = compiled
        self.name = "torch.compile" if compiled else "torch-eager"

    def unavailable(self):
        if getattr(self.source, "torch_module", None) is None:
            return "not applicable (no torch source for this model; ONNX-to-torch conversion would not be torch)"
        why = missing("torch", "torch")
        if why:
            return why
        import torch
        if self.device == "cuda" and not torch.cuda.is_available():
            return "not installed (pip install torch with CUDA support)"
        return None

    def build(self):
        import torch
        dev = "cuda" if self.device == "cuda" else "cpu"
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(self.precision, torch.float32)
        self.dtype = dtype
        # tf32 only where asked for (cuDNN convs default to it): fp32 rows compare fp32 with fp32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = self.precision == "tf32"
        module = self.source.torch_module().eval().to(dev)
        if dtype != torch.float32:
            module = module.to(dtype)
        self.module = torch.compile(module, mode="max-autotune-no-cudagraphs") if self.compiled else module
        self.dev = dev
        self.input_names = list(self.source.torch_input_names)
        self.run(self.example)            # torch.compile compiles on first call: part of the build

    def _tensors(self, feeds):
        import torch
        out = []
        for n in self.input_names:
            t = torch.from_numpy(np.ascontiguousarray(feeds[n])).to(self.dev)
            out.append(t.to(self.dtype) if t.is_floating_point() else t)
        return out

    def prepare(self, feeds):
        return self._tensors(feeds)

    def launch(self, prepared):
        import torch
        with torch.inference_mode():
            self.module(*prepared)

    def sync(self):
        if self.dev == "cuda":
            import torch
            torch.cuda.synchronize()

    def run(self, feeds):
        import torch
        with torch.inference_mode():
            out = self.module(*self._tensors(feeds))
        outs = out if isinstance(out, (tuple, list)) else [out]
        return [o.float().cpu().numpy() for o in outs]


class JaxSystem(System):
    """JAX (XLA) on the StableHLO program itself: jax.export artifacts, MLIR text or bytecode."""
    name = "jax"

    def unavailable(self):
        if self.source.kind != "stablehlo":
            return f"not applicable (JAX runs StableHLO inputs; the input is {self.source.kind})"
        why = missing("jax", "jax")
        if why:
            return why
        import jax
        if self.device == "cuda" and not any(d.platform == "gpu" for d in jax.devices()):
            return "not installed (pip install 'jax[cuda12]': jax has no GPU backend here)"
        return None

    def build(self):
        import jax
        from aotc.importers.stablehlo.mlir import _is_jax_export
        data = self.source.stablehlo_bytes()
        platform = "gpu" if self.device == "cuda" else "cpu"
        self.jdev = jax.devices(platform)[0]
        self.input_names = [v.name for v in self.source.graph().inputs]
        if _is_jax_export(data):
            from jax import export
            exp = export.deserialize(bytearray(data))

            def call(*flat):
                args, kwargs = jax.tree_util.tree_unflatten(exp.in_tree, list(flat))
                return exp.call(*args, **kwargs)
            fn = jax.jit(call)
            self.call = lambda flat: jax.tree_util.tree_leaves(fn(*flat))
        else:
            self.call = _compile_mlir(data, self.jdev)
        self.call(self.prepare(self.example))       # XLA compiles on first call: part of the build

    def prepare(self, feeds):
        import jax
        return [jax.device_put(feeds[n], self.jdev) for n in self.input_names]

    def launch(self, prepared):
        self._last = self.call(prepared)

    def sync(self):
        for a in getattr(self, "_last", []) or []:
            a.block_until_ready()

    def run(self, feeds):
        return [np.asarray(a) for a in self.call(self.prepare(feeds))]


def _compile_mlir(data: bytes, device):
    """Compile a StableHLO module (text or bytecode) with XLA for one device.

    jax has no public API to run a bare StableHLO module (only jax.export
    artifacts), so this uses the backend's compile entry point; the
    driver reports a failure here as this system's status, not a crash.
    """
    import jax.extend
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir
    with mlir.make_ir_context():
        module = ir.Module.parse(data.decode() if data[:4] != b"ML\xefR" else data)
        code = mlir.module_to_bytecode(module)
    backend = jax.extend.backend.get_backend(device.platform)
    exe = backend.compile_and_load(code, xc.DeviceList((device,)), xc.CompileOptions())
    return lambda flat: [a[0] for a in exe.execute_sharded(list(flat)).disassemble_into_single_device_arrays()]

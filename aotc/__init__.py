"""aotc: a graph-level ahead-of-time compiler for neural networks.

    import aotc
    aotc.compile("model.onnx", "model.engine")          # no GPU needed
    engine = aotc.Engine("model.engine")
    ctx = engine.create_context(device="cpu")           # or "cuda"
    outputs = ctx.run({"input": array})

Attributes load lazily so that serving code importing `aotc.Engine` never
imports onnx, jax or NVRTC.
"""
__version__ = "0.1.0"

__all__ = ["compile", "Engine", "check_engine", "__version__"]


def __getattr__(name):
    if name == "compile":
        from aotc.compiler import compile
        return compile
    if name == "Engine":
        from aotc.package.runtime_binding import Engine
        return Engine
    if name == "check_engine":
        from aotc.package.runtime_binding import check_engine
        return check_engine
    raise AttributeError(f"module 'aotc' has no attribute {name!r}")

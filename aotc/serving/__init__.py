"""Serving aotc engines with Triton Inference Server: the C backend (backend/), its build,
the model repository writer, and the tritonserver finder that `aotc serve` uses."""

"""Suite-wide options: slow tests run with --run-slow (CI does); GPU tests need a driver."""
import os

import pytest

from tests.onnx_backend.coverage_summary import pytest_terminal_summary  # noqa: F401  (node-suite coverage)


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run tests marked slow (real models, the full ONNX node suite)")


def _gpu_present() -> bool:
    try:
        from cuda.bindings import driver
        (err,) = driver.cuInit(0)
        return int(err) == 0
    except Exception:  # noqa: BLE001 - no libcuda.so.1 raises RuntimeError
        return False


def pytest_collection_modifyitems(config, items):
    run_slow = config.getoption("--run-slow") or os.environ.get("AOTC_RUN_SLOW") == "1"
    skip_slow = pytest.mark.skip(reason="slow: run with --run-slow")
    gpu = None
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)
        if "gpu" in item.keywords:
            gpu = _gpu_present() if gpu is None else gpu
            if not gpu:
                item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU and driver"))

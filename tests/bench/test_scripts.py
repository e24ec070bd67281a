"""The bench scripts are modules of the `bench` package: `python -m bench.<name>` from the repository root.

No script edits sys.path; each imports aotc as installed and the model
builders from aotc.bench.models, and importing one runs nothing.
"""
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if p.stem != "__init__")


def test_the_scripts_are_found():
    assert {"suite", "fusion_report", "runtime_overhead", "gpu_check", "gpu_kernels"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_imports_as_a_module_without_path_edits(name, capsys):
    source = (ROOT / "bench" / f"{name}.py").read_text()
    assert "sys.path" not in source and "parents[1]" not in source
    mod = importlib.import_module(f"bench.{name}")
    assert mod.__name__ == f"bench.{name}" and callable(getattr(mod, "main", None))
    assert capsys.readouterr().out == ""      # importing runs nothing


def test_python_dash_m_runs_from_the_repository_root():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, "-m", "bench.suite", "--help"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage:") and "--models" in res.stdout

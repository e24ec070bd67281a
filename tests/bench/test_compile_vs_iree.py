"""bench.compile_vs_iree with stand-in IREE tools (shell scripts): the commands, the timing, the failures."""
import stat

import pytest

from bench import compile_vs_iree as cvi
from aotc.bench.models.small import mlp


def _fake_venv(tmp_path, compile_body='touch "$5"'):
    """A venv whose iree-import-onnx writes its -o file and whose iree-compile runs `compile_body`."""
    bin_ = tmp_path / "venv" / "bin"
    bin_.mkdir(parents=True)
    scripts = {"iree-import-onnx": 'echo "$@" > "$3.args"; touch "$3"',
               "iree-compile": f'echo "$@" > "$(dirname "$1")/compile.args"; {compile_body}'}
    for name, body in scripts.items():
        p = bin_ / name
        p.write_text(f"#!/bin/sh\n{body}\n")
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return tmp_path / "venv"


def test_a_missing_venv_names_what_to_install(tmp_path, monkeypatch, capsys):
    with pytest.raises(cvi.IreeMissing, match="iree-base-compiler==3.13"):
        cvi.iree_tools(tmp_path)
    assert cvi._cli(["--iree", str(tmp_path)]) == 2
    assert "iree-import-onnx" in capsys.readouterr().err
    monkeypatch.delenv("IREE_VENV", raising=False)
    assert cvi._cli([]) == 2
    assert capsys.readouterr().err.strip() == "error: no IREE venv: pass --iree PATH or set IREE_VENV"


def test_iree_runs_import_then_a_cuda_sm80_compile(tmp_path):
    tools = cvi.iree_tools(_fake_venv(tmp_path))
    (imp, comp) = cvi.iree_commands(tools, tmp_path / "m.onnx", tmp_path)
    assert imp[1:] == [str(tmp_path / "m.onnx"), "-o", str(tmp_path / "model.mlir")]
    assert comp[1] == str(tmp_path / "model.mlir")
    assert "--iree-hal-target-backends=cuda" in comp and "--iree-cuda-target=sm_80" in comp
    assert comp[-2:] == ["-o", str(tmp_path / "model.vmfb")]


@pytest.mark.slow        # three real aotc compiles (NVRTC, one host build): ~15 s
def test_compare_times_both_compilers_on_one_file(tmp_path):
    model, _ = mlp()
    path = tmp_path / "mlp.onnx"
    path.write_bytes(model.SerializeToString())
    tools = cvi.iree_tools(_fake_venv(tmp_path))
    r = cvi.compare(path, tools, tmp_path)
    assert r["errors"] == {}
    assert r["aotc"] > 0 and r["aotc sm_80"] > 0 and r["iree"] == pytest.approx(r["iree import"] + r["iree compile"])
    assert r["aotc cpu"] > 0 and r["aotc +host cpu"] > 0
    args = (tmp_path / "compile.args").read_text().split()
    assert "--iree-cuda-target=sm_80" in args
    row = cvi.format_row("mlp", r)
    assert row.split()[0] == "mlp" and len(row.split()) == 11


def test_the_aotc_configurations():
    """Default targets with the host library left to the first cpu run; +host embeds it; sm_80 as IREE."""
    base = cvi.aotc_command("m.onnx", "m.engine")
    assert base[-5:] == ["compile", "m.onnx", "-o", "m.engine", "-q"]
    assert cvi.aotc_command("m.onnx", "m.engine", "aotc +host")[-1] == "--host"
    assert cvi.aotc_command("m.onnx", "m.engine", "aotc sm_80")[-2:] == ["--arch", "sm_80"]


def test_rounds_give_medians(tmp_path, monkeypatch):
    walls = iter([5.0, 9.0, 1.0, 2.0, 30.0,     # round 1: aotc, +host, sm_80, iree import, iree compile
                  7.0, 8.0, 3.0, 2.0, 10.0,
                  6.0, 20.0, 2.0, 4.0, 11.0])
    monkeypatch.setattr(cvi, "timed", lambda cmd, env=None: (next(walls), 1.5, ""))
    r = cvi.compare(tmp_path / "m.onnx", cvi.iree_tools(_fake_venv(tmp_path)), tmp_path, repeat=3)
    assert (r["aotc"], r["aotc +host"], r["aotc sm_80"], r["iree import"], r["iree compile"]) == (6.0, 9.0, 2.0, 2.0, 11.0)
    assert r["iree"] == 15.0 and r["iree cpu"] == 3.0      # the median of the rounds' sums (32, 12, 15) and r["rounds"] == 3 and r["errors"] == {}


def test_repeat_must_be_a_count(capsys):
    assert cvi._cli(["--iree", "/nowhere", "--repeat", "0"]) == 2
    assert "--repeat needs a positive count" in capsys.readouterr().err


def test_a_failing_iree_compile_is_reported_not_timed(tmp_path):
    model, _ = mlp()
    path = tmp_path / "mlp.onnx"
    path.write_bytes(model.SerializeToString())
    tools = cvi.iree_tools(_fake_venv(tmp_path, compile_body="echo 'error: no CUDA backend' >&2; exit 1"))
    r, errors = cvi.iree_times(path, tools, tmp_path)
    assert errors == {"iree": "error: no CUDA backend"}
    assert r["iree"] != r["iree"] and r["iree import"] > 0        # NaN: no total for a failed compile
    row = cvi.format_row("mlp", {"aotc": 1.0, "aotc +host": 2.0, "aotc sm_80": 0.5, "aotc cpu": 1.0, **r,
                                 "errors": errors})
    assert "iree failed: error: no CUDA backend" in row


def test_aotc_is_byte_compiled_as_an_install_leaves_it(monkeypatch):
    import compileall
    seen = []
    monkeypatch.setattr(compileall, "compile_dir", lambda d, quiet=0: seen.append(d) or True)
    cvi.byte_compile_aotc()
    assert any(d.endswith("aotc") for d in seen) and any(d.endswith("cli") for d in seen)


def test_default_only_runs_one_aotc_configuration(tmp_path, monkeypatch):
    seen = []

    def fake(cmd, env=None):
        seen.append(cmd)
        return 4.0, 2.0, ""
    monkeypatch.setattr(cvi, "timed", fake)
    r = cvi.compare(tmp_path / "m.onnx", cvi.iree_tools(_fake_venv(tmp_path)), tmp_path, configs=("aotc",))
    aotc_runs = [c for c in seen if "compile" in c and "-q" in c]
    assert len(aotc_runs) == 1 and "--host" not in aotc_runs[0] and "--arch" not in aotc_runs[0]
    assert "aotc +host" not in r and r["aotc"] == 4.0 and r["iree"] == 8.0
    row = cvi.format_row("m", r)
    assert row.split()[:4] == ["m", "4.0", "-", "-"] and row.split()[7] == "2.00"

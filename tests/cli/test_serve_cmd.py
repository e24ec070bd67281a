"""`aotc serve`: --write-repo, one-line errors, and the foreground server (a stand-in tritonserver
script that records its command line and exits on SIGTERM)."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from aotc.cli.main import main
from tests.serving.conftest import serving_engines  # noqa: F401  (the engines fixture)

FAKE_SERVER = """#!/bin/sh
echo "$@" > "$0.args"
ls "$(echo "$@" | tr ' ' '\\n' | sed -n 's/^--model-repository=//p' | head -1)" > "$0.listing"
mv "$0.listing" "$0.models"      # whole, or not there yet: the test waits for this file
trap 'echo stopped >> "$0.args"; exit 0' TERM
trap 'echo interrupted >> "$0.args"' INT
while true; do sleep 0.05; done
"""


def test_write_repo_writes_the_repository_and_exits(serving_engines, tmp_path):
    repo = tmp_path / "repo"
    result = CliRunner().invoke(main, ["serve", "--write-repo", str(repo), serving_engines["mlp"][0],
                                       serving_engines["seq"][0], "--instances", "2"])
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(repo)) == ["mlp", "seq"]
    assert "count: 2" in (repo / "seq" / "config.pbtxt").read_text()
    assert (repo / "mlp" / "1" / "model.engine").is_file() and (repo / "mlp" / "libtriton_aotc.so").is_file()
    assert f"{repo / 'mlp'}: config.pbtxt, 1/model.engine, libtriton_aotc.so" in result.output


def test_errors_are_one_line(serving_engines, tmp_path, monkeypatch):
    for var in ("AOTC_TRITONSERVER", "AOTC_PYTRITON_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    cases = [(["serve", serving_engines["mlp"][0]], "aotc: error: no tritonserver found: pass --tritonserver PATH"),
             (["serve", "--write-repo", str(tmp_path / "r"), str(tmp_path / "missing.engine")],
              "aotc: error: no engine file at"),
             (["serve", str(tmp_path)], "is a folder but not a Triton model repository"),
             (["serve", serving_engines["mlp"][0], "--tritonserver", str(tmp_path / "nope")],
              "which is not an executable file")]
    for args, message in cases:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1, result.output
        assert message in result.output and "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_serve_runs_tritonserver_in_the_foreground_until_stopped(serving_engines, tmp_path, how):
    """SIGTERM to aotc serve, or Ctrl-C (SIGINT to the terminal's process group): the server gets
    exactly one SIGTERM (a second signal makes Triton give up its graceful shutdown)."""
    fake = tmp_path / "tritonserver"
    fake.write_text(FAKE_SERVER)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    proc = subprocess.Popen([sys.executable, "-c", "from aotc.cli.main import main; main()", "serve",
                             serving_engines["mlp"][0], "--tritonserver", str(fake), "--http-port", "9100",
                             "--grpc-port", "9101", "--metrics-port", "9102"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    args_file = tmp_path / "tritonserver.args"
    deadline = time.monotonic() + 60
    while not (tmp_path / "tritonserver.models").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.2)
    args = args_file.read_text().split()
    assert {"--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
            "--http-port=9100", "--grpc-port=9101", "--metrics-port=9102"} <= set(args)
    repo = next(a.split("=", 1)[1] for a in args if a.startswith("--model-repository="))
    assert (tmp_path / "tritonserver.models").read_text().split() == ["mlp"]
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert args_file.read_text().splitlines()[1:] == ["stopped"]
    assert not os.path.exists(repo)  # the generated repository is cleaned up


def test_a_repository_is_served_as_it_is_beside_engines(serving_engines, tmp_path):
    repo = tmp_path / "repo"
    assert CliRunner().invoke(main, ["serve", "--write-repo", str(repo), serving_engines["seq"][0]]).exit_code == 0
    fake = tmp_path / "tritonserver"
    fake.write_text("#!/bin/sh\necho \"$@\" > \"$0.args\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    result = CliRunner().invoke(main, ["serve", str(repo), serving_engines["mlp"][0], "--tritonserver", str(fake),
                                       "--host", "0.0.0.0", "--instances", "3"])
    assert result.exit_code == 0, result.output
    args = (tmp_path / "tritonserver.args").read_text().split()
    repos = [a.split("=", 1)[1] for a in args if a.startswith("--model-repository=")]
    assert repos[0] == str(repo) and len(repos) == 2
    assert "--http-address=0.0.0.0" in args

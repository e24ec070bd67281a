"""Finding tritonserver (explicit path, $AOTC_TRITONSERVER, PATH, an nvidia-pytriton folder) and its command line."""
from __future__ import annotations

import os
import stat

import pytest

from aotc.serving import tritonserver as ts


def _exe(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _pytriton(root):
    binary = _exe(root / "pytriton" / "tritonserver" / "bin" / "tritonserver")
    (root / "nvidia_pytriton.libs").mkdir()
    (root / "pytriton" / "tritonserver" / "backends" / "python").mkdir(parents=True)
    return binary


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in ("AOTC_TRITONSERVER", "AOTC_PYTRITON_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    return monkeypatch


def test_search_order(clean_env, tmp_path):
    with pytest.raises(ts.NoTritonServer, match="nvidia-pytriton"):
        ts.find_tritonserver()
    wheel = _pytriton(tmp_path / "site")
    clean_env.setenv("AOTC_PYTRITON_DIR", str(tmp_path / "site"))
    found = ts.find_tritonserver()
    assert found.binary == wheel and found.lib_dirs == [str(tmp_path / "site" / "nvidia_pytriton.libs")]
    assert found.backends_dir.endswith(os.path.join("tritonserver", "backends"))
    on_path = _exe(tmp_path / "bin" / "tritonserver")
    clean_env.setenv("PATH", str(tmp_path / "bin"))
    assert ts.find_tritonserver().binary == on_path and ts.find_tritonserver().lib_dirs == []
    env_one = _exe(tmp_path / "env" / "tritonserver")
    clean_env.setenv("AOTC_TRITONSERVER", env_one)
    assert ts.find_tritonserver().binary == env_one
    explicit = _exe(tmp_path / "explicit" / "tritonserver")
    assert ts.find_tritonserver(explicit).binary == explicit
    # a path into a pytriton wheel brings the wheel's libraries along
    assert ts.find_tritonserver(wheel).lib_dirs == [str(tmp_path / "site" / "nvidia_pytriton.libs")]


def test_a_named_binary_that_is_not_executable_is_refused(clean_env, tmp_path):
    with pytest.raises(ts.NoTritonServer, match="--tritonserver names '.*nope', which is not an executable file"):
        ts.find_tritonserver(str(tmp_path / "nope"))
    clean_env.setenv("AOTC_TRITONSERVER", str(tmp_path))
    with pytest.raises(ts.NoTritonServer, match=r"\$AOTC_TRITONSERVER names"):
        ts.find_tritonserver()


def test_command_line_binds_every_endpoint_to_the_host(tmp_path):
    server = ts.TritonServer("/x/tritonserver", ["/libs"])
    cmd = ts.server_command(server, ["/r1", "/r2"], "/b", "127.0.0.1", 1, 2, 3)
    assert cmd[0] == "/x/tritonserver"
    for flag in ("--model-repository=/r1", "--model-repository=/r2", "--backend-directory=/b",
                 "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
                 "--http-port=1", "--grpc-port=2", "--metrics-port=3"):
        assert flag in cmd
    assert server.env({"LD_LIBRARY_PATH": "/old"})["LD_LIBRARY_PATH"] == os.pathsep.join(["/libs", "/old"])


def test_backend_directory_holds_aotc_and_the_servers_own_backends(tmp_path):
    (tmp_path / "own" / "python").mkdir(parents=True)
    server = ts.TritonServer("/x", [], str(tmp_path / "own"))
    d = ts.backend_dir_for(server, str(tmp_path / "backends"))
    assert os.path.isfile(os.path.join(d, "aotc", "libtriton_aotc.so"))
    assert os.path.realpath(os.path.join(d, "python")) == str(tmp_path / "own" / "python")

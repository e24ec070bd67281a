"""Starts `aotc serve` on free loopback ports for the tests, waits until Triton is ready, stops it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from aotc.serving.tritonserver import NoTritonServer, find_tritonserver, free_ports


def require_tritonserver():
    """Skips the test when no tritonserver is installed here; fails instead under
    AOTC_REQUIRE_TRITON=1 (CI installs one: .ci/run)."""
    try:
        return find_tritonserver()
    except NoTritonServer as e:
        if os.environ.get("AOTC_REQUIRE_TRITON") == "1":
            pytest.fail(f"AOTC_REQUIRE_TRITON=1 but {e}")
        pytest.skip(f"no real tritonserver here ({e})")


class Server:
    """`aotc serve TARGETS` in a subprocess, its output in a log file."""

    def __init__(self, targets: list[str], log_path: str, extra: list[str] = ()):
        self.http, self.grpc, self.metrics = free_ports(3)
        self.log_path = log_path
        self.log = open(log_path, "w")
        cmd = [sys.executable, "-m", "aotc.cli.main", "serve", *targets, "--http-port", str(self.http),
               "--grpc-port", str(self.grpc), "--metrics-port", str(self.metrics), *extra]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.url_http = f"127.0.0.1:{self.http}"
        self.url_grpc = f"127.0.0.1:{self.grpc}"

    def text(self) -> str:
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def wait_ready(self, timeout: float = 120.0) -> None:
        import tritonclient.http as th
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"aotc serve exited with {self.proc.returncode}:\n{self.text()[-4000:]}")
            client = th.InferenceServerClient(self.url_http)
            try:
                if client.is_server_ready():
                    return
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            finally:
                client.close()  # an open connection would hold up a graceful shutdown
            time.sleep(0.2)
        raise AssertionError(f"tritonserver not ready after {timeout:.0f} s:\n{self.text()[-4000:]}")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, as a process manager would; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode



"""`aotc serve ENGINE_OR_REPO...`: serve engines with Triton Inference Server in one line.

Engines become a Triton model repository (aotc.serving.model_repo: the model
name is the engine file's stem); a folder that already is a repository is
served as it is. tritonserver runs in the foreground with the aotc backend,
bound to loopback unless --host says otherwise; SIGTERM or Ctrl-C stops it
cleanly (Triton unloads the models and exits). `--write-repo DIR` only writes
the repository, for a Triton container or a KServe InferenceService.
"""
from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import click


def handle_errors(fn):
    """cli.main's one-line-error wrapper, looked up at call time (cli.main imports this module)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from .main import handle_errors as wrap
        return wrap(fn)(*args, **kwargs)
    return wrapper


@click.command("serve")
@click.argument("targets", nargs=-1, required=True, metavar="ENGINE_OR_REPO...")
@click.option("--http-port", type=int, default=8000, show_default=True)
@click.option("--grpc-port", type=int, default=8001, show_default=True)
@click.option("--metrics-port", type=int, default=8002, show_default=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Instances on the cpu device (KIND_CPU) or on the GPUs (KIND_GPU).")
@click.option("--instances", type=click.IntRange(min=1), default=1, show_default=True,
              help="Execution contexts per model (per GPU with --device cuda).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind the endpoints to.")
@click.option("--tritonserver", "tritonserver_path", type=click.Path(dir_okay=False), default=None,
              help="The tritonserver binary (else $AOTC_TRITONSERVER, PATH, an installed nvidia-pytriton).")
@click.option("--write-repo", type=click.Path(file_okay=False), default=None,
              help="Write the model repository to DIR and exit without starting a server.")
@handle_errors
def serve(targets, http_port, grpc_port, metrics_port, device, instances, host, tritonserver_path, write_repo):
    """Serve engines (or Triton model repositories) with Triton Inference Server."""
    from aotc.serving import model_repo
    from aotc.serving.tritonserver import backend_dir_for, find_tritonserver, server_command
    repos = [t for t in targets if os.path.isdir(t)]
    engines = [t for t in targets if not os.path.isdir(t)]
    bad = [r for r in repos if not model_repo.is_repository(r)]
    if bad:
        raise model_repo.ServingError(f"'{bad[0]}' is a folder but not a Triton model repository "
                                      f"(no <model>/{model_repo.CONFIG_FILE} in it)")
    if write_repo:
        if repos:
            raise model_repo.ServingError("--write-repo takes engine files, not repositories")
        names = model_repo.write_repository(write_repo, engines, device, instances)
        for name in names:
            click.echo(f"{os.path.join(write_repo, name)}: {model_repo.CONFIG_FILE}, "
                       f"{model_repo.VERSION}/{model_repo.ENGINE_FILE}, libtriton_aotc.so")
        return
    server = find_tritonserver(tritonserver_path)
    work = tempfile.mkdtemp(prefix="aotc-serve-")
    try:
        if engines:
            generated = os.path.join(work, "models")
            model_repo.write_repository(generated, engines, device, instances)
            repos.append(generated)
        cmd = server_command(server, [os.path.abspath(r) for r in repos], backend_dir_for(server, os.path.join(work, "backends")),
                             host, http_port, grpc_port, metrics_port)
        click.echo(f"aotc serve: tritonserver on {host}: http {http_port}, grpc {grpc_port}, metrics {metrics_port}",
                   err=True)
        code = _run_foreground(cmd, server.env())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if code:
        click.echo(f"aotc: error: tritonserver exited with status {code} (its log is above)", err=True)
        sys.exit(1)


def _own_group_dying_with_parent():
    """In the child: a process group of its own, so a terminal's Ctrl-C reaches it once (forwarded by
    us; Triton gives up waiting on a second signal), and SIGTERM when aotc serve dies (Linux)."""
    os.setpgid(0, 0)
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run_foreground(cmd: list[str], env: dict) -> int:
    """Runs the server; SIGTERM, SIGINT and SIGHUP are passed on to it as SIGTERM. Returns its exit code
    (0 when it stopped because it was told to)."""
    proc = subprocess.Popen(cmd, env=env, preexec_fn=_own_group_dying_with_parent)
    stopping = []

    def forward(signum, frame):
        stopping.append(signum)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        code = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return 0 if stopping and code in (0, -signal.SIGTERM) else code

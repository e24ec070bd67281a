"""Fuzzing the engine loader: libFuzzer + ASan/UBSan over a seed corpus of real
engines, and a sanitizer replay of the corpus and of every past finding.

`fuzz_engine_load.c` is the target. The replay (gcc or clang, ASan + UBSan)
runs in the quick suite; the libFuzzer run needs clang with its fuzzer
runtime (`apt-get install -y clang`, which .ci/run does) and lasts 60 s with
--run-slow (5 s otherwise). Without clang it is skipped, unless
AOTC_REQUIRE_FUZZ=1 (CI) makes that a failure.

A crash found by the fuzzer fails the test and is copied into
tests/fuzz/regressions/: commit it there and it is replayed forever.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

from aotc.package import runtime_binding as rb
from aotc.package.engine_format import engine_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIME = os.path.join(os.path.dirname(rb.__file__), "runtime")
SOURCES = [os.path.join(RUNTIME, f) for f in rb._SOURCES]
TARGET = os.path.join(HERE, "fuzz_engine_load.c")
REGRESSIONS = os.path.join(HERE, "regressions")


def _tiny_engines() -> dict[str, bytes]:
    from tests.package.conftest import make_plan
    full = make_plan(b"\x7fELF" + b"\2\1" + b"\0" * 12 + b"\x3e\0" + b"\0" * 100)
    from tests.package.dynamic_plans import make_dynamic_plan
    return {"tiny_all_sections.engine": engine_bytes(full), "tiny_minimal.engine": engine_bytes(make_plan()),
            "tiny_dynamic.engine": engine_bytes(make_dynamic_plan(full.host_lib))}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Seeds: the test plan, the e2e models (host build only), and one with cubins + PTX."""
    import aotc.compiler
    from aotc.bench.models.small import MODELS
    d = tmp_path_factory.mktemp("corpus")
    for name, data in _tiny_engines().items():
        (d / name).write_bytes(data)
    for name, build in MODELS.items():
        model, _ = build()
        aotc.compiler.compile(model, d / f"{name}.engine", arch="none")
    model, _ = MODELS["mlp"]()
    try:
        aotc.compiler.compile(model, d / "mlp_cubins.engine", host=False)   # sm_80, sm_90, PTX
    except Exception as e:  # noqa: BLE001 - NVRTC may be absent; the other seeds remain
        print(f"no cubin seed: {e}")
    return d


def _build(out, compiler: str, flags: list[str]) -> str:
    proc = subprocess.run([compiler, "-std=c99", "-g", "-O1", *flags, "-I", RUNTIME, *SOURCES, TARGET,
                           "-o", str(out), "-ldl", "-lpthread"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return str(out)


def _sanitizer_env() -> dict:
    return dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
                UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")


def test_replay_corpus_and_regressions_under_sanitizers(corpus, tmp_path):
    cc = shutil.which("clang") or shutil.which("cc") or shutil.which("gcc")
    exe = _build(tmp_path / "replay", cc, ["-DAOTC_FUZZ_MAIN", "-fsanitize=address,undefined",
                                           "-fno-sanitize-recover=undefined"])
    files = sorted(glob.glob(str(corpus / "*"))) + sorted(glob.glob(os.path.join(REGRESSIONS, "*")))
    # truncations of a real engine at every section boundary, and nonzero padding and
    # trailing bytes (which the target's oracle traps on if the loader accepts them)
    from tests.fuzz.boundaries import section_boundaries, slack_corruptions
    data = (corpus / "mlp.engine").read_bytes()
    for n in section_boundaries(data):
        path = tmp_path / f"cut_{n}"
        path.write_bytes(data[:n])
        files.append(str(path))
    for name, bad in slack_corruptions(data).items():
        path = tmp_path / name
        path.write_bytes(bad)
        files.append(str(path))
    proc = subprocess.run([exe, *files], capture_output=True, text=True, timeout=600, env=_sanitizer_env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.count("ok ") == len(files)


def test_libfuzzer_finds_nothing(corpus, tmp_path, request):
    clang = shutil.which("clang")
    if clang is None:
        if os.environ.get("AOTC_REQUIRE_FUZZ") == "1":
            pytest.fail("AOTC_REQUIRE_FUZZ=1 but clang is not installed (apt-get install -y clang)")
        pytest.skip("clang (with libFuzzer) is not installed")
    exe = _build(tmp_path / "fuzz", clang, ["-fsanitize=fuzzer,address,undefined",
                                            "-fno-sanitize-recover=undefined"])
    seconds = 60 if request.config.getoption("--run-slow") else 5
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([exe, f"-max_total_time={seconds}", "-timeout=10", "-rss_limit_mb=16384", "-malloc_limit_mb=1024",
                           f"-artifact_prefix={tmp_path}/", "-print_final_stats=1", str(work), str(corpus)],
                          capture_output=True, text=True, timeout=seconds + 300, env=_sanitizer_env())
    found = sorted(glob.glob(str(tmp_path / "crash-*")) + glob.glob(str(tmp_path / "leak-*")) +
                   glob.glob(str(tmp_path / "timeout-*")) + glob.glob(str(tmp_path / "oom-*")))
    for f in found:
        shutil.copy(f, os.path.join(REGRESSIONS, os.path.basename(f)))
    assert proc.returncode == 0 and not found, (
        f"libFuzzer found {len(found)} input(s), copied to tests/fuzz/regressions/ "
        f"({', '.join(map(os.path.basename, found))}):\n{proc.stderr[-4000:]}")
    runs = [line for line in proc.stderr.splitlines() if line.startswith("stat::number_of_executed_units")]
    assert runs and int(runs[0].split(":")[-1]) > 100, proc.stderr[-2000:]

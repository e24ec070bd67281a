"""Timing and accuracy measurement shared by every system `aotc bench` runs.

Why a module of its own: the numbers must mean the same thing for aotc and
for each competitor. Every system is timed by the same loop: `warmup`
untimed runs, then up to `iterations` timed runs (stopping early after
`max_seconds`, at least `min(iterations, 5)` runs), each followed by the
system's own synchronisation (a no-op on the host; a stream synchronise on
cuda), cycling through several distinct input sets so no system is timed on
the one input its caches have already seen. p50 and p99 are order
statistics of those samples (p99 of fewer than 100 runs is their maximum,
and the run count is reported beside it).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from aotc.ir import dtypes


@dataclass
class Timing:
    """Latency samples of one system, in seconds."""
    samples: list[float]

    @property
    def runs(self) -> int:
        return len(self.samples)

    @property
    def p50(self) -> float:
        return float(np.median(self.samples))

    @property
    def p99(self) -> float:
        return float(np.percentile(self.samples, 99, method="higher"))

    @property
    def mean(self) -> float:
        return float(np.mean(self.samples))


def time_runs(run, input_sets: list, iterations: int, warmup: int, sync=None,
              max_seconds: float | None = None, stage=None) -> Timing:
    """Time `run(inputs)` (then `sync()`) over `input_sets`, in rotation.

    `stage(inputs)`, if given, runs untimed before each run: a system that
    serves from fixed device buffers (CUDA-graph replay needs unchanged
    pointers) copies the next input set into them there.
    """
    if not input_sets:
        raise ValueError("time_runs needs at least one input set")
    sync = sync or (lambda: None)
    stage = stage or (lambda feeds: None)
    for i in range(warmup):
        stage(input_sets[i % len(input_sets)])
        run(input_sets[i % len(input_sets)])
    sync()
    samples: list[float] = []
    floor = min(iterations, 5)
    start = time.perf_counter()
    for i in range(max(1, iterations)):
        feeds = input_sets[i % len(input_sets)]
        stage(feeds)
        t0 = time.perf_counter()
        run(feeds)
        sync()
        samples.append(time.perf_counter() - t0)
        if max_seconds is not None and len(samples) >= floor and time.perf_counter() - start > max_seconds:
            break
    return Timing(samples)


def median_us(fn, n: int) -> float:
    """Median wall time of n calls of fn, in microseconds: for host-side costs of a few microseconds."""
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return float(np.median(samples)) / 1e3


def max_errors(outputs: list[np.ndarray], reference: list[np.ndarray]) -> tuple[float, float]:
    """(max abs error, max relative error) over all outputs.

    The relative error is |got - want| / max(|want|) per output (normalised
    by the output's largest magnitude, so entries near zero do not blow it
    up), maximised over outputs. Non-finite values, in either, count as
    infinite error: every accuracy check (the GPU scripts too) uses this rule.
    """
    if len(outputs) != len(reference):
        raise ValueError(f"{len(outputs)} outputs against {len(reference)} reference outputs")
    abs_err = rel_err = 0.0
    for got, want in zip(outputs, reference):
        got = np.asarray(got)
        want = np.asarray(want).astype(np.float64)
        if got.shape != want.shape:
            raise ValueError(f"output shape {list(got.shape)} differs from the reference {list(want.shape)}")
        if got.size == 0:
            continue
        g = got.astype(np.float64)
        if not (np.isfinite(g).all() and np.isfinite(want).all()):
            return float("inf"), float("inf")  # a NaN must never compare as a small error
        a = float(np.max(np.abs(g - want)))
        abs_err = max(abs_err, a)
        rel_err = max(rel_err, a / max(float(np.max(np.abs(want))), 1e-30))
    return abs_err, rel_err


def make_input_sets(specs, count: int, seed: int = 0, base: dict | None = None) -> list[dict]:
    """`count` distinct input dicts for `specs` (objects with .name, .dtype name, .shape).

    Floats are standard normal. Integers are drawn in [0, 8) (valid indices
    for any embedding table or gather), booleans at random. With `base` (a
    known-good input dict, e.g. token ids in a model's range), set 0 is
    `base` itself and later sets perturb it: floats by 1% noise, integers
    permuted, so every set stays in the model's domain.
    """
    rng = np.random.default_rng(seed)
    sets = []
    for k in range(max(1, count)):
        feeds = {}
        for spec in specs:
            dt = dtypes.from_name(spec.dtype)
            shape = tuple(spec.shape)
            if base is not None and spec.name in base:
                b = np.asarray(base[spec.name])
                if k == 0:
                    a = b
                elif dt.is_float:
                    a = (b + 0.01 * np.abs(b).mean() * rng.standard_normal(b.shape)).astype(b.dtype)
                else:
                    a = rng.permutation(b.reshape(-1)).reshape(b.shape)
            elif dt.is_float:
                a = rng.standard_normal(shape).astype(dt.np)
            elif dt.name == "bool":
                a = rng.random(shape) < 0.5
            else:
                a = rng.integers(0, 8, shape).astype(dt.np)
            feeds[spec.name] = np.ascontiguousarray(a)
        sets.append(feeds)
    return sets

"""The compile driver: model -> Graph -> passes -> regions -> kernels -> engine.

`compile_model` is what `aotc compile` and `aotc.compile` call. Each stage is
timed; the summary is what the CLI prints. Building an engine never needs a
GPU: device code is compiled by NVRTC for named architectures, and the host
build of the same source for the `cpu` device is embedded (`host=True`, this
API's default) or left to the engine's first cpu run (`host=False`, the CLI's
default; aotc/package/host_on_demand.py), where the manifest's kernel source
builds it. The summary's "host_library" says which.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from aotc import __version__
from aotc.errors import AotcError
from aotc.ir.dims import dim_ranges, upper
from aotc.ir.graph import Graph
from aotc.package import plan as P
from aotc.package.host_on_demand import host_library_status

DEFAULT_ARCHS = ("sm_80", "sm_90")
DEFAULT_PTX = "compute_90"


@dataclass
class CompileResult:
    plan: P.EnginePlan
    graph_imported: Graph
    graph_optimized: Graph
    stage_seconds: dict[str, float] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)    # see compile_model: total, during nvrtc
    arena_lower_bound: int = 0
    regions: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    pass_report: object = None

    def summary(self) -> dict:
        p = self.plan
        return {
            "nodes_imported": len(self.graph_imported.nodes),
            "nodes_optimized": len(self.graph_optimized.nodes),
            "regions": len(self.regions),
            "kernels_launched": len(p.launches),
            "kernels_distinct": len(p.kernels),
            "arena_bytes": p.arena_size,
            "arena_lower_bound": self.arena_lower_bound,
            "weights_bytes": len(p.weights),
            "archs": sorted(p.cubins),
            "ptx": p.ptx_arch or None,
            "host_build": bool(p.host_lib),
            "host_library": host_library_status(p),      # embedded, or built on the first cpu run
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()},
            "cpu_seconds": {k: round(v, 3) for k, v in self.cpu_seconds.items()},
            "pass_seconds": _pass_seconds(self.pass_report),
        }


def _pass_seconds(report) -> dict[str, float]:
    """Seconds per graph pass name, summed over fixed-point rounds (empty without a report)."""
    out: dict[str, float] = {}
    for r in getattr(report, "passes", []):
        out[r.name] = out.get(r.name, 0.0) + r.seconds
    return {k: round(v, 4) for k, v in out.items()}


def load_graph(model, input_shapes=None, dynamic=None) -> Graph:
    """Import a model given as a path, bytes, an onnx.ModelProto, or a Graph.

    `dynamic` maps dynamic dim names to ranges, (min, max) or (min, max, divisor): the
    engine serves every shape in them. A dynamic dim left without a range is an error
    listing every such dim.
    """
    graph = _load(model, input_shapes, dynamic or {})
    return graph if not isinstance(model, Graph) else with_dim_ranges(graph, dynamic or {})


def with_dim_ranges(graph: Graph, dynamic: dict) -> Graph:
    """`graph` with the ranges of its inputs' dynamic dims (a Graph built directly; importers do their own)."""
    from aotc.importers.dynamic import resolve_ranges
    from aotc.ir import dims as D
    if graph.dims and not dynamic:
        return graph
    dims = {v.name: [next(iter(D.symbols(d))) if not D.is_static(d) else d for d in v.shape]
            for v in graph.inputs}
    graph.dims = resolve_ranges(dims, {**graph.dims, **dynamic})
    return graph


def _load(model, input_shapes, dynamic) -> Graph:
    if isinstance(model, Graph):
        return model
    if isinstance(model, (str, os.PathLike)):
        suffix = Path(model).suffix.lower()
        if not Path(model).exists():
            raise AotcError(f"model file not found: {model}")
        if suffix in STABLEHLO_SUFFIXES or (suffix != ".onnx" and _is_stablehlo(Path(model).read_bytes())):
            return _import_stablehlo(model, input_shapes, dynamic)
    elif isinstance(model, (bytes, bytearray, memoryview)) and _is_stablehlo(bytes(model)):
        return _import_stablehlo(bytes(model), input_shapes, dynamic)
    elif _is_jax_exported(model):
        return _import_stablehlo(model, input_shapes, dynamic)
    from aotc.importers.onnx import import_onnx
    return import_onnx(model, input_shapes=input_shapes or None, dynamic=dynamic)


STABLEHLO_SUFFIXES = (".mlir", ".mlirbc", ".jaxexport", ".exported")


def _is_stablehlo(data: bytes) -> bool:
    from aotc.importers.stablehlo.mlir import looks_like_stablehlo
    return looks_like_stablehlo(data)


def _is_jax_exported(model) -> bool:
    return type(model).__name__ == "Exported" and type(model).__module__.startswith("jax")


def _import_stablehlo(model, input_shapes, dynamic=None):
    if input_shapes:
        raise AotcError("input_shapes applies to ONNX models; a StableHLO program's dynamic dims take "
                        "ranges (dynamic=) or are pinned by the exporter")
    from aotc.importers.stablehlo import import_stablehlo
    return import_stablehlo(model, dynamic=dynamic or None)


def _parse_archs(arch) -> tuple[list[str], str]:
    if arch is None:
        return list(DEFAULT_ARCHS), DEFAULT_PTX
    names = [a.strip() for a in (arch.split(",") if isinstance(arch, str) else arch) if a.strip()]
    cubins = [a for a in names if a.startswith("sm_")]
    bad = [a for a in names if not (a.startswith("sm_") or a.startswith("compute_") or a == "none")]
    if bad:
        raise AotcError(f"unknown architecture(s) {bad}: use names like sm_80, sm_90, compute_90, or none")
    ptx = [a for a in names if a.startswith("compute_")]
    if ptx:
        return cubins, ptx[-1]
    if "none" in names:
        return cubins, ""
    newest = max((int(a[3:].rstrip("a")) for a in cubins), default=90)
    return cubins, f"compute_{newest}"


def compile_model(model, *, arch=None, host: bool = True, dump_dir=None, disabled=(),
                  input_shapes=None, progress=None, host_lib=None, precision: str = "fp32",
                  keep_fp32=(), layout: str = "nhwc", fast_compile: bool = False,
                  split_k: bool = True, debug_outputs: bool = False, dynamic=None) -> CompileResult:
    """Compile `model` into an EnginePlan (see aotc.package.plan).

    `host_lib`, if given, is a callable `(source, kernel_names) -> bytes` that
    supplies the host build instead of compiling it here: a caller compiling
    many models (the ONNX node suite) builds one shared library for many
    engines and hands it in; the library may hold more kernels than named.

    `precision` ('fp32', 'tf32', 'fp16', 'bf16'), `keep_fp32` (node names kept in f32)
    and `layout` ('nhwc' or 'nchw' for conv stacks) configure the graph passes
    (aotc.hlo_passes.pipeline.default_pipeline). `fast_compile` builds the GPU code
    with NVRTC's --Ofast-compile=max: several times faster, slower kernels; the
    manifest records it. `split_k` lets GEMMs/convs that would fill under half of
    the GPU split their K loop (aotc.kernels.split_k); the manifest records it.
    `debug_outputs` builds the debug engine of `aotc debug compare`: the same regions and
    kernels, every region's result also written to an extra output, each listed in the
    manifest's "debug_outputs" (aotc.package.debug_outputs). `dynamic` ({dim name: (min, max)})
    makes one engine serve a range of shapes (see load_graph and aotc/ir/dims.py).
    """
    from aotc.fusion.regions import check_partition, partition
    from aotc.hlo_passes.pipeline import run_pipeline
    from aotc.kernels import codegen
    from aotc.package.launch_plan import build_launches
    from aotc.package.memory_plan import check_graph_fits
    from aotc.package.sanitize import manifest_fields as sanitize_fields   # `aotc run --sanitize` rebuilds from these
    from aotc.kernels.kernel_math import manifest_fields as kernel_math_fields    # `aotc inspect`'s math
    from aotc.package.shape_program import ShapeProgram

    say = progress or (lambda msg: None)
    times: dict[str, float] = {}
    cpu: dict[str, float] = {}          # "total": this process's CPU seconds (all threads); "during nvrtc": see finish
    cpu_start = time.process_time()
    cubin_archs, ptx_arch = _parse_archs(arch)

    def stage(name):
        times[name] = time.perf_counter()

    def done(name):
        times[name] = time.perf_counter() - times[name]

    stage("import")
    say("importing")
    imported = load_graph(model, input_shapes, dynamic)
    with dim_ranges(imported.dims):     # comparisons of dynamic dims consult them (aotc/ir/dims.py)
        check_graph_fits(imported)      # before a pass materializes a tensor no GPU could hold
        done("import")

        stage("passes")
        say("optimizing graph")
        optimized, report = run_pipeline(imported, dump_dir=dump_dir, disabled=tuple(disabled), layout=layout,
                                         precision=precision, keep_fp32=tuple(keep_fp32))
        check_graph_fits(optimized)
        done("passes")

        stage("fusion")
        regions = partition(optimized)
        check_partition(optimized, regions)
        debug = None
        if debug_outputs:       # after fusion: the regions (and so the kernels) stay the production ones
            from aotc.package.debug_outputs import add_debug_outputs
            optimized, debug = add_debug_outputs(optimized, regions)
        done("fusion")

        stage("codegen")
        say(f"generating kernels for {len(regions)} regions")
        variants: dict = {}
        regions, kernels, writes = generate_kernels(optimized, regions, split_k, variants)
        built = kernels + [k for vs in variants.values() for _, k in vs]       # every kernel the engine holds
        source = codegen.module_source(built)
        names = list(dict.fromkeys(k.name for k in built))
        done("codegen")

        # NVRTC (and g++) start now and run while the launch plan packs the weights
        with BinaryBuilds(built, source, names, cubin_archs, ptx_arch, host, host_lib, say, fast_compile) as builds:
            stage("plan")
            program = ShapeProgram(optimized.dims)
            launches, weights, memory = build_launches(optimized, regions, kernels, writes, program, variants)
            done("plan")
            cubins, resources, ptx, host_lib = builds.finish(times, cpu)

        stage("package")
        plan = P.EnginePlan(
            inputs=[tensor_spec(v.name, v, program) for v in optimized.inputs],
            outputs=[tensor_spec(n, v, program) for n, v in zip(optimized.signature_output_names(), optimized.outputs)],
            dims=program.specs(), program=program.ops, checks=program.checks,
            arena_size=memory.size, arena_zeroed=memory.zeroed, weights=weights, launches=launches, cubins=cubins,
            ptx=ptx, ptx_arch=ptx_arch, host_lib=host_lib,
            manifest={"aotc_version": __version__, "model": optimized.name,
                      "arena_lower_bound": memory.lower_bound,
                      "nodes_imported": len(imported.nodes), "nodes_optimized": len(optimized.nodes),
                      "source_lines": source.count("\n"), "kernel_resources": resources,
                      "fast_compile": fast_compile, "split_k": split_k, "device_build": builds.device_build,
                      **({"shapes": symbolic_shapes(optimized)} if optimized.dims else {}),
                      **({"debug_outputs": [d.as_dict() for d in debug]} if debug is not None else {}),
                      **sanitize_fields(source, built), **kernel_math_fields(built, cubin_archs)})
        done("package")
        cpu["total"] = time.process_time() - cpu_start + builds.child_cpu
        return CompileResult(plan, imported, optimized, times, cpu, memory.lower_bound, regions, kernels, report)


def symbolic_shapes(graph: Graph) -> dict[str, list[str]]:
    """Each input's and output's dims by name ("batch", "past_sequence + sequence", "768"): the manifest's."""
    named = [(v.name, v) for v in graph.inputs] + list(zip(graph.signature_output_names(), graph.outputs))
    return {n: [repr(d) for d in v.shape] for n, v in named}


def tensor_spec(name: str, v, program) -> P.TensorSpec:
    """An engine input/output: static dims as ints, dynamic ones as shape-program registers."""
    shape = tuple(program.ref(d) for d in v.shape)
    return P.TensorSpec(name, v.dtype.name, shape, None if v.type.is_static else tuple(upper(d) for d in v.shape))


def generate_kernels(graph: Graph, regions: list, split_k: bool = True, variants: dict | None = None):
    """(regions with a copy region per graph output no region writes, one Kernel per region,
    region index -> graph output position): what the package stage's build_launches takes.

    For a dynamic graph, pass a dict as `variants`: it receives region index -> [(bucket index, Kernel)],
    the size-bucket variants of each region (aotc.kernels.variants) beside its generic kernel."""
    from aotc.kernels import codegen
    from aotc.kernels.variants import buckets_for, generate_variants
    from aotc.package.launch_plan import add_output_copies
    regions, writes = add_output_copies(graph, regions)
    producer = graph.producers()
    kernels = [_generate(graph, r, producer, split_k) for r in regions]
    if variants is not None and graph.dims:
        buckets = buckets_for(graph.dims)
        for i, (r, k) in enumerate(zip(regions, kernels)):
            found = generate_variants(lambda: codegen.generate(graph, r, producer, split_k), k, buckets, graph.dims)
            if found:
                variants[i] = found
    return regions, kernels, writes


def _generate(graph: Graph, region, producer, split_k: bool):
    """One region's kernel; a size its generator needs static but the ranges leave open names the region."""
    from aotc.errors import UnsupportedError
    from aotc.ir.dims import DynamicDecisionError
    from aotc.kernels import codegen
    try:
        return codegen.generate(graph, region, producer, split_k)
    except DynamicDecisionError as e:
        raise UnsupportedError(f"the {region.kind} kernel for {region.describe().splitlines()[0]} does not "
                               f"support dynamic dims here: {e}") from None


def _timed(fn, *args, **kw):
    """(fn's result, its seconds, the clock when it ended, the process's CPU clock when it ended)."""
    start = time.perf_counter()
    out = fn(*args, **kw)
    end = time.perf_counter()
    return out, end - start, end, time.process_time()


class BinaryBuilds:
    """Cubins per arch, PTX and the host library of one module, built concurrently from `__enter__` on.

    NVRTC releases the GIL and g++ is a subprocess, so threads overlap them with each
    other and with the caller's own work until `finish` (the launch plan, which copies
    the weights): on 2 cores the targets take the time of the longest pair instead of
    the sum. The PTX comes out of the sm_XY compile of the same number
    (compile_device_with_ptx), one NVRTC run less. Where the kernels' PTX does not depend
    on the arch and ptxas of NVRTC's release is installed, NVVM runs once for all archs
    instead (aotc/kernels/shared_ptx.py): pieces of the module to PTX in parallel, then
    ptxas per cubin arch; ResNet-50's kernels keep the very SASS. Leaving the `with` block
    waits for every build, so an error in the caller's work leaves no compiler running.
    """

    def __init__(self, kernels, source, names, cubin_archs, ptx_arch, host, host_lib, say, fast_compile=False):
        self.kernels, self.source, self.names = kernels, source, names
        self.cubin_archs, self.ptx_arch, self.host, self.host_lib = list(cubin_archs), ptx_arch, host, host_lib
        self.say, self.fast_compile = say, fast_compile
        self.targets = self.cubin_archs + ([ptx_arch] if ptx_arch else [])
        # the PTX for compute_XY comes out of the sm_XY compile when both are asked for
        twin = "sm_" + ptx_arch[len("compute_"):] if ptx_arch.startswith("compute_") else None
        self.twin = twin if twin in self.cubin_archs else None
        self.child_cpu = 0.0        # CPU seconds of compiler child processes (shared_ptx's ptxas runs)
        self.device_build = ""      # how the device code was built, and why (the manifest's "device_build")

    def __enter__(self):
        from concurrent.futures import ThreadPoolExecutor

        # a worker per core (at least 2, at most 8): the shared-PTX build splits the module that many ways
        self.pool = ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2)))
        self.start, self.cpu_start = time.perf_counter(), time.process_time()
        src, fast, twin = self.source, self.fast_compile, self.twin
        if self.targets:
            self.say(f"compiling {len(self.names)} kernels for {', '.join(self.targets)}")
        self.shared = self._shared_ptx_job()
        if self.shared is not None:
            self.both, self.device = None, {}
        else:
            self._per_arch_jobs(src, fast, twin)
        self.host_job = None
        if self.host:
            self.say("building the host (cpu device) library")
            from aotc.kernels.host_compile import compile_host
            self.host_job = self.pool.submit(_timed, self.host_lib or compile_host, src, self.names)
        return self

    def _per_arch_jobs(self, src, fast, twin):
        """One NVRTC compile per arch (the PTX from its twin sm_XY compile)."""
        from aotc.kernels.nvrtc_compile import compile_device, compile_device_with_ptx
        self.both = self.pool.submit(_timed, compile_device_with_ptx, src, twin, fast_compile=fast) if twin else None
        self.device = {t: self.pool.submit(_timed, compile_device, src, t, fast_compile=fast)
                       for t in self.targets if not (twin and t in (twin, self.ptx_arch))}

    def _shared_ptx_job(self):
        """The future of (cubins, ptx, ptxas CPU s) built with one NVVM run (shared_ptx), or None where
        that does not apply: fast compile, no kernels or no cubin arch, an arch-specific target
        (sm_90a), kernels whose PTX depends on the arch, or no ptxas of NVRTC's release."""
        from aotc.kernels import shared_ptx
        plain = all(re.fullmatch(r"sm_\d+", a) for a in self.cubin_archs) and \
            (not self.ptx_arch or re.fullmatch(r"compute_\d+", self.ptx_arch))
        why = ("fast compile" if self.fast_compile else "no cubin arch" if not (self.kernels and self.cubin_archs)
               else "an arch-specific target" if not plain else shared_ptx.arch_dependence(self.kernels))
        if not why and shared_ptx.find_ptxas() is None:
            why = "no ptxas of NVRTC's release (nvidia-cuda-nvcc)"
        self.device_build = f"NVRTC per arch: {why}" if why else "one NVVM run, ptxas per arch"
        if why:
            return None
        ptxas = shared_ptx.find_ptxas()
        from aotc.kernels.codegen import module_source
        from aotc.kernels.nvrtc_compile import compile_device
        numbers = [int(a[3:]) for a in self.cubin_archs] + ([int(self.ptx_arch[8:])] if self.ptx_arch else [])
        base = f"compute_{min(numbers)}"
        pieces = shared_ptx.split_kernels(self.kernels, self.pool._max_workers)
        jobs = [self.pool.submit(compile_device, module_source(p), base) for p in pieces]

        def assemble_all():
            from concurrent.futures import ThreadPoolExecutor
            try:
                ptx = shared_ptx.merge_ptx([j.result().decode() for j in jobs])
            except shared_ptx.MergeConflict:            # pieces that do not merge: the whole module per arch
                with ThreadPoolExecutor(max_workers=len(self.targets)) as runs:
                    built = dict(zip(self.targets, runs.map(lambda t: compile_device(self.source, t), self.targets)))
                self.device_build = "NVRTC per arch: the pieces' PTX did not merge"
                return {a: built[a] for a in self.cubin_archs}, built.get(self.ptx_arch, b""), 0.0
            with ThreadPoolExecutor(max_workers=len(self.cubin_archs)) as runs:   # ptxas: child processes
                done = dict(zip(self.cubin_archs, runs.map(
                    lambda a: shared_ptx.assemble(shared_ptx.retarget(ptx, a), a, ptxas), self.cubin_archs)))
            out_ptx = shared_ptx.retarget(ptx, "sm_" + self.ptx_arch[8:]).encode() if self.ptx_arch else b""
            return {a: c for a, (c, _) in done.items()}, out_ptx, sum(s for _, s in done.values())
        return self.pool.submit(_timed, assemble_all)

    def finish(self, times: dict, cpu: dict | None = None):
        """(cubins, resources, ptx, host library); times['nvrtc'] is the wall time from the start until
        the last device target was done, times['host'] the host build's own time; cpu['during nvrtc']
        the process's CPU seconds over that same span: NVRTC's (with options such as --split-compile
        it runs threads of its own, so no one thread's clock would hold a job's CPU) and the caller's
        work beside it (the launch plan), not g++'s (a child process)."""
        from aotc.kernels.resources import check_kernels
        cubins, resources = {}, {}     # resources: arch -> kernel -> registers, static_smem, local_bytes
        if self.shared is not None:
            return self._finish_shared(times, cpu)
        for a in self.cubin_archs:
            cubins[a] = self.both.result()[0][0] if a == self.twin else self.device[a].result()[0]
            # Reject here what could not launch there (registers, shared memory, geometry).
            usage = check_kernels(self.kernels, a, cubins[a])
            resources[a] = {n: usage[n].as_dict() for n in self.names}
        ptx = b""
        if self.ptx_arch:
            ptx = self.both.result()[0][1] if self.twin else self.device[self.ptx_arch].result()[0]
            check_kernels(self.kernels, self.ptx_arch)
        jobs = list(self.device.values()) + ([self.both] if self.both else [])
        if jobs:
            times["nvrtc"] = max(j.result()[2] for j in jobs) - self.start
        if cpu is not None and jobs:
            cpu["during nvrtc"] = max(j.result()[3] for j in jobs) - self.cpu_start
        lib = b""
        if self.host_job is not None:
            lib, times["host"] = self.host_job.result()[:2]
        return cubins, resources, ptx, lib

    def _finish_shared(self, times: dict, cpu: dict | None):
        """finish() for the shared-PTX build; ptxas's CPU (child processes) counts in cpu['during nvrtc']
        and, through child_cpu, in the compile's total, as NVRTC's own ptxas pass did in-process."""
        from aotc.kernels.resources import check_kernels
        (cubins, ptx, ptxas_cpu), _, end, cpu_end = self.shared.result()
        resources = {}
        for a in self.cubin_archs:
            usage = check_kernels(self.kernels, a, cubins[a])
            resources[a] = {n: usage[n].as_dict() for n in self.names}
        if self.ptx_arch:
            check_kernels(self.kernels, self.ptx_arch)
        times["nvrtc"] = end - self.start
        if cpu is not None:
            cpu["during nvrtc"] = cpu_end - self.cpu_start + ptxas_cpu
        self.child_cpu = ptxas_cpu
        lib = b""
        if self.host_job is not None:
            lib, times["host"] = self.host_job.result()[:2]
        return cubins, resources, ptx, lib

    def __exit__(self, *exc):
        self.pool.shutdown(wait=True)
        return False


def compile(model, output=None, *, arch=None, host: bool = True, **kw):
    """Public API: compile `model`; write the engine to `output` if given. Returns the CompileResult."""
    try:
        result = compile_model(model, arch=arch, host=host, **kw)
    except MemoryError as e:   # a constant built at import or folded by a pass, beyond this machine's memory
        raise AotcError(f"out of host memory while compiling: {e or 'allocation failed'}") from None
    if output is not None:
        from aotc.package.engine_format import write_engine
        write_engine(result.plan, output)
    return result

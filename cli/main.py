"""The `aotc` command: compile, run, inspect, demo.

Habits from trtexec and iree-compile: one-screen summaries, progress on long
stages (stderr), one-line errors with a non-zero exit, `--json` where tools
read the output, `--debug` for a traceback. Heavy imports (onnx, NVRTC)
happen inside the commands so `aotc --help` starts fast.
"""
from __future__ import annotations

import functools
import json
import sys
import time

import click

from aotc import __version__


def _fail(message: str, code: int = 1):
    click.echo(f"aotc: error: {message}", err=True)
    sys.exit(code)


def handle_errors(fn):
    """Turn every exception into one line and exit 1 (traceback with --debug)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context()
        debug = (ctx.find_root().params or {}).get("debug", False)
        try:
            return fn(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as e:  # noqa: BLE001 - the CLI boundary
            if debug:
                raise
            from aotc.errors import AotcError
            if isinstance(e, AotcError):
                _fail((getattr(e, "summary", "") or (str(e).splitlines()[0] if str(e) else type(e).__name__))
                      + "".join(f"\n  - {d}" for d in getattr(e, "details", ())))
            if isinstance(e, MemoryError):     # e.g. random inputs for an engine whose input no host holds
                _fail(f"out of host memory: {e or 'an allocation failed'}")
            _fail(f"internal error ({type(e).__name__}): {str(e).splitlines()[0] if str(e) else ''} "
                  f"(rerun with --debug for a traceback)")
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="aotc")
@click.option("--debug", is_flag=True, help="Show Python tracebacks on errors.")
def main(debug):
    """aotc: compile ONNX models into standalone engines and run them."""


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@main.command("compile")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Engine file to write.")
@click.option("--arch", default="sm_80,sm_90",
              help="Comma-separated targets: sm_XX cubins, compute_XX PTX (default: sm_80,sm_90 + PTX for the newest).")
@click.option("--host/--no-host", "embed_host", default=False, show_default=True,
              help="Embed the host (cpu device) library now. By default it is built on the engine's first "
                   "cpu run through aotc's Python binding (from the kernel source the engine carries, cached); "
                   "the C runtime alone needs it embedded.")
@click.option("--dump-passes", type=click.Path(file_okay=False), default=None, help="Dump the graph after every pass here.")
@click.option("--disable-pass", multiple=True, help="Disable a graph pass by name (repeatable).")
@click.option("--precision", type=click.Choice(["fp32", "tf32", "fp16", "bf16"]), default="fp32", show_default=True,
              help="Compute precision; tf32: f32 GEMMs/convs on tensor cores; fp16/bf16 keep norms' and "
                   "softmax's sums in f32.")
@click.option("--keep-fp32", default="", help="Comma-separated node names (ONNX node names) kept in f32.")
@click.option("--layout", type=click.Choice(["nhwc", "nchw"]), default="nhwc", show_default=True,
              help="Layout of convolution stacks (channels-last by default).")
@click.option("--input-shape", "input_shape", multiple=True, metavar="NAME:DIMS",
              help="Fix a model input's symbolic dims, e.g. input_ids:1x128 (repeatable; as trtexec --shapes).")
@click.option("--dynamic", "dynamic", multiple=True, metavar="DIM=MIN..MAX",
              help="Serve a range of one of the model's dynamic dims by its name, e.g. batch=1..64 "
                   "(repeatable; MIN..MAX:DIV for multiples of DIV). One engine then runs any shape in the ranges.")
@click.option("--fast-compile", is_flag=True,
              help="Build GPU code with NVRTC --Ofast-compile=max: several times faster, slower kernels (iteration).")
@click.option("--split-k/--no-split-k", default=True, show_default=True,
              help="Split the K loop of GEMMs/convs that would fill under half of the GPU's SMs.")
@click.option("--report", is_flag=True, help="Show time and node counts per graph pass.")
@click.option("--explain", is_flag=True,
              help="Show each kernel's fused ops and why its fusion stopped where it did.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress messages.")
@handle_errors
def compile_cmd(model, output, arch, embed_host, dump_passes, disable_pass, precision, keep_fp32, layout, input_shape,
                dynamic, fast_compile, split_k, report, explain, as_json, quiet):
    """Compile MODEL (.onnx) into one engine file."""
    import os

    from aotc.compiler import compile as aotc_compile

    def progress(msg):
        if not quiet and not as_json:
            click.echo(f"  .. {msg}", err=True)

    t0 = time.perf_counter()
    keep = [k.strip() for k in keep_fp32.split(",") if k.strip()]
    result = aotc_compile(model, output, arch=arch, host=embed_host, dump_dir=dump_passes,
                          disabled=disable_pass, progress=progress, precision=precision, keep_fp32=keep,
                          layout=layout, input_shapes=_parse_input_shapes(input_shape), fast_compile=fast_compile,
                          split_k=split_k, dynamic=_parse_dynamic(dynamic))
    s = result.summary()
    s["engine"] = output
    s["engine_bytes"] = os.path.getsize(output)
    s["total_seconds"] = round(time.perf_counter() - t0, 3)
    if report and result.pass_report is not None:
        s["passes"] = result.pass_report.to_json()
    if explain:
        from aotc.fusion.regions import explain as explain_region
        s["fusion"] = [explain_region(r) for r in result.regions]
        s["quantization"] = _quantization(result.graph_imported, disable_pass)
    if as_json:
        click.echo(json.dumps(s, indent=2))
        return
    p = result.plan
    click.echo(f"aotc {__version__}: compiled {model} -> {output}")
    click.echo(f"  graph      {s['nodes_imported']} ops imported, {s['nodes_optimized']} after passes"
               f" ({precision}, {layout})")
    if p.dims:
        click.echo("  dynamic    " + ", ".join(f"{d.name} {d.min}..{d.max}" + (f" (x{d.divisor})" if d.divisor > 1 else "")
                                          for d in p.dims) + "; buffers planned at the top of the ranges")
    if report and result.pass_report is not None:
        click.echo("  passes     " + str(result.pass_report).replace("\n", "\n             "))
    click.echo(f"  kernels    {s['regions']} regions, {s['kernels_launched']} launches, "
               f"{s['kernels_distinct']} distinct kernels")
    kinds: dict[str, int] = {}
    for r in result.regions:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    click.echo("             " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    click.echo(f"  memory     arena {_human(p.arena_size)} (lower bound {_human(result.arena_lower_bound)}), "
               f"weights {_human(len(p.weights))}")
    modelled_bytes = sum(launch.bytes for launch in p.launches)
    modelled_flops = sum(launch.flops for launch in p.launches)
    click.echo(f"  modelled   {_human(modelled_bytes)} moved, {modelled_flops / 1e6:.2f} MFLOP per inference")
    targets = sorted(p.cubins) + ([f"PTX {p.ptx_arch}"] if p.ptx_arch else [])
    host = {"embedded": "host library embedded", "on first cpu run": "host library on first cpu run (--host embeds it)",
            "none": "no host library"}[s["host_library"]]
    built = p.manifest.get("device_build", "")
    click.echo(f"  targets    {', '.join(targets) or 'no GPU code'}" + (f" ({built})" if targets and built else "")
               + f"; {host}")
    click.echo(f"  engine     {_human(s['engine_bytes'])}")
    click.echo("  time       " + ", ".join(f"{k} {v:.2f}s" for k, v in s["stage_seconds"].items())
               + f" (total {s['total_seconds']:.2f}s)")
    cpu = s["cpu_seconds"]
    if "total" in cpu:
        click.echo(f"  cpu        {cpu['total']:.2f}s in this process (with its ptxas runs)"
                   + (f", {cpu['during nvrtc']:.2f}s of it while NVRTC ran" if "during nvrtc" in cpu else ""))
    if explain:
        _echo_quantization(s["quantization"])
        _echo_fusion(s["fusion"])


def _quantization(graph, disabled) -> dict[str, str]:
    """Per Conv/MatMul/Gemm with a dequantized operand: 'int8', 'fp8' or 'float: <why>'."""
    from aotc.hlo_passes.quantize import decisions
    found = decisions(graph)
    if "quantize" in disabled:
        return {k: "float: pass 'quantize' is disabled" for k in found}
    return found


def _echo_quantization(found: dict[str, str]) -> None:
    if not found:
        return
    integer = sum(not v.startswith("float") for v in found.values())
    click.echo(f"  quantized  {integer} of {len(found)} dot/conv nodes with Q/DQ operands run in int8/fp8")
    for name, how in found.items():
        if how.startswith("float"):
            click.echo(f"             {name}: {how}")


def _echo_fusion(regions: list[dict], shown: int = 6) -> None:
    """One line per region (kind, its compute ops, result) and its reasons for not growing further."""
    click.echo("  fusion     region, kind, fused ops -> result; indented: why it did not grow further")
    for i, r in enumerate(regions):
        names = r["ops"][:shown] + ([f"... {len(r['ops']) - shown} more"] if len(r["ops"]) > shown else [])
        click.echo(f"    {i:>4}  {r['kind']:<9} {' + '.join(names) or 'copy'} -> {r['root']}")
        for why in r["why_not_larger"]:
            click.echo(f"             {why}")


def _parse_dynamic(specs) -> dict[str, str]:
    """'batch=1..64' -> {'batch': '1..64'} (the ranges are checked by the importer, against the model's dims)."""
    out = {}
    for spec in specs:
        name, sep, r = spec.partition("=")
        if not sep or not name.strip() or ".." not in r:
            raise click.BadParameter(f"'{spec}' is not DIM=MIN..MAX (e.g. batch=1..64)", param_hint="--dynamic")
        out[name.strip()] = r.strip()
    return out


def _parse_input_shapes(specs) -> dict[str, tuple[int, ...]]:
    """'NAME:1x3x224x224' -> {NAME: (1, 3, 224, 224)}; the last ':' splits, as tf2onnx names hold ':0'."""
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.rpartition(":")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x")) if dims else ()
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(d < 0 for d in shape):
            raise click.BadParameter(f"'{spec}' is not NAME:DIMS (e.g. input_ids:1x128)", param_hint="--input-shape")
        shapes[name] = shape
    return shapes


def _random_inputs(specs, seed=0):
    from aotc.package.sample_inputs import random_inputs
    return random_inputs(specs, seed)


def _load_inputs(path, specs):
    from aotc.cli.npz_io import read_inputs
    return read_inputs(path, specs)


@main.command("run")
@click.argument("engine", type=click.Path(exists=True, dir_okay=False))
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--inputs", "inputs_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help=".npz with one array per input name (random inputs when omitted). bfloat16/float8/int4 "
                   "arrays saved by numpy (raw |V2 or |V1 bytes) are read as the input's dtype.")
@click.option("--outputs", "outputs_path", type=click.Path(dir_okay=False), default=None,
              help="Write outputs to this .npz, keyed by output name. bfloat16/float8/int4 outputs are stored "
                   "as raw bytes: np.load(path)[name].view(ml_dtypes.bfloat16) (or float8_e4m3fn, int4, ...).")
@click.option("--seed", default=0, show_default=True, help="Seed for random inputs.")
@click.option("--iterations", default=1, show_default=True, help="Run this many times; report the median time.")
@click.option("--dim", "dims", multiple=True, metavar="NAME=INT",
              help="A dynamic engine's dim for random inputs, e.g. batch=4 (repeatable; others at their max).")
@click.option("--sanitize", is_flag=True,
              help="cpu only: rebuild the host build with the sanitizer (races, bounds, alignment, barriers, "
                   "uninitialized shared memory); violations exit 1.")
@click.option("--sanitize-order", default="forward", show_default=True, metavar="forward|reverse|random:SEED",
              help="With --sanitize: the order blocks and threads run in.")
@handle_errors
def run_cmd(engine, device, inputs_path, outputs_path, seed, iterations, sanitize, sanitize_order, dims=()):
    """Run ENGINE once on DEVICE and print its outputs' shapes and statistics."""
    if sanitize:
        return _run_sanitized(engine, device, inputs_path, outputs_path, seed, iterations, sanitize_order, dims)
    import numpy as np

    from aotc.errors import InputError
    from aotc.package.dim_values import choose_dims, concrete_spec, parse_dim_values
    from aotc.package.runtime_binding import Engine
    eng = Engine(engine)
    if inputs_path and dims:
        raise InputError("--dim applies to random inputs; with --inputs the arrays' shapes are used")
    values = choose_dims(eng.dims, parse_dim_values(dims))
    specs = [concrete_spec(s, eng.dims, values) for s in eng.inputs]
    inputs = _load_inputs(inputs_path, eng.inputs) if inputs_path else _random_inputs(specs, seed)
    ctx = eng.create_context(device=device)
    times = []
    for _ in range(max(1, iterations)):
        t0 = time.perf_counter()
        outputs = ctx.run(inputs)
        times.append(time.perf_counter() - t0)
    at = "" if not eng.dims or inputs_path else f" at {', '.join(f'{k}={v}' for k, v in values.items())}"
    click.echo(f"ran {engine} on {device}{at}: {len(outputs)} output(s), median {np.median(times) * 1e3:.2f} ms "
               f"over {len(times)} run(s)")
    for name, a in outputs.items():
        af = a.astype(np.float64) if a.size else a
        stats = f"min {af.min():.6g} max {af.max():.6g} mean {af.mean():.6g}" if a.size else "empty"
        click.echo(f"  {name}: {a.dtype}{list(a.shape)}  {stats}")
    if outputs_path:
        from aotc.cli.npz_io import write_outputs
        write_outputs(outputs_path, outputs)
        click.echo(f"  outputs written to {outputs_path}")


def _run_sanitized(engine, device, inputs_path, outputs_path, seed, iterations, order, dims=()):
    """`run --sanitize`: the same run on a sanitizing host build; one line per violation kind."""
    import os
    import re
    import tempfile

    from aotc.errors import AotcError
    from aotc.package.sanitize import read_report, sanitized_engine, summary_lines
    if device != "cpu":
        raise AotcError("--sanitize runs on the cpu device only (the host emulation is what it instruments)")
    if not re.fullmatch(r"forward|reverse|random(:\d+)?", order):
        raise AotcError(f"--sanitize-order {order!r}: use forward, reverse or random:SEED")
    with open(engine, "rb") as f:
        image = sanitized_engine(f.read())
    with tempfile.TemporaryDirectory(prefix="aotc-sanitize-") as tmp:
        path, report = os.path.join(tmp, os.path.basename(engine)), os.path.join(tmp, "report.jsonl")
        with open(path, "wb") as f:
            f.write(image)
        saved = {k: os.environ.get(k) for k in ("AOTC_SANITIZE_REPORT", "AOTC_SANITIZE_ORDER")}
        os.environ.update(AOTC_SANITIZE_REPORT=report, AOTC_SANITIZE_ORDER=order)
        try:
            run_cmd.callback.__wrapped__(path, device, inputs_path, outputs_path, seed, iterations, False, order,
                                         dims)
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        found = read_report(report)
    lines = summary_lines(found)
    for line in lines:
        click.echo(line, err=True)
    if lines:
        sys.exit(1)
    click.echo(f"sanitizer: no violations ({order} order)")


@main.command("inspect")
@click.argument("engine", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="One JSON object for tools.")
@click.option("--bandwidth", type=float, default=4.3, show_default=True, help="Roofline memory bandwidth, TB/s.")
@click.option("--fp32-tflops", type=float, default=60.0, show_default=True, help="Roofline fp32 peak, TFLOP/s.")
@click.option("--tc-tflops", type=float, default=790.0, show_default=True,
              help="Roofline tensor-core (bf16/f16) peak, TFLOP/s.")
@handle_errors
def inspect_cmd(engine, as_json, bandwidth, fp32_tflops, tc_tflops):
    """Show ENGINE's inputs, outputs, kernels, memory and architectures."""
    from aotc.package.inspect import describe_engine, format_description
    with open(engine, "rb") as f:
        data = f.read()
    info = describe_engine(data, bandwidth * 1e12, fp32_tflops * 1e12, tc_tflops * 1e12)
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(format_description(info, engine))


@main.command("demo")
@click.option("--keep", type=click.Path(dir_okay=False), default=None, help="Keep the engine at this path.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@handle_errors
def demo_cmd(keep, device):
    """Build a small built-in model, compile it, run the engine and check it."""
    from aotc.demo import run_demo
    ok = run_demo(keep=keep, device=device, echo=click.echo)
    if not ok:
        _fail("demo: engine outputs do not match the reference")


main.add_command(__import__("aotc.cli.ops_cmd", fromlist=["ops"]).ops)
main.add_command(__import__("aotc.cli.bench_cmd", fromlist=["bench"]).bench)
main.add_command(__import__("aotc.cli.debug_cmd", fromlist=["debug"]).debug)
main.add_command(__import__("aotc.cli.serve_cmd", fromlist=["serve"]).serve)
main.add_command(__import__("aotc.cli.profile_cmd", fromlist=["profile"]).profile)

if __name__ == "__main__":
    main()

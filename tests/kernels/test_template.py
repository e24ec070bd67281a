"""Kernel templates: slots filled or refused by name, fragments spliced, no `${` reaches a compiler.

The last tests generate one kernel of every family (no host build) and check
that together they instantiate every file in templates/, and that the module
they make compiles with NVRTC for sm_80 and sm_90.
"""
import re

import numpy as np
import pytest

from aotc.errors import CompileError
from aotc.fusion.regions import partition
from aotc.ir.graph import GraphBuilder
from aotc.kernels import codegen, template
from aotc.kernels.host_compile import compile_host
from aotc.kernels.nvrtc_compile import compile_device, compile_device_with_ptx
from aotc.kernels.template import TemplateError, check_filled, instantiate, template_names


@pytest.fixture
def templates_in(tmp_path, monkeypatch):
    """Point the template module at tmp_path; `write(name, text)` adds a template there."""
    monkeypatch.setattr(template, "TEMPLATES_DIR", tmp_path)
    template.template_text.cache_clear()
    template.template_slots.cache_clear()

    def write(name, text):
        (tmp_path / name).write_text(text)
        template.template_text.cache_clear()
        template.template_slots.cache_clear()
    yield write
    template.template_text.cache_clear()
    template.template_slots.cache_clear()


LOOP_SLOTS = dict(what="w", block=256, name="k", params="float *out", vector="", idx_t="int", scalar_start="0",
                  total=10, body="    out[i] = 1.0f;")


def test_every_slot_filled():
    text = instantiate("loop.cu", LOOP_SLOTS)
    assert "${" not in text and "void __launch_bounds__(256) k(float *out)" in text
    assert "i < 10;" in text and "    out[i] = 1.0f;" in text


def test_an_unfilled_slot_is_named_with_the_template():
    slots = dict(LOOP_SLOTS)
    del slots["body"]
    with pytest.raises(TemplateError, match=r"kernel template 'loop.cu': slot 'body' is not filled"):
        instantiate("loop.cu", slots)


def test_every_unfilled_slot_is_listed():
    with pytest.raises(TemplateError, match=r"slot '\w+' is not filled \(nor [\w, ]+\)") as info:
        instantiate("loop.cu", {"what": "w"})
    assert all(s in str(info.value) for s in LOOP_SLOTS if s != "what")


def test_a_slot_the_template_lacks_is_refused():
    with pytest.raises(TemplateError, match=r"kernel template 'loop.cu' has no slot 'bdoy'"):
        instantiate("loop.cu", dict(LOOP_SLOTS, bdoy="x"))


def test_an_unknown_template_is_named():
    with pytest.raises(TemplateError, match="'nonesuch.cu' not found"):
        instantiate("nonesuch.cu", {})


def test_values_are_not_rescanned(templates_in):
    templates_in("t.cu", "a ${x} b ${y}\n")
    assert instantiate("t.cu", {"x": "${y}", "y": 3}) == "a ${y} b 3\n"


def test_an_include_is_spliced_at_its_lines_indent(templates_in):
    """The fragment's doc lines are dropped; its lines are indented as the include line is,
    except a column-0 slot line (emitter text that carries its own indentation)."""
    templates_in("f.part", "// doc: ${not_a_slot}\nfor (;;) {\n${body}\n  x = ${v};\n}\n")
    templates_in("t.cu", "void k() {\n    ${include f.part}\n  done();\n}\n")
    assert template.template_slots("t.cu") == {"body", "v"}
    text = instantiate("t.cu", {"body": "      y();", "v": 7})
    assert text == "void k() {\n    for (;;) {\n      y();\n      x = 7;\n    }\n  done();\n}\n"


def test_a_fragment_renders_indented(templates_in):
    """A fragment as a slot value: `indent` spaces deeper (not its block slots and preprocessor lines),
    without a final newline (the slot's line has one)."""
    templates_in("f.part", "{\n${body}\n#pragma unroll\n  a = ${v};\n}\n")
    assert instantiate("f.part", {"body": "  b();", "v": 1}, indent=4) == \
        "    {\n  b();\n#pragma unroll\n      a = 1;\n    }"


def test_an_include_cycle_is_refused(templates_in):
    templates_in("a.part", "${include b.part}\n")
    templates_in("b.part", "${include a.part}\n")
    with pytest.raises(TemplateError, match="include cycle"):
        instantiate("a.part", {})


@pytest.mark.parametrize("text", ["x = ${ v};\n", "a;\n  b; ${include f.part}\n", "y = ${v\n"])
def test_a_malformed_slot_is_refused_when_the_template_loads(templates_in, text):
    templates_in("t.cu", text)
    with pytest.raises(TemplateError, match=r"kernel template 't.cu': malformed slot '\$\{.*' at line \d"):
        instantiate("t.cu", {})


def test_a_missing_fragment_is_named(templates_in):
    templates_in("t.cu", "${include gone.part}\n")
    with pytest.raises(TemplateError, match="'gone.part' not found"):
        instantiate("t.cu", {})


SOURCE_WITH_SLOT = '#include "aotc_prelude.cuh"\nextern "C" __global__ void k(float *y) {\n  y[0] = ${value};\n}\n'


def test_check_filled_names_the_slot_and_line():
    assert check_filled("int x;\n") == "int x;\n"
    with pytest.raises(TemplateError, match=r"unfilled template slot 'value' at line 3"):
        check_filled(SOURCE_WITH_SLOT)
    with pytest.raises(TemplateError, match=r"unfilled template slot '\$\{ value"):
        check_filled("x = ${ value};")


@pytest.mark.parametrize("compile_", [
    lambda s: compile_device(s, "sm_90"),
    lambda s: compile_device(s, "compute_90"),
    lambda s: compile_device_with_ptx(s, "sm_80"),
    lambda s: compile_host(s, ["k"]),
], ids=["nvrtc", "ptx", "nvrtc_with_ptx", "host"])
def test_no_compiler_sees_a_slot(compile_):
    """Refused in Python with aotc's message (a TemplateError, no compiler log), before NVRTC or g++ runs."""
    with pytest.raises(TemplateError, match="'value'") as info:
        compile_(SOURCE_WITH_SLOT)
    assert isinstance(info.value, CompileError) and info.value.log == ""


# -- every template file, used by its family's code generator ------------------------------------------

def _small_graphs():
    """One small graph per kernel family and fragment (generation only: nothing is run here)."""
    from tests.fusion.test_chains import squeeze_excite
    from tests.helpers.norms import layer_norm, matmul
    from tests.kernels.test_codegen_attention import attention_graph
    from tests.kernels.test_codegen_attention_int8 import int8_attention_graph
    from tests.kernels.test_attention_mma import mma_attention_graph
    from tests.kernels.test_codegen_conv import _conv_graph, _inverted_residual
    from tests.kernels.test_codegen_gated import gated_mlp
    from tests.kernels.test_codegen_vector import _graph as vector_graph
    from tests.kernels.test_split_k import _gemm
    rng = np.random.default_rng(0)
    graphs = [vector_graph(64, 100, "f32"), attention_graph(1, 2, 50, 50, 16, 16),
              gated_mlp(5, 33, 48)[0], gated_mlp(3, 40, 17, "f16")[0],
              _gemm(3, 50, 4096), _gemm(50, 70, 1000, "f16"), _gemm(50, 70, 1000, "f32", "tf32"),
              _gemm(50, 64, 1000, "f16"),                      # rows of 70 f16 start off the sector grid, of 64 on it
              _conv_graph(rng, (1, 9, 11, 3), (8, 3, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1)[0],
              _inverted_residual(rng, (1, 3, 3, 64), 384, 64, 1)[0]]
    b = GraphBuilder()                                   # reductions, rows, a window, a direct conv
    x = b.input("x", (3, 50, 783))
    s = b.add("reduce", b.add("exp", x), kind="sum", axes=(2,))              # 783: a block per row
    m = b.add("reduce", b.add("transpose", x, permutation=(0, 2, 1)), kind="max", axes=(2,))   # 50: a warp per row
    col = b.add("reduce", x, kind="min", axes=(1,))                          # 50 keeping 783: a thread per output
    ln = layer_norm(b, x, b.input("g", (783,)), b.input("beta", (783,)))     # a block per row
    z = b.input("z", (7, 50))
    short = layer_norm(b, z, b.input("gz", (50,)), b.input("bz", (50,)))    # a warp per row
    pool = b.add("reduce_window", x, kind="max", window=(1, 3, 3), strides=(1, 2, 2),
                 padding=((0, 0), (1, 1), (1, 1)), dilations=(1, 1, 1))
    w = b.input("w", (4, 50, 3))
    conv = b.add("convolution", x, w, strides=(1,), padding=((1, 1),), dilations=(1,), groups=1)
    graphs.append(b.build([s, m, col, b.add("tanh", ln), b.add("tanh", short), pool, conv]))
    b = GraphBuilder()                                   # a norm prologue in a GEMM
    x = b.input("x", (50, 64))
    y = layer_norm(b, x, b.input("g", (64,)), b.input("beta", (64,)))
    graphs.append(b.build([b.add("tanh", matmul(b, y, b.input("w", (64, 70))))]))
    b = GraphBuilder()                                   # a stem conv with a window fused into the depthwise
    x = b.input("x", (1, 13, 10, 3))
    e = b.add("convolution", x, b.constant(rng.standard_normal((16, 3, 3, 3)).astype(np.float32)),
              strides=(2, 2), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=1, layout="NHWC")
    d = b.add("convolution", b.add("tanh", e), b.constant(rng.standard_normal((16, 3, 3, 1)).astype(np.float32)),
              strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=16, layout="NHWC")
    graphs.append(b.build([b.add("tanh", d)]))
    b = GraphBuilder()                                   # pointwise expansion + depthwise, a chain
    x = b.input("x", (2, 6, 6, 8))
    e = b.add("convolution", x, b.constant(rng.standard_normal((32, 1, 1, 8)).astype(np.float32)),
              strides=(1, 1), padding=((0, 0), (0, 0)), dilations=(1, 1), groups=1, layout="NHWC")
    d = b.add("convolution", b.add("tanh", e), b.constant(rng.standard_normal((32, 3, 3, 1)).astype(np.float32)),
              strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1), groups=32, layout="NHWC")
    graphs.append(b.build([b.add("tanh", d), squeeze_excite(b, b.input("y", (2, 6, 6, 32)), 8, rng=rng)]))
    graphs.append(_int8_graph(rng))
    graphs.append(int8_attention_graph(1, 2, 20, 40, 16, 16, zero_points=True)[0])
    graphs.append(mma_attention_graph(1, 2, 20, 40, 64, 64, "f16", "add"))      # attention_mma.cu
    return graphs


def _int8_graph(rng):
    """Quantized convs: a dense one (8-bit GEMM, bytes and words staged), a depthwise one (direct integers)."""
    b = GraphBuilder()
    x = b.input("x", (1, 6, 6, 8), "u8")
    attrs = dict(strides=(1, 1), padding=((1, 1), (1, 1)), dilations=(1, 1), layout="NHWC", out_dtype="i32",
                 pad_value=3)
    d = b.add("convolution", x, b.constant(rng.integers(-9, 9, (8, 3, 3, 1)).astype(np.int8)), groups=8, **attrs)
    c = b.add("convolution", b.add("convert", d, dtype="u8"),
              b.constant(rng.integers(-9, 9, (5, 3, 3, 8)).astype(np.int8)), groups=1, **attrs)
    e = b.add("convolution", b.input("z", (1, 6, 6, 3), "i8"), b.constant(rng.integers(-9, 9, (5, 1, 1, 3)).astype(np.int8)),
              groups=1, **dict(attrs, padding=((0, 0), (0, 0))))
    return b.build([b.add("convert", c, dtype="f32"), b.add("convert", e, dtype="f32")])


@pytest.fixture(scope="module")
def family_kernels():
    """Every kernel of _small_graphs() and the template files their generation read."""
    used = set()
    read = template._read
    template.template_text.cache_clear()
    template.template_slots.cache_clear()
    slots = template.template_slots

    def record_slots(name):
        used.add(name)
        return slots(name)

    def record_read(name):
        used.add(name)
        return read(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(template, "template_slots", record_slots)
        mp.setattr(template, "_read", record_read)
        kernels = [codegen.generate(g, r) for g in _small_graphs() for r in partition(g)]
    template.template_text.cache_clear()
    template.template_slots.cache_clear()
    return kernels, used


def test_every_template_file_is_instantiated_by_its_family(family_kernels):
    _, used = family_kernels
    assert set(template_names()) - used == set()
    assert len(template_names()) >= 25


def test_every_template_file_is_used_in_the_package_sources():
    """A template nobody instantiates or includes is dead text (named here before it rots)."""
    root = template.TEMPLATES_DIR.parent
    code = "\n".join(p.read_text() for p in root.glob("*.py"))
    includes = "\n".join(p.read_text() for p in template.TEMPLATES_DIR.iterdir() if p.suffix in (".cu", ".part"))
    for name in template_names():
        stem = name.rsplit(".", 1)[0]
        assert (f'"{name}"' in code or f'finish("{stem}"' in code
                or re.search(r"\$\{include " + re.escape(name) + r"\}", includes)), name


def test_all_families_compile_for_the_gpu(family_kernels):
    kernels, _ = family_kernels
    source = codegen.module_source(kernels)
    assert "${" not in source
    for arch in ("sm_80", "sm_90"):
        assert compile_device(source, arch)[:4] == b"\x7fELF"

"""Kernel templates: CUDA files with named `${slot}`s, filled one way for every kernel family.

A template is a file in `templates/`: a whole kernel (`<kind>.cu`) or a fragment
(`<name>.part`). `instantiate(name, slots)` fills every `${slot}` in one pass
(values are not re-scanned) and refuses, naming the template and the slot, a slot
that `slots` leaves unfilled or a slot given that the template does not have: a
typo fails here, in Python, never as a CUDA syntax error. `check_filled(source)`
is the compilers' last guard (NVRTC, nvcc and the host compiler call it): no
`${` reaches them.

Fragments come in two ways, both through this module:
- a line `${include name.part}` splices the fragment in place, indented as that
  line is (static structure shared by several kernels, e.g. depthwise staging);
- `instantiate("name.part", slots, indent=...)` renders a fragment that Python
  repeats or leaves out (one reduction phase per reduce; a split-K fixup only
  when the launch splits) and passes the text on as another template's slot.

Conventions: a slot alone on its line at column 0 (`${epilogue}`) holds whole
lines that carry their own indentation (the expression emitter's output), and
re-indenting leaves such a line alone, as it leaves preprocessor lines; other
slots hold expressions and numbers. A fragment's leading `//` lines document the fragment and are dropped
when it is used. To add a kernel family, write `templates/<kind>.cu` and call
`instantiate` (usually through `KernelBuilder.finish`).
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

from aotc.errors import CompileError

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
_SLOT = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_INCLUDE = re.compile(r"^([ \t]*)\$\{include ([A-Za-z0-9_.]+)\}[ \t]*$", re.M)
_MALFORMED = re.compile(r"\$\{(?![A-Za-z_][A-Za-z0-9_]*\})")
_BLOCK_SLOT = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")
_MAX_INCLUDE_DEPTH = 8


class TemplateError(CompileError):
    """A kernel template used wrongly: a slot unfilled or unknown, a missing fragment, `${` left in source."""


def _indent(text: str, pad: str) -> str:
    """`text` with `pad` before each non-empty line, except column-0 block slots (they carry their own
    indentation) and preprocessor lines (`#pragma unroll` stays at column 0)."""
    if not pad:
        return text
    return "".join(line if not line.strip() or line.startswith("#") or _BLOCK_SLOT.match(line.rstrip("\n"))
                   else pad + line for line in text.splitlines(True))


def _read(name: str) -> str:
    path = TEMPLATES_DIR / name
    if "/" in name or not path.is_file():
        raise TemplateError(f"kernel template {name!r} not found in {TEMPLATES_DIR}")
    text = path.read_text()
    if name.endswith(".part"):         # the fragment's own documentation stays in its file
        lines = text.splitlines(True)
        while lines and lines[0].startswith("//"):
            lines.pop(0)
        text = "".join(lines)
    return text


@functools.lru_cache(maxsize=None)
def template_text(name: str) -> str:
    """The template `name` (a file in templates/) with its `${include ...}` lines expanded."""
    text = _expand(name, (name,))
    bad = _MALFORMED.search(text)
    if bad:                            # `${ x}`, an include inside a line: never filled, so refused here
        excerpt = text[bad.start():].split("\n")[0][:30]
        raise TemplateError(f"kernel template {name!r}: malformed slot {excerpt!r} at line "
                            f"{text.count(chr(10), 0, bad.start()) + 1}")
    return text


def _expand(name: str, stack: tuple) -> str:
    def splice(m: re.Match) -> str:
        part = m.group(2)
        if part in stack or len(stack) > _MAX_INCLUDE_DEPTH:
            raise TemplateError(f"kernel template {name!r}: include cycle through {part!r}")
        body = _expand(part, stack + (part,))
        return _indent(body, m.group(1)).rstrip("\n")
    return _INCLUDE.sub(splice, _read(name))


@functools.lru_cache(maxsize=None)
def template_slots(name: str) -> frozenset:
    """The slot names template `name` needs (its included fragments' slots too)."""
    return frozenset(_SLOT.findall(template_text(name)))


def instantiate(name: str, slots: dict, indent: int = 0) -> str:
    """Template `name` with every slot filled from `slots` (values through str()), `indent` spaces deeper."""
    needed = template_slots(name)
    missing = sorted(needed - slots.keys())
    if missing:
        raise TemplateError(f"kernel template {name!r}: slot {missing[0]!r} is not filled"
                            + (f" (nor {', '.join(missing[1:])})" if len(missing) > 1 else ""))
    unknown = sorted(slots.keys() - needed)
    if unknown:
        raise TemplateError(f"kernel template {name!r} has no slot {unknown[0]!r}"
                            + (f" (nor {', '.join(unknown[1:])})" if len(unknown) > 1 else ""))
    text = _indent(template_text(name), " " * indent)
    if name.endswith(".part"):         # a fragment becomes a slot value: whole lines, no final newline
        text = text.rstrip("\n")
    return _SLOT.sub(lambda m: str(slots[m.group(1)]), text)


def check_filled(source: str, what: str = "kernel source") -> str:
    """`source` unchanged; TemplateError naming the slot and line if a `${` is left in it."""
    at = source.find("${")
    if at < 0:
        return source
    line = source.count("\n", 0, at) + 1
    m = _SLOT.match(source, at)
    slot = repr(m.group(1)) if m else repr(source[at:at + 20].split("\n")[0])
    raise TemplateError(f"{what}: unfilled template slot {slot} at line {line}; "
                        "a kernel template was not instantiated through aotc.kernels.template")


def template_names() -> list[str]:
    """Every template and fragment file in templates/ (headers excluded)."""
    return sorted(p.name for p in TEMPLATES_DIR.iterdir() if p.suffix in (".cu", ".part"))


__all__ = ["TEMPLATES_DIR", "TemplateError", "instantiate", "check_filled", "template_text", "template_slots",
           "template_names"]

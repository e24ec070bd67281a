"""The engine plan: everything the writer needs to produce one engine file.

This is the contract between the compiler (which fills it) and the engine
container (`engine_format.py`, which serializes it) and the C runtime (which
reads the binary form). A static engine bakes every shape into the kernel
source, so a launch is a kernel name, a grid, a block, a dynamic shared-memory
size and a list of buffer references.

A dynamic engine (one that serves a range of shapes) adds a shape program: the
engine's dynamic dims (`DimSpec`, each a name and a range) are registers
0..len(dims)-1, and instruction k of `program` computes register
len(dims)+k from earlier registers. Wherever a static engine has an integer
that now depends on the shapes (a tensor dim, a grid dim) the plan holds a
`Reg`; a kernel that takes a size as an argument gets a `BufferRef("dim",
index=register)` (the value passed by value, as a little-endian 64-bit slot
the kernel reads as int or long long). A launch with `when` runs only where
that register is nonzero (how the runtime picks a kernel variant per size
bucket), and a launch whose grid has a zero dim is skipped (empty tensors).
The runtime evaluates the program when input shapes change, not per run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Buffer reference kinds, in the order the C runtime numbers them.
REF_INPUT, REF_OUTPUT, REF_ARENA, REF_WEIGHT, REF_DIM = 0, 1, 2, 3, 4
REF_KINDS = {"input": REF_INPUT, "output": REF_OUTPUT, "arena": REF_ARENA, "weight": REF_WEIGHT,
             "dim": REF_DIM}

# Shape-program opcodes (shared with the C runtime). Integer semantics as in Python:
# floordiv and mod round toward negative infinity, ceildiv(a, b) = -floordiv(-a, b);
# a zero divisor is an error. le/lt/eq/ne give 0 or 1, and_ is 1 when both are nonzero.
SHAPE_OPS = {"const": 0, "add": 1, "sub": 2, "mul": 3, "floordiv": 4, "ceildiv": 5, "mod": 6,
             "min": 7, "max": 8, "le": 9, "lt": 10, "eq": 11, "ne": 12, "and": 13}

# Engine dtype codes (shared with aotc_runtime.h's aotc_dtype_t).
# Codes only grow: an older runtime refuses a code it does not know with DATA_LOSS. float8 is one
# byte per element; int4/uint4, int2/uint2 and float4 one per byte too (the low bits, as ml_dtypes);
# f8e8m0fnu is one byte, the f32 exponent field.
DTYPE_CODES = {"f32": 1, "f16": 2, "bf16": 3, "i64": 4, "i32": 5, "i8": 6, "u8": 7, "bool": 8,
               "f64": 9, "i16": 10, "u16": 11, "u32": 12, "u64": 13, "f8e4m3fn": 14, "f8e5m2": 15,
               "f8e4m3fnuz": 16, "f8e5m2fnuz": 17, "i4": 18, "u4": 19, "i2": 20, "u2": 21, "f4e2m1fn": 22,
               "f8e8m0fnu": 23}
DTYPE_SIZES = {"f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i8": 1, "u8": 1, "bool": 1,
               "f64": 8, "i16": 2, "u16": 2, "u32": 4, "u64": 8, "f8e4m3fn": 1, "f8e5m2": 1,
               "f8e4m3fnuz": 1, "f8e5m2fnuz": 1, "i4": 1, "u4": 1, "i2": 1, "u2": 1, "f4e2m1fn": 1,
               "f8e8m0fnu": 1}


@dataclass(frozen=True)
class Reg:
    """A shape-program register, where a static plan has an integer."""
    index: int


@dataclass(frozen=True)
class DimSpec:
    """A dynamic dim: register `index in EnginePlan.dims`; the runtime accepts min..max, multiples of divisor."""
    name: str
    min: int
    max: int
    divisor: int = 1


@dataclass(frozen=True)
class ShapeOp:
    """One shape-program instruction: registers `a`, `b` (earlier ones) or the constant `imm` for "const"."""
    op: str
    a: int = 0
    b: int = 0
    imm: int = 0


@dataclass(frozen=True)
class TensorSpec:
    """A named engine input or output: dtype name from DTYPE_CODES and its shape.

    A dynamic dim is a Reg (an input's only ever names a dim: a register below
    len(EnginePlan.dims)); `max_shape` is the shape at the top of every range
    (the buffer that fits any run), equal to `shape` for a static tensor.
    """
    name: str
    dtype: str
    shape: tuple
    max_shape: tuple | None = None

    @property
    def is_static(self) -> bool:
        return not any(isinstance(d, Reg) for d in self.shape)

    @property
    def static_shape(self) -> tuple[int, ...]:
        if self.is_static:
            return tuple(self.shape)
        if self.max_shape is None:
            raise ValueError(f"tensor {self.name!r}: dynamic shape without max_shape")
        return tuple(self.max_shape)

    @property
    def nbytes(self) -> int:
        """Bytes at the static shape, or at the maximum shape for a dynamic tensor."""
        n = DTYPE_SIZES[self.dtype]
        for d in self.static_shape:
            n *= d
        return n


@dataclass(frozen=True)
class BufferRef:
    """Where a kernel pointer argument points.

    kind "input"/"output": `index` into EnginePlan.inputs/outputs, offset 0.
    kind "arena": `offset` bytes into the per-context activation arena.
    kind "weight": `offset` bytes into the shared weights blob.
    """
    kind: str
    index: int = 0
    offset: int = 0


@dataclass
class Launch:
    """One kernel launch per inference, in execution order."""
    kernel: str                      # exported symbol / cubin function name
    grid: tuple                      # three ints or Regs
    block: tuple[int, int, int]
    smem: int                        # dynamic shared memory bytes
    args: list[BufferRef]
    bytes: int = 0                   # modelled bytes moved
    flops: int = 0                   # modelled floating-point operations
    region: str = ""                 # human-readable region description
    when: Reg | None = None          # run only where this register is nonzero (a size-bucket variant)
    variant: str = ""                # the bucket this launch serves, for `aotc inspect` (e.g. "batch<=8")
    bytes_expr: object = None        # compile-time only (not written): bytes and flops as expressions of the
    flops_expr: object = None        # dynamic dims, for reports at one shape (bench/dynamic_report.py)


@dataclass
class EnginePlan:
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    arena_size: int
    weights: bytes
    launches: list[Launch]
    arena_zeroed: int = 0                                    # arena tail bytes zeroed per context
    cubins: dict[str, bytes] = field(default_factory=dict)   # "sm_80" -> cubin ELF
    ptx: bytes = b""                                         # PTX text for JIT on newer chips
    ptx_arch: str = ""                                       # e.g. "compute_90"
    host_lib: bytes = b""                                    # host (emulation) shared library
    manifest: dict = field(default_factory=dict)             # extra human-readable info
    dims: list[DimSpec] = field(default_factory=list)        # dynamic dims: registers 0..len-1
    program: list[ShapeOp] = field(default_factory=list)     # computes the later registers
    checks: list[tuple[Reg, str]] = field(default_factory=list)  # must be nonzero, else the message

    @property
    def is_dynamic(self) -> bool:
        return bool(self.dims)

    @property
    def kernels(self) -> list[str]:
        """Unique kernel names in first-launch order."""
        seen: dict[str, None] = {}
        for launch in self.launches:
            seen.setdefault(launch.kernel, None)
        return list(seen)


def evaluate_program(plan: EnginePlan, values: dict[str, int]) -> list[int]:
    """Every register for the dim values `values` (name -> int): the runtime's arithmetic, in Python."""
    regs = [int(values[d.name]) for d in plan.dims]
    for op in plan.program:
        regs.append(_apply(op, regs))
    return regs


def _apply(op: ShapeOp, regs: list[int]) -> int:
    if op.op == "const":
        return op.imm
    a, b = regs[op.a], regs[op.b]
    if op.op in ("floordiv", "ceildiv", "mod") and b == 0:
        raise ZeroDivisionError(f"shape program: {op.op} by zero")
    return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "floordiv": lambda: a // b,
            "ceildiv": lambda: -(-a // b), "mod": lambda: a % b, "min": lambda: min(a, b),
            "max": lambda: max(a, b), "le": lambda: int(a <= b), "lt": lambda: int(a < b),
            "eq": lambda: int(a == b), "ne": lambda: int(a != b), "and": lambda: int(bool(a) and bool(b))}[op.op]()

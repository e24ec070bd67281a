"""The engine plan: everything the writer needs to produce one engine file.

This is the contract between the compiler (which fills it) and the engine
container (`engine_format.py`, which serializes it) and the C runtime (which
reads the binary form). Kernels take only pointer parameters; every shape is
baked into the kernel source, so a launch is a kernel name, a grid, a block,
a dynamic shared-memory size and a list of buffer references.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Buffer reference kinds, in the order the C runtime numbers them.
REF_INPUT, REF_OUTPUT, REF_ARENA, REF_WEIGHT = 0, 1, 2, 3
REF_KINDS = {"input": REF_INPUT, "output": REF_OUTPUT, "arena": REF_ARENA, "weight": REF_WEIGHT}

# Engine dtype codes (shared with aotc_runtime.h's aotc_dtype_t).
DTYPE_CODES = {"f32": 1, "f16": 2, "bf16": 3, "i64": 4, "i32": 5, "i8": 6, "u8": 7, "bool": 8}
DTYPE_SIZES = {"f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i8": 1, "u8": 1, "bool": 1}


@dataclass(frozen=True)
class TensorSpec:
    """A named engine input or output: dtype name from DTYPE_CODES, static shape."""
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = DTYPE_SIZES[self.dtype]
        for d in self.shape:
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
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int                        # dynamic shared memory bytes
    args: list[BufferRef]
    bytes: int = 0                   # modelled bytes moved
    flops: int = 0                   # modelled floating-point operations
    region: str = ""                 # human-readable region description


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

    @property
    def kernels(self) -> list[str]:
        """Unique kernel names in first-launch order."""
        seen: dict[str, None] = {}
        for launch in self.launches:
            seen.setdefault(launch.kernel, None)
        return list(seen)

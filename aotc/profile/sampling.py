"""Block sampling for `aotc profile --sample-blocks N`: which launches may skip blocks, and the scaling after.

Emulating every thread block of a full-size batch-32 engine under instrumentation
takes hours; running N blocks per launch (the first, the last and one per stratum
between, cuda_host_profile.h) takes minutes, and a kernel's blocks run the same
code over different tiles, so ratios over the sampled blocks (efficiencies,
sectors per request, bank conflicts per access) stand for the launch and counts
scale by blocks in the grid / blocks run.

Skipping blocks is safe only where nothing depends on what the skipped blocks
would have written. From each kernel's signature in the engine's source:
- a kernel with split-K tile counters (`aotc_sem`) runs every block: its
  last-block protocol (aotc_split_last) sums the tile's partials and resets the
  counter for the next launch only when all the tile's blocks arrive; split-K
  keeps a launch within one wave (split_k.py), so running it in full is cheap;
- a kernel that writes an integer or bool tensor runs every block: such a
  tensor may be a gather/scatter index or a size downstream, and garbage there
  reads out of bounds;
- every other kernel's written parameters (its non-const pointers) are filled
  with finite random bytes before a sampled launch, so downstream kernels read
  finite values, not an older tensor's bits reinterpreted.
"""
from __future__ import annotations

import re

from aotc.errors import AotcError

# The C storage types of integer and bool tensors (aotc/ir/dtypes.py): possible indices.
# 1-byte types are left out: they are also the float8 and int8/int4 quantized storage types.
INDEX_TYPES = ("long long", "unsigned long long", "int", "unsigned int", "short", "unsigned short", "bool")
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)')
_POINTER = re.compile(r"^(const\s+)?([\w ]+?)\s*\*\s*(?:__restrict__\s*)?(\w+)$")


def kernel_policies(source: str) -> dict[str, dict]:
    """Per kernel in `source`: {"full": reason or None, "fill": [indices of written pointer params]}."""
    out = {}
    for name, params in _KERNEL.findall(source):
        fill, full = [], None
        for i, param in enumerate(p.strip() for p in params.split(",") if p.strip()):
            m = _POINTER.match(param)
            if not m or m.group(1):
                continue                     # a value argument or a const (read-only) pointer
            ctype, pname = m.group(2).strip(), m.group(3)
            if pname == "aotc_sem":
                full = "split-K tile counters"
            elif ctype in INDEX_TYPES and full is None:
                full = f"writes {ctype} ({pname})"
            fill.append(i)
        out[name] = {"full": full, "fill": [] if full else fill}
    return out


def sampling_env(blocks: int, seed: int, policies: dict[str, dict]) -> dict[str, str]:
    """The environment the profiling host build reads (cuda_host_profile.h)."""
    if blocks < 1:
        raise AotcError(f"--sample-blocks must be at least 1, not {blocks}")
    entries = []
    for name, pol in policies.items():
        if pol["full"]:
            entries.append(f"{name}:full")
        elif pol["fill"]:
            entries.append(f"{name}:{','.join(str(i) for i in pol['fill'])}")
    return {"AOTC_PROFILE_SAMPLE": f"{blocks} {seed}", "AOTC_PROFILE_SAMPLE_KERNELS": " ".join(entries)}


# The counters that are sums over blocks: scaled by blocks in the grid / blocks run. The unique
# sectors are not: blocks share inputs (a GEMM's B tile is read by a whole column of blocks), so the
# sampled blocks' unique sectors do not scale with the grid; a sampled launch reports none.
SUMMED = ("load_requests", "load_sectors", "load_bytes", "store_requests", "store_sectors", "store_bytes",
          "shared_requests", "shared_wavefronts", "shared_phases")


def scale_counters(c: dict) -> dict:
    """Launch counters `c` with its block sums scaled to the whole grid; `sampled_blocks` = [run, total]."""
    total = c["grid"][0] * c["grid"][1] * c["grid"][2]
    run = int(c.get("blocks_run", total))
    out = dict(c, sampled_blocks=[run, total])
    if 0 < run < total:
        for key in SUMMED:
            out[key] = round(c[key] * total / run)
    return out

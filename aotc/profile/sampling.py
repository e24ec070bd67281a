"""Block sampling for `aotc profile --sample-blocks N`: which launches may skip blocks, and the scaling after.

Emulating every thread block of a full-size batch-32 engine under instrumentation
takes hours; running N blocks per launch (the first, the last and one per stratum
between, cuda_host_profile.h; N tiles of a split-K launch) takes minutes, and a kernel's blocks run the same
code over different tiles, so ratios over the sampled blocks (efficiencies,
sectors per request, bank conflicts per access) stand for the launch and counts
scale by blocks in the grid / blocks run.

Skipping blocks is safe only where nothing depends on what the skipped blocks
would have written. From each kernel's signature and body in the engine's source:
- a kernel with split-K tile counters (`aotc_sem`) samples whole tiles: its
  last-block protocol (aotc_split_last) sums a tile's partials and resets the
  tile's counter for the next launch only when all the tile's blocks arrive, so
  each sampled tile runs all its splits (blockIdx.z % S in the GEMM templates,
  blockIdx.y in depthwise_project_split.part); one whose split layout is not
  recognized runs every block (split-K keeps a launch within one wave, split_k.py);
- a kernel that writes an integer or bool tensor runs every block: such a
  tensor may be a gather/scatter index or a size downstream, and garbage there
  reads out of bounds;
- every other kernel's written parameters (its non-const pointers) are filled
  with finite random bytes before a sampled launch, so downstream kernels read
  finite values, not an older tensor's bits reinterpreted. Each byte is in
  0x30..0x3f: as f32, f16, bf16, f64 or an 8-bit float every value is finite,
  positive and below 2, so a float a consumer converts to an index truncates
  to 0 or 1.

Accuracy: on the small models of tests/profile/test_engine_profile.py a
3-block sample keeps efficiencies and the bank-conflict share within 0.02 of
the full run, sectors per request and the scaled counts within 10%, the
predicted time within 2%.
"""
from __future__ import annotations

import re

from aotc.errors import AotcError

# The C storage types of integer and bool tensors (aotc/ir/dtypes.py): possible indices.
# 1-byte types are left out: they are also the float8 and int8/int4 quantized storage types.
INDEX_TYPES = ("long long", "unsigned long long", "int", "unsigned int", "short", "unsigned short", "bool")
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)')
_POINTER = re.compile(r"^(const\s+)?([\w ]+?)\s*\*\s*(?:__restrict__\s*)?(\w+)$")


_SPLIT_Z = re.compile(r"blockIdx\.z\s*%\s*(\d+)\b")
_SPLIT_Y = re.compile(r"aotc_split_last\(aotc_sem\s*\+\s*tile,\s*(\d+)u?\)")


def _split_layout(body: str) -> tuple[str, int] | None:
    """A split-K kernel's (grid axis, splits) from its body, or None when not recognized."""
    z, y = _SPLIT_Z.findall(body), _SPLIT_Y.findall(body)
    if len(set(z)) == 1 and not y:
        return "z", int(z[0])
    if len(set(y)) == 1 and not z:
        return "y", int(y[0])
    return None


def kernel_policies(source: str) -> dict[str, dict]:
    """Per kernel in `source`: {"full": reason or None, "split": (axis, splits) or None,
    "fill": [indices of the written pointer params a sampled launch fills]}."""
    out = {}
    found = list(_KERNEL.finditer(source))
    for at, m in enumerate(found):
        name, params = m.group(1), m.group(2)
        body = source[m.end():found[at + 1].start() if at + 1 < len(found) else len(source)]
        fill, full, split = [], None, None
        for i, param in enumerate(p.strip() for p in params.split(",") if p.strip()):
            pm = _POINTER.match(param)
            if not pm or pm.group(1):
                continue                     # a value argument or a const (read-only) pointer
            ctype, pname = pm.group(2).strip(), pm.group(3)
            if pname == "aotc_sem":
                split = _split_layout(body)
                if split is None and full is None:
                    full = "split-K tile counters in an unrecognized split layout"
            elif ctype in INDEX_TYPES and full is None:
                full = f"writes {ctype} ({pname})"
            if pname not in ("aotc_sem", "aotc_ws"):
                fill.append(i)
        out[name] = {"full": full, "split": None if full else split, "fill": [] if full else fill}
    return out


def sampling_env(blocks: int, seed: int, policies: dict[str, dict]) -> dict[str, str]:
    """The environment the profiling host build reads (cuda_host_profile.h)."""
    if blocks < 1:
        raise AotcError(f"--sample-blocks must be at least 1, not {blocks}")
    entries = []
    for name, pol in policies.items():
        fill = ",".join(str(i) for i in pol["fill"])
        if pol["full"]:
            entries.append(f"{name}:full")
        elif pol["split"]:
            entries.append(f"{name}:{pol['split'][0]}{pol['split'][1]}:{fill}")
        elif fill:
            entries.append(f"{name}:{fill}")
    return {"AOTC_PROFILE_SAMPLE": f"{blocks} {seed}", "AOTC_PROFILE_SAMPLE_KERNELS": " ".join(entries)}


# The counters that are sums over blocks: scaled by blocks in the grid / blocks run. The unique
# sectors are not: blocks share inputs (a GEMM's B tile is read by a whole column of blocks), so the
# sampled blocks' unique sectors do not scale with the grid; a sampled launch reports none.
SUMMED = ("load_requests", "load_sectors", "load_bytes", "store_requests", "store_sectors", "store_bytes",
          "atomic_requests", "atomic_sectors",
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

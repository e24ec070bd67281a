"""The GPU the fusion limits are sized for: how many SMs a launch should fill, how much split workspace.

Split-K (aotc.kernels.split_k) and the depthwise+pointwise kernel's channel
splits (rules/conv.py) both aim to give half the target's SMs a block and keep
their partial sums within L2; both read these numbers from here. `sm_fill` is
the profile model's fill term (aotc/profile/model.py), here so that the
kernel choosers below the profiler (the attention's key split) judge a grid
as the model does.
"""
import math
TARGET_SMS = 132         # H200 / H100 SXM; an A100 (108) is filled by the same split
MAX_WORKSPACE = 8 << 20  # bytes of f32 partials per launch (stays in L2: 50 MiB on an H100/H200)
PARTITIONS = 4           # warp schedulers (and tensor cores) an SM, sm_80 and sm_90
# FLOPs a byte at the tensor-core roofline's ridge: inspect's H200 peak over its bandwidth (790 TFLOP/s over
# 4.3 TB/s). A GEMM below it is memory-bound (profile/model.py's `bound`), so its store efficiency counts.
TC_RIDGE = 790e12 / 4.3e12


def sm_fill(grid, block=None, sms: int = TARGET_SMS) -> float:
    """The share of the SM partitions' time a grid keeps busy: U / (4S x ceil(U / 4S)) with U = blocks x
    min(warps a block, 4); 1 when the grid is unknown (a block of unknown size counts as 4 warps)."""
    blocks = math.prod(grid) if grid else 0
    if not blocks:
        return 1.0
    warps = min(PARTITIONS, -(-math.prod(block) // 32)) if block else PARTITIONS
    units, slots = blocks * warps, PARTITIONS * sms
    return units / (slots * math.ceil(units / slots))

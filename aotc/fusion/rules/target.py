"""The GPU the fusion limits are sized for: how many SMs a launch should fill, how much split workspace.

Split-K (aotc.kernels.split_k) and the depthwise+pointwise kernel's channel
splits (rules/conv.py) both aim to give half the target's SMs a block and keep
their partial sums within L2; both read these numbers from here.
"""
TARGET_SMS = 132         # H200 / H100 SXM; an A100 (108) is filled by the same split
MAX_WORKSPACE = 8 << 20  # bytes of f32 partials per launch (stays in L2: 50 MiB on an H100/H200)

"""Chain kernel rules: how big each phase of a chain of tiny anchors may be.

The chain kernel (templates/chain.cu) runs one block per image and holds each
phase's result in shared memory for the next, so a result may have at most
MAX_PER_IMAGE values per image; a pool phase streams its input through that one
block, so it reads at most MAX_POOLED_PER_IMAGE values per image (a larger map
keeps its own, wider pool kernel).
"""
MAX_PER_IMAGE = 2048      # values of one phase's result per image (8 KB of shared memory)
MAX_POOLED_PER_IMAGE = 1 << 16   # a pool phase reads at most this much per image (one block streams it)

"""Gated-epilogue rules: how many column blocks of one GEMM its epilogue may gate.

The GEMM kernel interleaves the B loads of a tile's k gate columns so one thread
holds all k gates of its output columns (kernels/codegen_gated.py); its
accumulator layout covers k = 2 (SwiGLU, a GRU's reset and update gates), 3 (a
GRU's three gates) and 4 (an LSTM cell).
"""
GATE_BLOCKS = (2, 3, 4)

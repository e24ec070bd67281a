"""Graph pattern finders shared by the passes and by fusion (a layer between ir and hlo_passes).

A finder says what a piece of graph is (attention: softmax(f(Q·Kᵀ))·V), never
whether a kernel can run it: the limits stay with the kernel families' fusion
rules (aotc.fusion.rules), so passes and fusion agree on the structure.
"""

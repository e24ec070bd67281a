"""ONNX control flow that static shapes allow: If with a condition known at import time.

aotc engines have no data-dependent control flow. An If whose condition is a
constant (or computable from constants, as in exported models that branch on
an attribute or a static shape) is folded away: the taken branch's nodes are
converted inline, reading outer-scope values by name. Any other If raises an
error naming the node.
"""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from aotc.importers.onnx_ops import register


@register("If")
def _if(ctx, ins, at):
    from aotc.importers.onnx import ONNX_DTYPES, convert_nodes
    cond = ctx.maybe_static(ins[0])
    if cond is None:
        raise ctx.fail("the condition depends on a model input; aotc folds If only when the condition "
                       "is a constant")
    branch = at["then_branch"] if bool(np.asarray(cond).reshape(-1)[0]) else at["else_branch"]
    env = dict(ctx.env)
    for t in branch.initializer:
        env[t.name] = ctx.b.constant(numpy_helper.to_array(t), name=t.name, dtype=ONNX_DTYPES[t.data_type])
    node = ctx.node
    convert_nodes(ctx, branch.node, env, {})
    ctx.node = node
    return [env[o.name] for o in branch.output]

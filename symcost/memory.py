"""Bytes a device holds while training (book Part 5, Question 2's accounting).

    >>> from symcost.program import derive_program
    >>> plan = derive_program("param W:int8[D_X, F]\\nOut[B_X, F] = In[B_X, D] *_D W[D, F]", mesh="X")
    >>> memory_per_device(plan)["params"]        # int8: one byte a parameter
    D*F/X

Each parameter counts its per-device block in its own dtype, plus ``grad_bytes`` a parameter for the
gradients and ``optimizer_bytes`` for the optimizer (Adam's two fp32 moments: 8); ``checkpoints`` names
activations kept per layer, counted at their layout (per device) times ``layers``.
"""
from __future__ import annotations

import sympy as sp

from .layout import bytes_per_device

ZERO = sp.Integer(0)


def memory_per_device(plan, params=None, *, param_bytes=None, grad_bytes=0, optimizer_bytes=8, checkpoints=(),
                      layers=1, sizes=None, saved=()) -> dict:
    """{params, gradients, optimizer, activations, total} in bytes per device (SymPy where symbolic).

    ``param_bytes`` None counts each parameter in its own dtype (``W:int8`` one byte); a number overrides
    it. ``saved`` adds activation layouts the backward pass reads (counted once each)."""
    layouts = {l.name: l for l in plan.layouts}
    env_sizes = dict(plan.sizes) if sizes is None else sizes
    # without names: the tensors named W..., the rule the backward pass uses for undeclared parameters
    names = list(params) if params is not None else [n for n in layouts if n[:1] == "W"]
    elems = held = ZERO
    for n in names:
        lay = layouts[n]
        b = sp.sympify(bytes_per_device(lay, plan.mesh, env_sizes))
        elems += b / lay.dtype_bytes
        held += b
    out = {"params": held if param_bytes is None else elems * param_bytes, "gradients": elems * grad_bytes,
           "optimizer": elems * optimizer_bytes}
    act = sum((sp.sympify(bytes_per_device(layouts[n], plan.mesh, env_sizes)) for n in checkpoints), ZERO) * layers
    act += sum((sp.sympify(bytes_per_device(t, plan.mesh, env_sizes)) for t in saved), ZERO)
    out["activations"] = act
    out["total"] = sum(out.values(), ZERO)
    return out

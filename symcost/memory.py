"""Bytes a device holds while training (book Part 5, Question 2's accounting).

    >>> from symcost.program import derive_program
    >>> plan = derive_program("param W:int8[D_X, F]\\nOut[B_X, F] = In[B_X, D] *_D W[D, F]", mesh="X")
    >>> memory_per_device(plan)["params"]        # int8: one byte a parameter
    D*F/X

Each parameter counts its per-device block in its own dtype, plus ``grad_bytes`` a parameter for the
gradients and ``optimizer_bytes`` for the optimizer (Adam's two fp32 moments: 8; :data:`OPTIMIZERS` is the one
table of what an optimizer keeps, with mixed precision's fp32 master copy); ``checkpoints`` names
activations kept per layer, counted at their layout (per device) times ``layers``.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from . import caching
from .layout import Layout, bytes_per_device

ZERO = sp.Integer(0)


def memory_per_device(plan, params=None, *, param_bytes=None, grad_bytes=0, optimizer_bytes=8, checkpoints=(),
                      layers=1, sizes=None, saved=(), optimizer: str | None = None) -> dict:
    """{params, gradients, optimizer, activations, total} in bytes per device (SymPy where symbolic).

    ``param_bytes`` None counts each parameter in its own dtype (``W:int8`` one byte); a number overrides
    it. ``saved`` adds activation layouts the backward pass reads (counted once each). ``optimizer`` names
    a row of :data:`OPTIMIZERS` (what ``derive --backward``, ``search`` and ``model --train`` hold: Adam in
    mixed precision, fp32 gradients 4, master copy and moments 12 bytes a parameter); without it
    ``grad_bytes`` and ``optimizer_bytes`` say (the book's Part 5 accounting: moments only, 8)."""
    if optimizer is not None:
        state = optimizer_state(optimizer)
        grad_bytes, optimizer_bytes = state.gradients, state.optimizer_bytes
    layouts = {l.name: l for l in plan.layouts}
    key = tuple(sorted(dict(plan.sizes if sizes is None else sizes).items()))
    held_by = caching.resolved(_held)

    def held_of(lay) -> sp.Expr:
        return held_by(lay.dims, lay.axes, lay.dtype, plan.mesh, key)
    # without names: the tensors named W..., the rule the backward pass uses for undeclared parameters
    names = list(params) if params is not None else [n for n in layouts if n[:1] == "W"]
    elems = held = ZERO
    for n in names:
        lay = layouts[n]
        b = held_of(lay)
        elems += b / lay.dtype_bytes
        held += b
    out = {"params": held if param_bytes is None else elems * param_bytes, "gradients": elems * grad_bytes,
           "optimizer": elems * optimizer_bytes}
    act = sum((held_of(layouts[n]) for n in checkpoints), ZERO) * layers
    act += sum((held_of(t) for t in saved), ZERO)
    out["activations"] = act
    out["total"] = sum(out.values(), ZERO)
    return out


@caching.memoize(maxsize=4096)
def _held(dims: tuple, axes: tuple, dtype: str, mesh, sizes: tuple) -> sp.Expr:
    """Bytes a device holds of a tensor laid out so (whatever its name: kept, since the candidates of a
    search hold the same few blocks of each tensor)."""
    return sp.sympify(bytes_per_device(Layout("", dims, axes, frozenset(), dtype), mesh, dict(sizes)))


@dataclass(frozen=True)
class OptimizerState:
    """Bytes a parameter costs a device beside its activations, by what they are: the weights the model
    runs, the gradients it accumulates, the master copy an optimizer steps in mixed precision, the
    optimizer's moments."""

    name: str
    weights: int
    gradients: int
    master: int
    moments: int

    @property
    def per_param(self) -> int:
        return self.weights + self.gradients + self.master + self.moments

    @property
    def optimizer_bytes(self) -> int:
        """What the optimizer holds: the master copy and the moments (what ZeRO stage 1 splits)."""
        return self.master + self.moments


#: the one table of optimizer state. Mixed-precision Adam (Megatron-LM, DeepSpeed; Rajbhandari et al.
#: 2020, ZeRO, section 3.1: "2 + 2 + 12 = 16 bytes"; Megatron keeps its gradients in fp32, 4): bf16
#: weights (2), fp32 gradients (4), an fp32 master copy of the weights (4) and Adam's two fp32 moments (8);
#: ``adam-fp32`` trains in fp32 (no master copy); ``sgd`` keeps one momentum.
OPTIMIZERS: dict[str, OptimizerState] = {o.name: o for o in (
    OptimizerState("adam", weights=2, gradients=4, master=4, moments=8),
    OptimizerState("adam-fp32", weights=4, gradients=4, master=0, moments=8),
    OptimizerState("sgd", weights=2, gradients=4, master=4, moments=4),
)}


def optimizer_state(name: str = "adam") -> OptimizerState:
    from .errors import UsageError
    state = OPTIMIZERS.get(name)
    if state is None:
        raise UsageError(f"unknown optimizer {name!r}; known: {', '.join(OPTIMIZERS)}")
    return state

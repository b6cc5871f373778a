"""Plans: the steps of a derivation, their totals, and the alternatives that were weighed.

A :class:`Plan` is what :func:`symcost.derive` returns::

    >>> import symcost
    >>> plan = symcost.derive("A[I, J_X] * B[J_X, K] -> C[I, K]", mesh={"X": 4})
    >>> [s.kind for s in plan.steps]
    ['Einsum', 'AllReduce']
    >>> plan.steps[1].bytes                 # V: the partial sums each device holds
    2*I*K

Each step (:class:`~symcost.trace.Step`) holds a typed operation; its costs, the plan's totals (one
pricing function, under the plan's overlap policy) and the printed forms are derived from it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np
import sympy as sp

from . import caching, symbols
from .alternatives import Alternative
from .einsum import LocalEinsum, gemm_shape
from .errors import UsageError
from .env import FIGURES, Env
from .layout import Padding, padding
from .mesh import Mesh
from .numeric import over
from .pricing import Totals, numeric_cost, policy, totals
from .printers import latex as latex_printer
from .printers import text as text_printer
from .solve import solve_plan
from .trace import Step

if TYPE_CHECKING:
    from .hardware import Hardware

ZERO = sp.Integer(0)


#: the totals :meth:`Plan.evaluate` takes by name
TOTALS = ("t_step", "t_math", "t_hbm", "t_comms", "t_comms_bw", "flops")


@dataclass(frozen=True)
class Plan:
    """A derivation: the steps in order, their totals, and the alternatives that were considered."""

    expression: str
    mesh: Mesh
    steps: tuple[Step, ...]
    hardware: Hardware | None = None
    sizes: tuple[tuple[str, int], ...] = ()
    alternatives: tuple[Alternative, ...] = ()
    overlap: object = True            # True (the book's policy), False (none), or a policy name
    compute_dtype: str = "bf16"
    objective: str = "time"
    layouts: tuple = field(default=(), compare=False, repr=False)   # final layout of every tensor
    memory: tuple = field(default=(), compare=False, repr=False)    # (name, bytes per device) when training
    notes: tuple = field(default=(), compare=False, repr=False)     # how the mesh sits on the hardware, padding
    residuals: tuple = field(default=(), compare=False, repr=False)  # layouts the backward pass reads (saved)
    ties: tuple = field(default=(), compare=False, repr=False)   # (statement, equally fast forward plans) of
                                                                 # each einsum that had several
    efficient: bool = False          # costs carry achieved efficiency (eta symbols; the preset's figures)

    # --------------------------------------------------------------- totals
    @property
    def policy(self) -> str:
        return policy(self.overlap)

    @cached_property
    def totals(self) -> Totals:
        env = Env.symbolic(self.mesh, efficiency=self.efficient)
        env.floors = self.hardware is None or bool(self.hardware.efficiency.t_kernel)   # T_kernel where it is not 0
        return totals((s.cost for s in self.steps), env, self.policy)

    @property
    def collectives(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.is_collective)

    flops = property(lambda self: self.totals.flops)
    t_math = property(lambda self: self.totals.t_math)
    t_hbm = property(lambda self: self.totals.t_hbm)
    t_comms = property(lambda self: self.totals.t_comms)
    t_comms_bw = property(lambda self: self.totals.t_comms_bw, doc="T_comms without latency floors")
    t_step = property(lambda self: self.totals.t_step)

    @property
    def comm_bytes(self) -> sp.Expr:
        """Sum of V over the collectives."""
        return sum((s.bytes for s in self.collectives), ZERO)

    def _tensors(self) -> list:
        """Every layout the plan's steps read and write, then each tensor's final one."""
        return [t for s in self.steps for t in (s.op.inputs + (s.op.output,) if isinstance(s.op, LocalEinsum)
                                                else (s.op.before, s.op.after))] + list(self.layouts)

    @cached_property
    def size_names(self) -> frozenset:
        """The names a size may bind: its tensors' dimensions, its mesh axes and their symbolic link counts."""
        return frozenset({d for t in self._tensors() for d in t.dims if not d.isdigit()}) | self.mesh.size_names

    @cached_property
    def padding(self) -> tuple[Padding, ...]:
        """Every block the plan pads: a bound dimension that does not divide by the axes that split it."""
        seen, out = set(), []
        sizes = dict(self.sizes)
        for t in self._tensors():
            for p in padding(t, self.mesh, sizes):
                if (p.tensor, p.dim, p.axes) not in seen:
                    seen.add((p.tensor, p.dim, p.axes))
                    out.append(p)
        return tuple(out)

    @property
    def memory_bytes(self) -> float | None:
        """The training memory a device holds, in bytes, where every size is bound."""
        total = dict(self.memory).get("total")
        return None if total is None else self.evaluate(total)

    @property
    def fits(self) -> bool | None:
        """Does the memory a device holds fit its HBM? None when unknown (no memory, no hardware, unbound)."""
        held = self.memory_bytes
        if held is None or self.hardware is None:
            return None
        return held <= self.hardware.hbm_bytes

    # --------------------------------------------------------------- numbers
    def bindings(self) -> dict:
        """Numbers for every bound symbol: dimensions, symbolic axes given by --dims, hardware."""
        subs = dict(_bindings(self.sizes, self.hardware, self.compute_dtype))
        if self.hardware is not None and self.efficient:
            subs.update(self._efficiency_bindings(self.hardware.efficiency))
        return subs

    def _efficiency_bindings(self, eff) -> dict:
        """Numbers for the eta symbols from the preset: ``eta_math`` is the FLOP-weighted harmonic mean of
        each einsum's rate (its size's table value times its waves' useful fraction, so the total math time
        is exact), the others are the preset's figures (``eff``: the preset's achieved efficiency)."""
        out = {symbols.eta_hbm: sp.Float(eff.hbm), symbols.eta_vec: sp.Float(eff.vector),
               symbols.t_kernel: sp.Float(eff.t_kernel)}
        for kind in symbols.LINK_KINDS:
            eta, lat = eff.net(kind)
            out[symbols.eta_net(kind)], out[symbols.t_net(kind)] = sp.Float(eta), sp.Float(lat)
        base = {symbols.dim(n): sp.Integer(v) for n, v in self.sizes} | {symbols.axis(n): sp.Integer(v)
                                                                          for n, v in self.sizes}
        work = time = 0.0
        env = Env.numeric(self.mesh, dict(self.sizes), efficiency=eff)
        for s in self.steps:
            if isinstance(s.op, LocalEinsum):
                f = sp.sympify(s.flops).xreplace(base)
                if f.free_symbols:
                    return out
                shape = gemm_shape(s.op, env) if len(s.op.inputs) == 2 else None   # bound FLOPs: bound blocks
                work, time = work + float(f), time + float(f) / env.eta_math(f, self.compute_dtype, shape)
        out[symbols.eta_math] = sp.Float(work / time if time else eff.math(1e15, self.compute_dtype))
        return out

    def evaluate(self, expr) -> float | None:
        """A number when every symbol of ``expr`` is bound, else None (said before substituting). ``expr``: a
        closed form (``plan.t_step``, a step's ``seconds``), a number, or the name of a total
        (:data:`TOTALS`, e.g. ``"t_step"``); text is never parsed."""
        if isinstance(expr, str):
            if expr not in TOTALS:
                raise UsageError(f"evaluate takes a closed form (e.g. plan.t_step) or the name of a total "
                                 f"({', '.join(TOTALS)}), not {expr!r}")
            expr = getattr(self, expr)
        expr, bound = sp.sympify(expr, strict=True), self.bindings()
        if not expr.free_symbols <= bound.keys():
            return None
        val = sp.sympify(expr.xreplace(bound))   # a bare symbol becomes its number
        if val.free_symbols:
            return None
        return float(val)

    def numbers(self) -> Totals | None:
        """The totals as numbers (None where a size is unbound): each step's closed form evaluated at
        :meth:`bindings` (kept, since the plans of a search share most of their steps) and totalled by the
        same function as the closed forms, so the numbers are those of :attr:`totals` without building it."""
        costs = self._step_costs()
        return None if costs is None else totals(costs, self._numeric_env(Env.numeric(self.mesh)), self.policy)

    def _numeric_env(self, env: Env) -> Env:
        """``env`` with the preset's efficiency where the plan is priced with it (its per-kernel floor is
        part of the totals)."""
        if self.efficient and self.hardware is not None:
            env.efficiency, env.achieved = self.hardware.efficiency, True
        return env

    def curves(self, name: str, values) -> Totals | None:
        """The totals over ``values`` of the symbol ``name`` (NumPy arrays; None where another size is
        unbound), every other symbol at its number: each step's closed form made a NumPy function (kept per
        step and values: the plans of a search share most of their steps) and totalled by the same function
        as the closed forms, so each total is :attr:`totals`' expression evaluated there."""
        xs = np.asarray(values, dtype=float)
        costs = self._step_costs(name, xs)
        if costs is None:
            return None
        out = totals(costs, self._numeric_env(Env.arrays(self.mesh)), self.policy)
        return Totals(*(np.broadcast_to(np.asarray(v, dtype=float), xs.shape) for v in out))   # 0: no such step

    def step_costs(self) -> list | None:
        """Each step's cost in numbers (:class:`~symcost.pricing.OpCost`, in step order; None where a size
        is unbound): what :meth:`numbers` totals, for callers that total parts of a plan."""
        return self._step_costs()

    def _step_costs(self, name: str | None = None, xs=None) -> list | None:
        """Each step's cost in numbers (over ``xs`` of the symbol ``name`` where given), or None."""
        figures = self.figures() if name is None else None
        priced = caching.resolved(numeric_cost)       # once, not at each of the plan's steps
        costs = [priced(s.op, s.mesh, s.sizes, s.critical, figures) for s in self.steps] \
            if figures is not None else [None] * len(self.steps)
        if all(c is not None for c in costs):
            return costs
        key = tuple(sorted((k.name, float(v)) for k, v in self.bindings().items() if k.name != name))
        if name is None:       # the steps not priced in numbers directly: their closed forms, evaluated
            costs = [c or _number_of(s.op, s.mesh, s.sizes, s.efficient, s.critical, key)
                     for c, s in zip(costs, self.steps)]
        else:
            values = xs.tobytes()
            costs = [_cost_over(s.cost, key, name, values) for s in self.steps]
        return None if any(c is None for c in costs) else costs

    def figures(self) -> tuple | None:
        """The preset's figures as ``(name, number)`` pairs where a step may be priced in numbers directly
        (:func:`~symcost.pricing.numeric_cost`): every figure the pricing reads is the preset's, every mesh
        axis and its links have a size, the costs carry no efficiency symbols. None otherwise."""
        if self.hardware is None or self.efficient:
            return None
        figures = self.hardware.bindings(self.compute_dtype)
        if any(k not in figures for k in FIGURES):
            return None
        if any(a.size is None or not isinstance(a.links, int) for a in self.mesh.axes):
            return None
        return tuple(sorted((k, float(v)) for k, v in figures.items()))

    def numeric(self) -> dict:
        """The totals that are numbers: :meth:`numbers`, else each closed form that :meth:`evaluate` can."""
        numbers = self.numbers()
        if numbers is not None:
            return {k: float(v) for k, v in numbers.as_dict().items()}
        out = {}
        for k, expr in self.totals.as_dict().items():
            v = self.evaluate(expr)
            if v is not None:
                out[k] = v
        return out

    def phase(self, phase: str) -> "Plan":
        """The plan restricted to the steps of one phase (``forward`` or ``backward``)."""
        return replace(self, steps=tuple(s for s in self.steps if s.phase == phase), alternatives=())

    def solve(self, symbol: str):
        """Critical values of ``symbol``: where T_math meets T_comms and T_hbm (see symcost.solve)."""
        return solve_plan(self, symbol)

    # --------------------------------------------------------------- output
    def to_dict(self) -> dict:
        mesh = {a.name: (a.size if a.size is not None else a.name) for a in self.mesh.axes}
        return {
            "expression": self.expression,
            "mesh": mesh,
            "links": self.mesh.links(),
            "hardware": getattr(self.hardware, "name", None),
            "steps": [s.as_dict() for s in self.steps],
            "totals": {k: str(v) for k, v in self.totals.as_dict().items()},
            "numeric": self.numeric(),
            "alternatives": [a.as_dict() for a in self.alternatives],
            "alternatives_cover": "forward" if any(s.phase == "backward" for s in self.steps) else "program",
            "overlap": self.policy != "none",
            "overlap_policy": self.policy,
            "objective": self.objective,
            "compute_dtype": self.compute_dtype,
            "efficiency": "achieved" if self.efficient else "ideal",
            **({"memory_per_device": {k: str(v) for k, v in self.memory}, "memory_bytes": self.memory_bytes,
                "fits": self.fits, "hbm_bytes": getattr(self.hardware, "hbm_bytes", None)} if self.memory else {}),
            "notes": list(self.notes),
            "padding": [p.as_dict() for p in self.padding],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_latex(self, **kw) -> str:
        return latex_printer.plan_to_latex(self, **kw)

    def to_markdown(self) -> str:
        return latex_printer.plan_to_markdown(self)

    def _repr_latex_(self) -> str:
        return latex_printer.plan_to_latex(self, fragment=True, math_only=True)

    def _repr_html_(self) -> str:
        return text_printer.plan_to_html(self)

    def __str__(self) -> str:
        return text_printer.render_plan(self)


@caching.memoize(maxsize=256)
def _bindings(sizes: tuple, hardware, compute_dtype) -> MappingProxyType:
    """:meth:`Plan.bindings` without the efficiency figures (kept: every candidate of a search binds the
    same sizes and chip, and each SymPy number made costs more than the lookup)."""
    subs = {}
    for name, v in sizes:  # SymPy numbers, so that a bare symbol replaced stays an expression
        subs[symbols.dim(name)] = sp.Integer(v)
        subs[symbols.axis(name)] = sp.Integer(v)
    if hardware is not None:
        for k, v in hardware.bindings(compute_dtype).items():
            subs[symbols.hw(k)] = sp.Float(v)
    return MappingProxyType(subs)


@caching.memoize(maxsize=65536)
def _number_of(op, mesh: Mesh, sizes: tuple, efficient: bool, critical: bool, subs: tuple):
    """A step's cost in numbers at ``subs`` (:func:`_cost_over` of :attr:`Step.cost`), found with one lookup:
    the plans of a search share most of their steps."""
    return _cost_over(Step(op, mesh, sizes=sizes, efficient=efficient, critical=critical).cost, subs)


@caching.memoize(maxsize=65536)
def _cost_over(cost, subs: tuple, name: str | None = None, values: bytes = b""):
    """An :class:`~symcost.pricing.OpCost` with every closed form a NumPy array over ``values`` (float64
    bytes) of the symbol ``name``, the others at ``subs`` (``(name, number)`` pairs); without ``name``, a
    float at ``subs``. None if one stays symbolic."""
    xs, numbers = (np.frombuffer(values) if name else 0.0), dict(subs)
    out: list = []
    for v in cost:
        if isinstance(v, (tuple, bool, str)):
            out.append(v)
            continue
        y = over(sp.sympify(v), numbers, name, xs)
        if y is None:
            return None
        out.append(y if name else float(y))
    return type(cost)(*out)


"""Plans: the steps of a derivation with their SymPy costs, totals and alternatives.

A :class:`Plan` is what :func:`symcost.derive` returns::

    >>> import symcost
    >>> plan = symcost.derive("A[I, J_X] * B[J_X, K] -> C[I, K]", mesh={"X": 4})
    >>> [s.kind for s in plan.steps]
    ['Einsum', 'AllReduce']
    >>> plan.steps[1].bytes                 # V: the partial sums each device holds
    2*I*K

Each :class:`Step` records what it does in the book's notation (``before`` -> ``after``), V or the bytes
read and written, FLOPs and seconds (latency floor included), and why it is there.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field

import sympy as sp

from . import symbols
from .cost import (Env, LocalEinsum, Move, collective_bandwidth_time, collective_bytes,
                   collective_time, einsum_times, smax)
from .mesh import Mesh

ZERO = sp.Integer(0)


@dataclass(frozen=True)
class Step:
    """One step of a plan: a collective (``kind`` AllGather, ...) or a local ``Einsum``."""

    kind: str
    axes: tuple[str, ...]
    tensor: str
    before: str
    after: str
    phase: str
    bytes: sp.Expr
    flops: sp.Expr
    seconds: sp.Expr
    t_math: sp.Expr = ZERO
    t_hbm: sp.Expr = ZERO
    t_comms: sp.Expr = ZERO
    why: str = ""
    op: Move | LocalEinsum | None = field(default=None, compare=False, repr=False)
    critical: bool = True   # on the critical path (the book marks weight gathers / reductions as off it)

    @property
    def is_collective(self) -> bool:
        return self.kind not in ("Einsum", "Slice")

    def signature(self) -> str:
        """The step in the book's notation, e.g. ``AllGather_X(A[I_X, J]) -> A[I, J]``."""
        if self.kind == "Einsum":
            return f"{self.before} -> {self.after}"
        from .notation import format_axes
        return f"{self.kind}{format_axes(self.axes)}({self.before}) -> {self.after}"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "axes": list(self.axes), "tensor": self.tensor, "before": self.before,
                "after": self.after, "phase": self.phase, "bytes": str(self.bytes),
                "flops": str(self.flops), "seconds": str(self.seconds), "why": self.why,
                "critical": self.critical}


@dataclass(frozen=True)
class Alternative:
    """Another plan the rewriter considered, its communication time and when it would win."""

    summary: str
    t_comms: sp.Expr
    t_step: sp.Expr
    steps: tuple[Step, ...] = field(default=(), compare=False, repr=False)
    chosen: tuple[Step, ...] = field(default=(), compare=False, repr=False)
    mesh: Mesh | None = field(default=None, compare=False, repr=False)

    @property
    def wins_when(self) -> str | None:
        """When this alternative moves less data than the chosen plan (worked out on first use)."""
        return _wins_when_cached(tuple(s.op for s in self.steps), tuple(s.op for s in self.chosen), self.mesh)

    @property
    def comm_bytes(self) -> sp.Expr:
        """Sum of V over the alternative's collectives."""
        return sum((s.bytes for s in self.steps if s.is_collective), ZERO)

    def as_dict(self) -> dict:
        return {"summary": self.summary, "t_comms": str(self.t_comms), "t_step": str(self.t_step),
                "comm_bytes": str(self.comm_bytes), "wins_when": self.wins_when}


def build_step(op, env: Env, phase: str = "forward", why: str = "") -> Step:
    """The symbolic :class:`Step` of a move or local einsum (steps are values: built once, then reused)."""
    return _build_step(op, env.mesh, phase, why)


@functools.lru_cache(maxsize=8192)
def _build_step(op, mesh: Mesh, phase: str, why: str) -> Step:
    env = Env.symbolic(mesh)
    if isinstance(op, LocalEinsum):
        flops, nbytes, t_math, t_hbm = einsum_times(op, env)
        used = tuple(a for a in mesh.names if any(a in ax for ax in op.axes))
        return Step("Einsum", used, op.output.name, " * ".join(t.render(mesh) for t in op.inputs),
                    op.output.render(mesh), phase, nbytes, flops,
                    smax(t_math, t_hbm), t_math, t_hbm, ZERO, why, op)
    v = collective_bytes(op, env)
    t = collective_time(op, env)
    return Step(op.kind, op.axes, op.before.name, op.before.render(mesh), op.after.render(mesh), phase,
                v, ZERO, t, ZERO, ZERO, t, why, op)


def summarize(steps) -> str:
    """``AllGather_Y(In) ; einsum ; ReduceScatter_Y(Out)``: the collectives and einsums in order."""
    from .notation import format_axes
    parts = []
    for s in steps:
        if s.kind == "Einsum":
            parts.append(f"einsum -> {s.after}")
        elif s.kind != "Slice":
            parts.append(f"{s.kind}{format_axes(s.axes)}({s.tensor})")
    return "; ".join(parts) if parts else "local only"


def totals(steps, mesh: Mesh, overlap: bool = True) -> dict:
    """t_math, t_hbm, t_comms and t_step of a sequence of steps (DESIGN section 2's overlap policy:
    a step's time is the max of its three; collectives on different mesh axes run concurrently;
    without overlap every step's time adds up)."""
    flops = sum((s.flops for s in steps), ZERO)
    t_math = sum((s.t_math for s in steps), ZERO)
    t_hbm = sum((s.t_hbm for s in steps), ZERO)
    comm_steps = [s for s in steps if s.t_comms != 0]
    if overlap:
        per_axis = {}
        for s in comm_steps:
            for a in s.axes:
                per_axis[a] = per_axis.get(a, ZERO) + s.t_comms
        t_comms = smax(*per_axis.values()) if per_axis else ZERO
        t_step = smax(t_math, t_hbm, t_comms)
    else:
        t_comms = sum((s.t_comms for s in comm_steps), ZERO)
        t_step = sum((s.seconds for s in steps), ZERO)
    return {"flops": flops, "t_math": t_math, "t_hbm": t_hbm, "t_comms": t_comms, "t_step": t_step}


def comms_bandwidth(steps, env: Env):
    """Sum of the throughput terms of the collectives (no latency floor)."""
    return sum((collective_bandwidth_time(s.op, env) for s in steps if isinstance(s.op, Move)), ZERO)


@functools.lru_cache(maxsize=4096)
def _wins_when_cached(alt_ops, best_ops, mesh) -> str | None:
    env = Env.symbolic(mesh)
    wrap = lambda ops: [Step("", (), "", "", "", "", ZERO, ZERO, ZERO, op=o) for o in ops]
    return wins_when(wrap(alt_ops), wrap(best_ops), env)


def wins_when(alt_steps, best_steps, env: Env) -> str | None:
    """When would ``alt`` move less data than ``best``? e.g. ``2*B < D`` (book Part 3 Question 4)."""
    a = comms_bandwidth(alt_steps, env)
    b = comms_bandwidth(best_steps, env)
    if a == 0 and b == 0:
        return None
    if a == 0:
        return "always (it needs no communication)"
    if b == 0:
        return None
    ratio = sp.cancel(sp.together(a / b))
    if ratio.is_number:
        return None if ratio >= 1 else "always"
    num, den = sp.fraction(ratio)
    diff = sp.expand(num - den)     # alt < best  <=>  diff < 0: cancel the terms both sides share
    terms = sp.Add.make_args(diff)
    lhs = sp.Add(*[t for t in terms if t.could_extract_minus_sign() is False])
    rhs = -sp.Add(*[t for t in terms if t.could_extract_minus_sign() is True])
    g = sp.gcd_terms(sp.factor_terms(lhs)), sp.factor_terms(rhs)
    common = sp.gcd(*g) if all(x != 0 for x in g) else 1
    lhs, rhs = sp.cancel(g[0] / common), sp.cancel(g[1] / common)
    cond = sp.Lt(lhs, rhs)
    if cond is sp.true:
        return "always"
    if cond is sp.false:
        return None
    return str(cond)


@dataclass(frozen=True)
class Plan:
    """A derivation: the steps in order, their totals, and the alternatives that were considered."""

    expression: str
    mesh: Mesh
    steps: tuple[Step, ...]
    hardware: object = None
    sizes: tuple[tuple[str, int], ...] = ()
    alternatives: tuple[Alternative, ...] = ()
    overlap: bool = True
    compute_dtype: str = "bf16"
    objective: str = "time"
    layouts: tuple = field(default=(), compare=False, repr=False)   # final layout of every tensor
    memory: tuple = field(default=(), compare=False, repr=False)    # (name, bytes per device) when training

    # --------------------------------------------------------------- totals
    @property
    def _totals(self) -> dict:
        cached = self.__dict__.get("_cached_totals")
        if cached is None:
            cached = totals(self.steps, self.mesh, self.overlap)
            object.__setattr__(self, "_cached_totals", cached)
        return cached

    @property
    def collectives(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.is_collective)

    @property
    def flops(self) -> sp.Expr:
        return self._totals["flops"]

    @property
    def t_math(self) -> sp.Expr:
        return self._totals["t_math"]

    @property
    def t_hbm(self) -> sp.Expr:
        return self._totals["t_hbm"]

    @property
    def t_comms(self) -> sp.Expr:
        return self._totals["t_comms"]

    @property
    def t_step(self) -> sp.Expr:
        return self._totals["t_step"]

    @property
    def comm_bytes(self) -> sp.Expr:
        """Sum of V over the collectives."""
        return sum((s.bytes for s in self.collectives), ZERO)

    # --------------------------------------------------------------- numbers
    def bindings(self) -> dict:
        """Numbers for every bound symbol: dimensions, symbolic axes given by --dims, hardware."""
        subs = {}
        for name, v in self.sizes:  # SymPy numbers, so that a bare symbol replaced stays an expression
            subs[symbols.dim(name)] = sp.Integer(v)
            subs[symbols.axis(name)] = sp.Integer(v)
        if self.hardware is not None:
            for k, v in self.hardware.bindings(self.compute_dtype).items():
                subs[symbols.hw(k)] = sp.Float(v)
        return subs

    def evaluate(self, expr) -> float | None:
        """A number when every symbol of ``expr`` is bound, else None."""
        val = sp.sympify(sp.sympify(expr).xreplace(self.bindings()))   # a bare symbol becomes its number
        if val.free_symbols:
            return None
        return float(val)

    def numeric(self) -> dict:
        out = {}
        for k in ("flops", "t_math", "t_hbm", "t_comms", "t_step"):
            v = self.evaluate(self._totals[k])
            if v is not None:
                out[k] = v
        return out

    def phase(self, phase: str) -> "Plan":
        """The plan restricted to the steps of one phase (``forward`` or ``backward``)."""
        from dataclasses import replace
        return replace(self, steps=tuple(s for s in self.steps if s.phase == phase), alternatives=())

    def solve(self, symbol: str):
        """Critical values of ``symbol``: where T_math meets T_comms and T_hbm (see symcost.solve)."""
        from .solve import solve_plan
        return solve_plan(self, symbol)

    # --------------------------------------------------------------- output
    def to_dict(self) -> dict:
        mesh = {a.name: (a.size if a.size is not None else a.name) for a in self.mesh.axes}
        t = self._totals
        return {
            "expression": self.expression,
            "mesh": mesh,
            "hardware": getattr(self.hardware, "name", None),
            "steps": [s.as_dict() for s in self.steps],
            "totals": {k: str(t[k]) for k in ("flops", "t_math", "t_hbm", "t_comms", "t_step")},
            "numeric": self.numeric(),
            "alternatives": [a.as_dict() for a in self.alternatives],
            "overlap": self.overlap,
            "objective": self.objective,
            "compute_dtype": self.compute_dtype,
            **({"memory_per_device": {k: str(v) for k, v in self.memory}} if self.memory else {}),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_latex(self, **kw) -> str:
        from .export.latex import plan_to_latex
        return plan_to_latex(self, **kw)

    def to_markdown(self) -> str:
        from .export.latex import plan_to_markdown
        return plan_to_markdown(self)

    def _repr_latex_(self) -> str:
        from .export.latex import plan_to_latex
        return plan_to_latex(self, fragment=True, math_only=True)

    def _repr_html_(self) -> str:
        import html
        rows = "".join(f"<tr><td>{i}</td><td><code>{html.escape(s.signature())}</code></td>"
                       f"<td><code>{html.escape(str(s.bytes))}</code></td>"
                       f"<td><code>{html.escape(str(s.seconds))}</code></td></tr>"
                       for i, s in enumerate(self.steps, 1))
        return (f"<p><b>{html.escape(self.expression)}</b> on <code>{html.escape(str(self.mesh))}</code></p>"
                f"<table><tr><th>#</th><th>step</th><th>bytes</th><th>time</th></tr>{rows}</table>"
                f"<p>T_step = <code>{html.escape(str(self.t_step))}</code></p>")

    def __str__(self) -> str:
        from .report import render_plan
        return render_plan(self)

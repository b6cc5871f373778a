"""Pricing: each operation's cost, and the one function that totals a plan under an overlap policy.

    >>> from symcost.env import Env
    >>> from symcost.layout import Layout
    >>> from symcost.mesh import parse_mesh
    >>> from symcost.collectives import Move
    >>> mesh = parse_mesh("X=4,Y=4,Z=4")
    >>> a = Layout.of("A", "BD", [("X",), ("Y",)])
    >>> env = Env.numeric(mesh, {"B": 1024, "D": 4096}, {"W_ici": 9e10, "T_min": 1e-6})
    >>> round(op_cost(Move("AllGather", ("X",), a, a.with_dim_axes("B", ())), env).t_comms * 1e6, 1)
    23.3

(the book's Part 3 Question 2: 2 B D / (Y W_ici) on a v4p 4x4x4). Overlap policies (:data:`OVERLAPS`):

- ``program`` (the book's, the default): compute, HBM traffic and communication overlap across the
  whole program, and collectives on different mesh axes run concurrently:
  T_step = max(sum T_math, sum T_hbm, max over axes of that axis's collective time);
- ``step``: each einsum is bound by the larger of its own T_math and T_hbm (einsums run one after
  another), collectives still overlap with them, concurrently by axis;
- ``none``: every step's time adds up;
- ``critical`` (how a training framework runs a layer): operations on the critical path -- einsums,
  elementwise work and the collectives a step waits for -- run one after another; the collectives off it
  (weight gathers that can be prefetched, gradient reductions, and whatever a framework overlaps) run
  beside them, concurrently by axis: T_step = max(sum of critical steps, max over axes of the rest).

Under every policy a step is hidden only under work it does not depend on (:func:`depends_on`: collectives
that feed each other add up; under ``step`` the dependency graph's longest path bounds the step), and with
a preset's per-kernel floor every kernel pays ``t_kernel`` (:func:`kernel_starts`, :func:`totals`).

Elementwise operations are priced like einsums, on the vector unit: max(vector FLOPs / C_vec,
bytes / W_hbm). With an :class:`~symcost.env.Env` that carries efficiency, each time is divided by the
fraction of the figure that is reached (``eta_math`` by the size of the matmul and its tiles' waves,
``eta_hbm``, ``eta_vec``, ``eta_net_<kind>``) and each collective pays its link kind's fixed latency
``T_net_<kind>``.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from . import caching
from . import dtypes, elementwise
from .einsum import LocalEinsum, flops, gemm_shape, hbm_bytes
from .dependencies import chains_may_exceed, collective_chains, depends_on, longest_path
from .env import Env
from .errors import UsageError
from .mesh import Mesh

OVERLAPS = ("program", "step", "none", "critical")


#: a count or a time: a number, or a SymPy expression where a size or a figure is a symbol (SymPy has no
#: types a checker reads)
Quantity = Any


class OpCost(NamedTuple):
    """One operation's cost on one device: FLOPs and bytes (V for a collective; read + written for an
    einsum), T_math, T_hbm, and a collective's latency floor and throughput term."""

    flops: Quantity
    bytes: Quantity
    t_math: Quantity
    t_hbm: Quantity
    latency: Quantity
    throughput: Quantity
    axes: tuple[str, ...]     # the channels it occupies: its mesh axes (a host transfer: 'pcie')
    local: bool                # an einsum, elementwise work or a local slice, not a collective
    t_comms: Quantity
    seconds: Quantity
    vector_flops: Quantity = 0   # elementwise FLOPs (not counted in ``flops``, which are the matmuls')
    critical: bool = True      # on the critical path (the ``critical`` policy runs the others beside it)
    reads: tuple = ()          # the layouts it reads and writes: the plan's dependency graph (see ``totals``)
    writes: tuple = ()
    kernel: str = ""           # what runs: "einsum", "elementwise", "gather" (a dispatch: elementwise work
                               # with a kernel of its own), "collective", "fused" (inside the kernel
                               # of the step that made its on-chip operand) or "" (a view: no kernel)


def compute_dtype(e: LocalEinsum) -> str:
    """The dtype an einsum's FLOPs run in: its widest operand."""
    out = e.inputs[0].dtype
    for t in e.inputs[1:]:
        out = dtypes.wider(out, t.dtype)
    return out


def op_cost(op, env: Env, on_chip=frozenset()) -> OpCost:
    """The cost of a move, a local einsum or elementwise work in ``env`` (floats or SymPy)."""
    z = env.zero
    if isinstance(op, LocalEinsum):
        f, b = flops(op, env), hbm_bytes(op, env, on_chip)
        tm, th = f / env.C, b / env.W_hbm
        if env.achieved:
            shape = gemm_shape(op, env) if len(op.inputs) == 2 else None
            tm, th = tm / env.eta_math(f, compute_dtype(op), shape), th / env.eta_hbm
        fused = any(t.name in on_chip for t in op.inputs)    # reads a tile its producer keeps on chip
        return OpCost(f, b, tm, th, z, z, (), True, z, env.max(tm, th), reads=op.inputs, writes=(op.output,),
                      kernel="fused" if fused else "einsum")
    if isinstance(op, elementwise.Elementwise):
        vf, b = elementwise.vector_flops(op, env), elementwise.hbm_bytes(op, env, on_chip)
        tm, th = vf / env.C_vec, b / env.W_hbm
        if env.achieved:
            tm, th = tm / env.eta_vec, th / env.eta_hbm
        kind = "" if op.rule.free else "gather" if op.rule.broadcasts else "elementwise"    # a view: no kernel
        return OpCost(z, b, tm, th, z, z, (), True, z, env.max(tm, th), vf, reads=op.inputs, writes=(op.output,),
                      kernel=kind)
    lat, bw = op.rule.link_time(op, env)
    t = env.max(lat, bw)
    alone = op.axes and env.group_size(op.axes) == 1     # over axes of one device: a no-op, in numbers and closed form
    if alone:
        return OpCost(z, op.rule.volume(op, env), z, z, z, z, op.rule.channels(op), True, z, z,
                      reads=(op.before,), writes=(op.after,), kernel="")
    if env.achieved and op.rule.communicates and op.axes:
        eta, fixed = env.net(env.axis_info(op.axes[0]).kind, op.kind)
        bw = bw / eta
        t = env.max(lat, bw) + fixed
        lat = lat + fixed
    return OpCost(z, op.rule.volume(op, env), z, z, lat, bw, op.rule.channels(op), not op.rule.communicates, t, t,
                  reads=(op.before,), writes=(op.after,), kernel="collective" if op.rule.communicates else "")


def masked_half(c: OpCost, env: Env) -> OpCost:
    """``c`` run by a kernel that skips the blocks a causal mask hides (the attention scores above the
    diagonal): half its FLOPs and vector FLOPs, every byte still read and written."""
    tm = c.t_math / 2
    return c._replace(flops=c.flops / 2, vector_flops=c.vector_flops / 2, t_math=tm, seconds=env.max(tm, c.t_hbm))


@caching.memoize(maxsize=8192)
def symbolic_cost(op, mesh: Mesh, padded=frozenset(), efficiency: bool = False) -> OpCost:
    """The closed-form cost of ``op`` on ``mesh`` (kept: plans share their steps); ``padded`` names the
    (dimension, axes) whose blocks are rounded up (see :func:`padded_blocks`); ``efficiency`` keeps the
    achieved-efficiency symbols in it."""
    return op_cost(op, Env.symbolic(mesh, padded, efficiency=efficiency))


@caching.memoize(maxsize=65536)
def numeric_cost(op, mesh: Mesh, sizes: tuple, critical: bool, figures: tuple):
    """A step's cost priced in numbers by the one pricing function (:func:`op_cost`, which the closed form
    is too) at the bound sizes and the preset's figures, without building the closed form (kept: a search
    needs only the numbers, and its plans share most steps). None (price the closed form instead) where a
    dimension it reads is not bound, or where a collective runs over axes of one device (a no-op,
    as its closed form says too)."""
    bound = dict(sizes)
    if any(not d.isdigit() and d not in bound for d in _dims_read(op)):
        return None
    local = isinstance(op, (LocalEinsum, elementwise.Elementwise))
    if not local and op.axes and all(mesh.axis(a).size == 1 for a in op.axes):
        return None
    c = op_cost(op, _numeric_env(mesh, sizes, figures))
    return c if critical or c.local else c._replace(critical=False)


def _dims_read(op) -> set:
    """The dimensions an operation's cost may read: its own and its tensors'."""
    local = isinstance(op, (LocalEinsum, elementwise.Elementwise))
    tensors = op.inputs + (op.output,) if local else (op.before, op.after)
    return set(getattr(op, "dims", ())) | {d for t in tensors for d in t.dims}


@caching.memoize(maxsize=64, holds_state=True)
def _numeric_env(mesh: Mesh, sizes: tuple, figures: tuple) -> Env:
    """The numeric pricing context of a plan's steps (kept: it keeps its blocks' sizes as it prices)."""
    return Env.numeric(mesh, dict(sizes), dict(figures))


def padded_blocks(op, mesh: Mesh, sizes) -> frozenset:
    """The (dimension, axes) of ``op`` whose bound size does not divide by the axes' devices."""
    sizes = dict(sizes)
    if not sizes:
        return frozenset()
    if isinstance(op, LocalEinsum):
        pairs = set(zip(op.dims, op.axes)) | {p for t in op.inputs + (op.output,) for p in zip(t.dims, t.axes)}
    elif hasattr(op, "output"):   # elementwise work
        pairs = {p for t in op.inputs + (op.output,) for p in zip(t.dims, t.axes)}
    else:
        pairs = {p for t in (op.before, op.after) for p in zip(t.dims, t.axes)}
    out = set()
    for d, axes in pairs:
        n = int(d) if d.isdigit() else sizes.get(d)
        known = [s for s in (mesh.axis(a).size for a in axes) if s is not None]
        if not axes or n is None or len(known) < len(axes):
            continue
        k = 1
        for size in known:
            k *= size
        if n % k:
            out.add((d, tuple(axes)))
    return frozenset(out)


class Totals(NamedTuple):
    flops: object
    t_math: object
    t_hbm: object
    t_comms: object          # latency floors included
    t_comms_bw: object       # throughput terms only (what critical values are solved from)
    t_step: object
    t_einsums: object        # the einsums one after another, each bound by max(T_math, T_hbm)

    def as_dict(self) -> dict:
        """The five totals a plan reports."""
        return {"flops": self.flops, "t_math": self.t_math, "t_hbm": self.t_hbm, "t_comms": self.t_comms,
                "t_step": self.t_step}


def kernel_starts(costs, deps=None) -> list[bool]:
    """Which operations launch a kernel, under the fusion policy of XLA and Inductor: an einsum (a library
    matmul) and a collective each launch one; elementwise work launches one unless the last result it
    waits on is elementwise work, whose kernel it joins (loop fusion: a residual add and the norm after
    it, SiLU and the gate's product, are one kernel; an add that waits on a matmul is not); a step that
    reads a tile kept on chip (flash attention's probabilities) is part of the kernel that made it; a view
    launches nothing and is seen through (elementwise work after a view of elementwise work joins its
    kernel, as XLA fuses through a bitcast); a dispatch (an MoE layer's permutation, a gather by the
    router's choice) launches its own, as Megatron-Core's permute does."""
    if deps is None:                       # one operation alone (what the planner weighs) waits on nothing
        deps = [()] if len(costs) == 1 else depends_on(costs)
    out: list = []
    made: list[str] = []                   # the kind of kernel each result comes out of, seen through views
    for c, before in zip(costs, deps):
        last = made[max(before)] if before else ""
        if c.kernel == "elementwise":      # joins its producer's kernel when that is the last thing it waits on
            out.append(last != "elementwise")
        else:
            out.append(c.kernel in ("einsum", "collective", "gather"))
        made.append(last if c.kernel == "" else c.kernel)
    return out


def _floored(c: OpCost, tk) -> OpCost:
    """``c`` with the per-kernel floor added: the launch and tail every kernel pays beside its work (a
    kernel with no work to speak of costs the floor)."""
    if c.local:
        return c._replace(seconds=c.seconds + tk)
    return c._replace(seconds=c.seconds + tk, t_comms=c.t_comms + tk, latency=c.latency + tk)


def alone(c: OpCost, env: Env) -> OpCost:
    """One operation's cost as :func:`totals` counts it when nothing runs beside it: with the per-kernel floor
    where it launches a kernel (what the planner weighs a move or an einsum by, so that its choices and the
    plan's totals price the same kernels)."""
    tk = env.t_kernel
    if tk == 0 or not kernel_starts([c])[0]:
        return c
    return _floored(c, tk)


def floored(costs, env: Env) -> list:
    """``costs`` with the per-kernel floor (``env.t_kernel``) added to each operation that launches a kernel
    (:func:`kernel_starts`), as :func:`totals` counts them; unchanged where the preset has no floor."""
    costs = list(costs)
    tk = env.t_kernel
    if tk == 0:
        return costs
    return [_floored(c, tk) if k else c for c, k in zip(costs, kernel_starts(costs))]


def totals(costs, env: Env, overlap: str = "program") -> Totals:
    """Totals of a sequence of :class:`OpCost` under an overlap policy (see the module docstring). The
    one place a plan's step time is decided: the ranker, plans, solve and the serving models call it.

    A step is hidden only under work it does not depend on (:mod:`symcost.dependencies`): under
    ``program`` a chain of collectives feeding each other is a sum (``collective_chains``); under ``step`` so
    is the longest path of the dependency graph, where a collective between two einsums (a tensor-parallel
    AllReduce) adds its latency to them (:func:`~symcost.dependencies.longest_path`).

    With a per-kernel floor (``env.t_kernel``, from the preset's achieved efficiency) every kernel
    (:func:`kernel_starts`) pays it beside its work, the kernels run one after another on the device, and
    a collective's latency -- unlike its bandwidth term -- is never hidden under other work: under
    ``program`` the step is at least the kernels' sum plus every collective's latency."""
    if overlap not in OVERLAPS:
        raise ValueError(f"overlap must be one of {OVERLAPS}, not {overlap!r}")
    costs = floored(costs, env)
    z = env.zero
    floors = not (env.t_kernel == 0)
    fl = tm = th = local = serial = z
    per_axis: dict[str, list] = {}        # axis -> [time, throughput term] of its collectives
    comm, comm_bw = z, z
    path = z                              # the critical path
    beside: dict[str, Quantity] = {}      # axis -> the time of what runs beside it
    critical = overlap == "critical"      # the path and what runs beside it: read by that policy alone
    for c in costs:
        fl, tm, th, serial = fl + c.flops, tm + c.t_math, th + c.t_hbm, serial + c.seconds
        if not critical:
            pass
        elif c.local or c.critical:
            path = path + c.seconds
        else:
            for a in c.axes:
                beside[a] = beside.get(a, z) + c.t_comms
        if c.local:
            local = local + c.seconds
            continue
        comm, comm_bw = comm + c.t_comms, comm_bw + c.throughput
        for a in c.axes:
            acc = per_axis.get(a)
            if acc is None:
                acc = per_axis[a] = [z, z]
            acc[0], acc[1] = acc[0] + c.t_comms, acc[1] + c.throughput
    if overlap == "none":
        return Totals(fl, tm, th, comm, comm_bw, serial, local)
    tc = env.max(*(v[0] for v in per_axis.values())) if per_axis else z
    tc_bw = env.max(*(v[1] for v in per_axis.values())) if per_axis else z
    if overlap == "critical":
        return Totals(fl, tm, th, tc, tc_bw, env.max(path, *(v for v in beside.values())), local)
    if overlap == "program":
        stream = (local + env.total(c.latency for c in costs if not c.local),) if floors else ()
        step = env.max(tm, th, tc, *stream)
        if len(per_axis) > 1 and not _below(costs, comm, step, env):
            step = env.max(step, *collective_chains(costs, depends_on(costs), env))
        return Totals(fl, tm, th, tc, tc_bw, step, local)
    deps = depends_on(costs) if per_axis else []
    step = env.max(local, tc, *((longest_path(costs, deps, env),) if per_axis else ()),
                   *(collective_chains(costs, deps, env) if len(per_axis) > 1 else ()))
    return Totals(fl, tm, th, tc, tc_bw, step, local)


def step_floor(costs, env: Env):
    """The least step time :func:`totals` gives these costs under ``program`` without a per-kernel floor:
    ``max(T_math, T_hbm, the busiest axis's communication)``, each summed in the order and the way totals
    sums it, so the step time (their max with the chains of collectives) is never below it, to the bit."""
    z = env.zero
    tm = th = z
    per_axis: dict[str, object] = {}
    for c in costs:
        tm, th = tm + c.t_math, th + c.t_hbm
        if not c.local:
            for a in c.axes:
                per_axis[a] = per_axis.get(a, z) + c.t_comms
    return env.max(tm, th, env.max(*per_axis.values()) if per_axis else z)


def _below(costs, comm, step, env: Env) -> bool:
    """Whether no chain of collectives can be longer than ``step``: a chain's time is a sum of some of the
    collectives' times, in program order, never more than ``comm``, their sum in the same order (rounding
    to nearest is monotone and the times are not negative), nor than the sum of the group of collectives
    that feed one another it lies in (:func:`~symcost.dependencies.chains_may_exceed`); where ``step`` is
    at least either, it is the maximum with the chains too, and they need not be traced. Numbers only (a
    closed form keeps its chains)."""
    if not env.is_numeric or env._elementwise:
        return False
    return comm <= step or not chains_may_exceed(costs, step)


def policy(overlap) -> str:
    """``True`` / ``False`` (the command line's --no-overlap) or a policy name, as a policy name."""
    if overlap is True:
        return "program"
    if overlap is False:
        return "none"
    if overlap not in OVERLAPS:
        raise UsageError(f"overlap must be True, False or one of {', '.join(OVERLAPS)}, not {overlap!r}")
    return str(overlap)

"""``symcost measure``: run what symcost derived on the devices and set the time beside the prediction.

A plan runs through the lowering ``export-jax`` writes (each move through its rule's ``lower_jax``; here the
einsums keep the tensors' dtypes) as one jitted ``shard_map`` over random inputs in their layouts; each
step then runs alone on its own inputs, so that a step's time stands beside the step's prediction.

    result = measure_plan(symcost.derive(expr, mesh="X=8", dims="B=8192,D=8192,F=28672", hw="my-h100.toml"))
    result.ratio                    # measured / predicted
    result.as_dict()                # the --json contract

The prediction is the plan's own: its ``t_step`` under its overlap policy (the book's by default:
compute, memory and communication overlap), each step's ``seconds``, at the preset the plan was derived
with. ``serial`` (every step one after another) is reported beside it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import UsageError
from . import programs, runtime
from .timing import Timing, time_call


@dataclass(frozen=True)
class StepResult:
    """One step run alone: what it is, its measured time and its predicted time."""

    signature: str
    kind: str
    timing: Timing | None
    predicted: float | None
    phase: str = "forward"
    identity: bool = False      # run as the identity (rotary embedding, dropout: see export-jax): no ratio

    @property
    def ratio(self) -> float | None:
        if self.timing is None or not self.predicted or self.identity:
            return None
        return self.timing.median / self.predicted

    def as_dict(self) -> dict:
        return {"step": self.signature, "kind": self.kind, "phase": self.phase, "identity": self.identity,
                "measured": _timing(self.timing), "predicted": {"seconds": self.predicted}, "ratio": self.ratio}


def _timing(t: Timing | None) -> dict | None:
    return None if t is None else {"seconds": t.median, "runs": t.runs, "spread": t.spread, "inner": t.inner}


@dataclass(frozen=True)
class Measurement:
    """A run of a plan or a model against its prediction (``as_dict`` is the ``--json`` contract)."""

    what: dict
    timing: Timing
    predicted: float
    policy: str
    serial: float | None
    device: runtime.DeviceInfo
    hardware: str
    steps: tuple[StepResult, ...] = ()
    achieved: bool = False      # predicted at the preset's achieved figures (else at its peaks)
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.timing.median / self.predicted if self.predicted else float("inf")

    @property
    def worst(self) -> StepResult | None:
        """The step whose measured time is furthest from its prediction (by |ln(measured / predicted)|),
        among those predicted to take time."""
        import math
        rated = [s for s in self.steps if s.ratio]
        return max(rated, key=lambda s: abs(math.log(s.ratio)), default=None)

    def as_dict(self) -> dict:
        d = self.device
        w = self.worst
        return {"measured": _timing(self.timing),
                "predicted": {"seconds": self.predicted, "policy": self.policy, "serial": self.serial,
                              "at": "achieved" if self.achieved else "peaks"},
                "ratio": self.ratio if self.predicted else None,
                "steps": [s.as_dict() for s in self.steps],
                "worst": None if w is None else {"step": w.signature, "ratio": w.ratio},
                "what": self.what, "hardware": self.hardware,
                "device": {"platform": d.platform, "kind": d.kind, "count": d.count, "jax": d.jax_version},
                **self.extra}


def predicted(plan, expr) -> float:
    v = plan.evaluate(expr)
    if v is None:
        raise UsageError("the prediction keeps unbound symbols: give --hw (a preset or the file symcost calibrate "
                         "wrote) and bind every size with --dims")
    return v


def time_runnable(r: programs.Runnable, runs: int) -> Timing:
    return time_call(r, block=runtime.block, runs=runs)


def run_steps(plan, low, names, jmesh, key, runs: int) -> tuple[StepResult, ...]:
    """Each step of ``plan`` alone on its own inputs (the local slice steps too: they cost nothing). Steps
    that are the same program at the same shapes (a layer's same-shaped projections, forward and backward)
    are compiled once."""
    jx = runtime.jax()
    out = []
    compiled: dict = {}
    for s, lw in zip(plan.steps, low.steps):
        key, sub = jx.random.split(key)
        r = programs.build(jmesh, plan.mesh, lw.inputs, (lw.output,), lw.lines, names, low.sizes, sub, s.signature(),
                           compiled)
        out.append(StepResult(s.signature(), s.kind, time_runnable(r, runs), predicted(plan, s.seconds), s.phase,
                              lw.identity))
    return tuple(out)


def measure_plan(plan, *, runs: int = 20, steps: bool = True, seed: int = 0) -> Measurement:
    """Run ``plan`` (every size bound, every mesh axis sized, a preset given) and each of its steps."""
    if plan.hardware is None:
        raise UsageError("measure compares with a prediction: give --hw (a preset, or the file symcost calibrate "
                         "wrote)")
    runtime.jax()   # a clear error without the jax extra
    low, names = programs.lowered(plan)
    jmesh = programs.jax_mesh(plan.mesh)
    key = runtime.key(seed)
    with runtime.out_of_memory("bind smaller sizes with --dims"):
        whole = programs.build(jmesh, plan.mesh, low.inputs, low.outputs, low.body, names, low.sizes, key,
                               plan.expression)
        timing = time_runnable(whole, runs)
    per = run_steps(plan, low, names, jmesh, runtime.key(seed + 1), runs) if steps else ()
    pred = predicted(plan, plan.t_step)
    serial = sum(predicted(plan, s.seconds) for s in plan.steps)
    what = {"kind": "program", "expression": plan.expression, "mesh": str(plan.mesh), "dims": dict(plan.sizes)}
    return Measurement(what, timing, pred, plan.policy, serial, runtime.device_info(), plan.hardware.name, per,
                       plan.efficient and not plan.hardware.efficiency.ideal)


def sweep_values(plan_sizes: dict, dim: str, values=None, points: int = 6) -> list[int]:
    """The values of ``dim`` a sweep runs: ``values``, or ``points`` halvings of its bound size."""
    if values:
        return sorted({int(v) for v in values})
    if dim not in plan_sizes:
        raise UsageError(f"--vs {dim}: bind {dim} with --dims (the sweep halves it) or give --values")
    top = int(plan_sizes[dim])
    return sorted({max(1, top >> k) for k in range(points)})


def sweep(run_at, values) -> list[dict]:
    """``run_at(value) -> Measurement`` at each value: rows of value, measured, spread, predicted, ratio."""
    rows = []
    for v in values:
        m = run_at(v)
        rows.append({"value": v, "measured": m.timing.median, "spread": m.timing.spread, "runs": m.timing.runs,
                     "predicted": m.predicted, "ratio": m.ratio})
    return rows

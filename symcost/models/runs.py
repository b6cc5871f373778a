"""Choosing how to launch a training run: every way to split ``chips`` into tensor, pipeline and data
parallelism, with the microbatch, the interleaving, the ZeRO stage, recomputation and sequence
parallelism, priced by the execution model (:class:`symcost.models.execution.Run`), kept where it fits in
HBM and ranked by iteration time. Runs that differ only in the pipeline, the data-parallel split, the
interleaving or the ZeRO stage share one priced layer (:class:`~symcost.models.layer_cost.LayerCost`), so
a search of thousands of runs prices a few dozen layers.

    >>> from symcost.models.config import load_model_config
    >>> from symcost.hardware import hardware
    >>> res = search_runs(load_model_config("megatron-22b"), hardware("a100"), chips=8, sequences=4, seq=2048)
    >>> res.searched, res.feasible
    (408, 218)
    >>> best = dict(res.rows[0].config)
    >>> best["tp"], best["pp"], best["dp"], best["zero"], best["recompute"], best["seq_parallel"]
    (4, 2, 1, 0, 'none', True)

The space (:func:`shapes`): TP over divisors of the heads that fit in the fast domain (an NVLink node); PP over
the divisors of the layers and of the chips left (stages may hold unequal numbers of layers; interleaved
chunks only where they put no more layers on the fullest stage than the stages alone: :func:`_full_chunks`);
DP the most replicas the chips left hold that divide the sequences (a run may leave chips idle, and then
says why: :func:`budget_note`); microbatches of 1, 2, 4, 8 ... sequences; interleaving 1 to 8 chunks where the
layers and microbatches allow; ZeRO 0, 1 and 3 with data parallelism; recomputation none, selective and full;
sequence parallelism with TP; context parallelism up to ``max_cp`` ranks (``--max-cp``; off by default: long
sequences want it); for an MoE model, expert parallelism over every power of two that divides the experts and
the replicas. Each runner-up says what it loses by: the part of the iteration (bubble, TP comms,
recomputation, ...) whose time exceeds the best run's by the most.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from .. import caching, processes, searches
from ..errors import UsageError
from .execution import Run
from .results import SearchResult

RECOMPUTE = ("none", "selective", "full")
PARTS = ("forward", "backward", "recompute", "tp_comms", "cp_comms", "ep_comms", "head", "bubble", "p2p", "dp_comms",
         "optimizer")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _full_chunks(layers: int, pp: int, v: int) -> bool:
    """Interleaving ``v`` chunks a stage puts no more layers on the fullest stage than ``pp`` stages alone
    do: chunks of equal size (Megatron-LM's rule), or as even as LLaMA 3 405B's 126 layers on 16 stages x 2
    (chunks of at most 4, 8 a stage either way)."""
    return pp * v <= layers and v * -(-layers // (pp * v)) == -(-layers // pp)


def shapes(cfg, hw, chips: int, sequences: int, seq: int, *, max_tp: int | None = None,
           max_cp: int = 1) -> list[tuple[int, int, int, int]]:
    """The (tp, cp, pp, dp) the search tries on a budget of ``chips``: TP over divisors of the heads that fit
    in the fast domain, CP over powers of two dividing the sequence, PP over the divisors of the layers and
    of the chips TP and CP leave (stages may hold unequal numbers of layers), and for each the most
    data-parallel replicas the budget holds that divide the sequences. A run may use fewer chips than
    given: when no split of all of them divides the sequences, the best one may leave some idle."""
    domain = max_tp or hw.nvlink_domain or (max(hw.pod) if hw.topology.startswith("torus") else 8)
    cps = [c for c in (2 ** i for i in range(0, 8)) if c <= max_cp and seq % c == 0]
    dps = _divisors(sequences)
    out = []
    for tp, cp in itertools.product(_divisors(cfg.N), cps):
        if tp > domain or tp * cp > chips:
            continue
        left = chips // (tp * cp)
        for pp in sorted({p for p in _divisors(cfg.L) if p <= left} | {p for p in _divisors(left) if p <= cfg.L}):
            dp = max(d for d in dps if d <= left // pp)
            out.append((tp, cp, pp, dp))
    return out


def candidates(cfg, hw, chips: int, sequences: int, seq: int, *, max_tp: int | None = None,
               max_microbatch: int = 8, max_interleave: int = 8, max_cp: int = 1, attention: str = "unfused",
               dp_overlap: bool = False, zero_bubble: bool = False):
    """Every run of the space (as :class:`Run` keyword arguments) that the execution model accepts, on at
    most ``chips`` chips (:func:`shapes`); context parallelism up to ``max_cp`` ranks. ``attention`` and
    ``dp_overlap`` are the framework's, the same for every run, and so is ``zero_bubble``: every pipeline
    whose stages hold one chunk runs ZB-H1 (interleaved ones keep their schedule). With flash attention selective
    recomputation is no recomputation (the kernel's backward computes the scores again itself), so it is
    not tried twice."""
    recomputes = tuple(r for r in RECOMPUTE if not (attention == "flash" and r == "selective"))
    framework = dict(attention=attention, **({"dp_overlap": True} if dp_overlap else {}))
    for tp, cp, pp, dp in shapes(cfg, hw, chips, sequences, seq, max_tp=max_tp, max_cp=max_cp):
        per_replica = sequences // dp
        micro = [m for m in (2 ** i for i in range(0, 12)) if m <= max_microbatch and per_replica % m == 0]
        for mb in micro:
            m = per_replica // mb
            chunks = [1] + ([v for v in range(2, max_interleave + 1)
                             if _full_chunks(cfg.L, pp, v) and m % pp == 0] if pp > 1 else [])
            eps = [e for e in (2 ** i for i in range(0, 12)) if cfg.is_moe and cfg.E % e == 0
                   and (dp * cp) % e == 0] or [1]
            for v, rec, sp_, zero, ep in itertools.product(chunks, recomputes, (False, True) if tp > 1 else (False,),
                                                           (0, 1, 3) if dp * cp > 1 else (0,), eps):
                zb = {"schedule": "zb-h1"} if zero_bubble and pp > 1 and v == 1 else {}
                yield dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, sequences=sequences, microbatch=mb, seq=seq, interleave=v,
                           recompute=rec, seq_parallel=sp_, zero=zero, **framework, **zb)


@dataclass(frozen=True)
class RunChoice:
    """A run the search kept: its knobs, iteration, MFU and memory, the chips it uses, and what it loses
    to the best by (the part of the iteration that grew the most)."""

    config: tuple[tuple[str, object], ...]
    step_time: float
    mfu: float
    hfu: float
    memory_bytes: float
    breakdown: tuple[tuple[str, float], ...]
    loses_by: float
    mostly: str | None

    @property
    def chips_used(self) -> int:
        c = dict(self.config)
        return c["tp"] * c["pp"] * c["dp"] * c.get("cp", 1)

    def as_dict(self) -> dict:
        return {"config": dict(self.config), "chips_used": self.chips_used, "step_time": self.step_time,
                "mfu": self.mfu, "hfu": self.hfu, "memory_bytes": self.memory_bytes,
                "breakdown": dict(self.breakdown), "loses_by": self.loses_by, "mostly": self.mostly}


@dataclass(frozen=True)
class PricedRun:
    """A run of the space priced: its knobs, the state a chip holds (weights, gradients and optimizer: what
    no microbatch or recomputation shrinks), its chips, and its report (None where its memory does not fit:
    the memory is priced first, it is cheaper)."""

    kw: dict
    state_bytes: float
    chips: int
    report: dict | None
    index: int = 0          # its place in the space (runs priced in workers come back in another order)

    @property
    def iteration(self) -> float:
        return self.report["iteration"]["iteration"]


@dataclass(frozen=True)
class _Stages:
    """The run search as :class:`symcost.searches.Stages`: the runs of the space, each priced by the
    execution model, kept where its memory fits in HBM, fastest first."""

    cfg: object
    hw: object
    chips: int
    sequences: int
    seq: int
    space: tuple    # the space's bounds (max_tp, max_cp, ...) as (name, value) pairs
    jobs: object = 1
    name = "run search"
    unit = "runs"

    def items(self) -> tuple:
        cfg, chips, sequences = self.cfg, self.chips, self.sequences
        runs = tuple(candidates(cfg, self.hw, chips, sequences, self.seq, **dict(self.space)))
        if not runs:
            raise UsageError(f"no way to launch {cfg.name} on {chips} chips with {sequences} sequences: TP must "
                             f"divide the {cfg.N} heads, PP the {cfg.L} layers, DP the sequences")
        return runs

    def count(self, n: int) -> str:
        return f"{n:,} runs of {self.cfg.name} to price"

    def price(self, items):
        """Each run priced: in the space's order in this process; in ``jobs`` worker processes, each run of a
        layer (its TP, CP, EP, microbatch and sequence parallelism: what its plan depends on) priced by the
        worker that plans that layer, the runs coming back a layer at a time, not in the space's order (each
        carries its place in it, which :meth:`rank` breaks ties by; nothing else reads the order)."""
        layers: dict = {}
        for i, kw in enumerate(items):
            layers.setdefault(tuple(kw[k] for k in LAYER), []).append((i, kw))
        n = processes.workers(self.jobs, len(layers), least=AUTO_LAYERS)
        if n == 1:
            yield from ((_priced(self.cfg, self.hw, i, kw),) for i, kw in enumerate(items))
            return
        for _, answers in processes.answered(list(layers.values()), n, _work, _setup, (self.cfg, self.hw),
                                             what="pricing worker"):
            yield from ((p,) for p in answers)

    def passes(self, p: PricedRun) -> bool:
        return p.report is not None

    def rank(self, kept: list) -> list:
        """Fastest first; among equals the fewest stages, the widest TP, the fewest chips, then the space's
        order."""
        return sorted(kept, key=lambda p: (p.iteration, p.kw["pp"], -p.kw["tp"],
                                           p.kw["tp"] * p.kw["pp"] * p.kw["dp"] * p.kw["cp"], p.index))

    def label(self, item) -> str:
        return ""


#: the knobs a run's layer plan depends on (runs that share them share it)
LAYER = ("tp", "cp", "ep", "microbatch", "seq_parallel")
#: the fewest layers to plan for which ``jobs="auto"`` starts workers: a dense model's space plans 20 to 50
#: (a second or two in all), a mixture of experts' 100 to 250, each several times slower (Mixtral on 64
#: H100s: 22 s in one process, 11 s in two)
AUTO_LAYERS = 64

_job: dict = {}      # a worker's model and hardware


def _priced(cfg, hw, index: int, kw: dict) -> PricedRun:
    """A run priced: its memory first (cheaper), its report where it fits in HBM."""
    run = Run(cfg, hw, **kw)
    mem = run.memory()
    report = run.report() if mem["total"] <= hw.hbm_bytes else None
    return PricedRun(kw, mem["weights"] + mem["gradients"] + mem["optimizer"], run.chips, report, index)


def _setup(cfg, hw) -> None:
    _job.update(cfg=cfg, hw=hw)


def _work(item) -> PricedRun:
    return _priced(_job["cfg"], _job["hw"], *item)


def _least_state(priced) -> dict | None:
    """The least state a chip holds in any run priced, with that run's chips and knobs (the first such run)."""
    least = min(priced, key=lambda p: (p.state_bytes, p.index), default=None)
    return None if least is None else {"state_bytes": least.state_bytes, "chips_used": least.chips,
                                       "config": describe(least.kw)}


def budget_note(chips: int, sequences: int, best: RunChoice, full: RunChoice | None) -> str | None:
    """Why the best run leaves chips idle, in numbers; None when it uses them all."""
    used = best.chips_used
    if used == chips:
        return None
    c = dict(best.config)
    group = c["tp"] * c["pp"] * c.get("cp", 1)
    parts = " x ".join(f"{k} {c[k]}" for k in ("tp", "cp", "pp") if c.get(k, 1) > 1) or "one chip"
    if chips % group:
        why = f"{chips:,} is not a whole number of replicas of {parts} ({group} chips)"
    else:
        why = f"{chips // group:,} replicas of {parts} cannot divide {sequences:,} sequences"
    note = f"{used:,} of {chips:,} chips: {why}, so the other {chips - used:,} stay idle"
    if full is not None:
        note += f"; the best run on all {chips:,} ({describe(dict(full.config))}) takes {full.step_time:.3g} s"
    return note


@caching.collector_paused()
def search_runs(cfg, hw, chips: int, sequences: int, seq: int, top: int = 5, jobs=1, **space) -> SearchResult:
    """The ``top`` fastest runs that fit on at most ``chips`` chips, each with its iteration, MFU, memory,
    the chips it uses and what it loses by (space -> price -> filter by memory -> rank); ``jobs``: worker
    processes (a number, or ``"auto"``: every core), the same runs found in the same order."""
    if chips < 1 or sequences < 1 or seq < 1:
        raise UsageError("a run search needs positive --chips, --sequences (or --batch) and --seq")
    found = searches.run(_Stages(cfg, hw, chips, sequences, seq, tuple(space.items()), jobs))
    ranked = found.ranked
    best = ranked[0].report["iteration"] if ranked else None
    chosen = [_choice(p, ranked[0].iteration, best) for p in ranked[:top]]
    full = next((_choice(p, ranked[0].iteration, best) for p in ranked
                 if p.kw["tp"] * p.kw["pp"] * p.kw["dp"] * p.kw["cp"] == chips), None)
    note = budget_note(chips, sequences, chosen[0], full) if chosen else None
    return SearchResult(found.done, len(ranked), found.seconds, tuple(chosen),
                        (("chips", chips), ("sequences", sequences), ("seq", seq),
                         ("attention", space.get("attention", "unfused")),
                         ("dp_overlap", bool(space.get("dp_overlap"))), ("zero_bubble", bool(space.get("zero_bubble"))),
                         ("chips_used", chosen[0].chips_used if chosen else None), ("budget", note),
                         ("least_state", _least_state(found.priced))), complete=found.complete)


def _choice(p: PricedRun, fastest: float, best: dict) -> RunChoice:
    t, kw, rep = p.iteration, p.kw, p.report
    it = rep["iteration"]
    worse = {p: it[p] - best[p] for p in PARTS}
    knobs = tuple((k, v) for k, v in kw.items() if k not in ("sequences", "seq", "attention", "dp_overlap"))
    return RunChoice(knobs, t,
                     rep["mfu"], rep["hfu"], rep["memory"]["total"], tuple((p, it[p]) for p in PARTS),
                     t - fastest, max(worse, key=worse.get) if t > fastest else None)


def describe(cfg: dict) -> str:
    """One line of a run's knobs, as ``model --train`` takes them."""
    out = f"tp {cfg['tp']}, pp {cfg['pp']}, dp {cfg['dp']}"
    if cfg.get("cp", 1) > 1:
        out += f", cp {cfg['cp']}"
    if cfg.get("ep", 1) > 1:
        out += f", ep {cfg['ep']}"
    if cfg["zero"]:
        out += f", zero {cfg['zero']}"
    out += f", microbatch {cfg['microbatch']}"
    if cfg["interleave"] > 1:
        out += f", interleave {cfg['interleave']}"
    if cfg.get("schedule"):
        out += f", {cfg['schedule']}"
    out += f", recompute {cfg['recompute']}"
    if cfg["seq_parallel"]:
        out += ", seq-parallel"
    return out


__all__ = ["RunChoice", "budget_note", "candidates", "describe", "search_runs", "shapes"]

"""Choosing how to serve a model: every split of ``chips`` into a head axis Y (tensor parallelism over the
key-value heads) and a batch axis Z (the KV cache's batch; F and the vocabulary over both), and every batch
that fits, priced by the derived decode step (:meth:`symcost.models.inference.Serving.decode`) or prefill
step (:meth:`~symcost.models.inference.Serving.prefill_step`); kept where the step meets a latency
target, ranked by tokens a second per chip.

    >>> from symcost.models.config import load_model_config
    >>> from symcost.hardware import hardware
    >>> res = search_serving(load_model_config("llama3-8b"), hardware("h100"), chips=8, seq=4096, latency=0.02,
    ...                      top=1)
    >>> best = res.rows[0]
    >>> best.mesh, best.batch, best.step.bound
    ('Y=8', 512, 'hbm')

With ``phase="prefill"`` the step is a prefill of ``batch`` prompts of ``seq`` tokens (the time to the first
token; ``latency`` bounds it) and tokens a second count the prompts' tokens. LLaMA 3-8B's prompts go
best with the weights whole on each chip and each prompt's tokens split over the eight (context
parallelism):

    >>> pre = search_serving(load_model_config("llama3-8b"), hardware("h100"), chips=8, seq=4096, latency=0.5,
    ...                      phase="prefill", top=1)
    >>> pre.rows[0].mesh, pre.rows[0].step.tokens_over, pre.rows[0].step.bound
    ('Y=1,Z=8', ('Z',), 'math')

A layout is planned once per mesh (at a batch of 64 or the largest that fits; one prompt for prefill) and
priced at every batch with that plan (a sweep). The rows shown are derived again, each at its
own batch, as ``serve --mesh M --batch B`` derives it (:func:`at_their_batch`). ``bound`` says which term
sets the step: ``hbm`` (weights and KV cache streaming), ``math`` or ``comms``. An MoE model's layouts
include its routed experts split whole over Y, Z or both (expert parallelism).
"""
from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass, field, replace

from .. import caching, processes, progress, searches
from ..errors import UsageError
from .inference import Serving, split_mesh
from .results import SearchResult, ServingStep
from .transformer import Sharding, experts_over, tokens_over


def meshes(cfg, chips: int, phase: str = "decode") -> list[tuple[str, Sharding]]:
    """Every (mesh, sharding): Y splits the heads (a divisor of the key-value heads, or of the heads with
    latent attention), Z the KV cache's batch, F and the vocabulary both; for an MoE model each mesh also
    with its routed experts split whole over Y, over Z, and over both, where their groups divide the experts
    (expert parallelism: what ``serve --mesh ... --experts AXES`` prices). A prefill's meshes also split
    the prompts' tokens over Z instead of the batch (context parallelism: ``serve --mesh ... --context
    Z``)."""
    heads = cfg.N if cfg.is_mla else cfg.K
    out = []
    for y in (y for y in range(1, chips + 1) if chips % y == 0 and heads % y == 0):
        mesh, sharding = split_mesh(y, chips // y)
        out.append((mesh, sharding))
        if phase == "prefill" and chips // y > 1:
            out.append((mesh, replace(sharding, context=("Z",), kv_batch=(), model=("Y",))))
        if cfg.is_moe:
            sizes = {"Y": y, "Z": chips // y}
            for axes in (("Y",), ("Z",), ("Y", "Z")):
                n = 1
                for a in axes:
                    n *= sizes[a]
                if all(sizes[a] > 1 for a in axes) and cfg.E % n == 0:
                    out.append((mesh, replace(sharding, experts=axes)))
    return out


PHASES = ("decode", "prefill")


@dataclass(frozen=True)
class ServingRun:
    """One (mesh, batch) the search priced: the mesh as written and its step."""

    mesh: str
    step: ServingStep
    server: object = field(default=None, compare=False, repr=False)   # the mesh's server: to derive it again

    @property
    def batch(self) -> int:
        return self.step.batch

    def as_dict(self) -> dict:
        return {**self.step.as_dict(), "axes": dict(self.step.mesh), "mesh": self.mesh,
                "experts_over": list(self.step.experts_over), "tokens_over": list(self.step.tokens_over)}


def space(cfg, hw, chips: int, seq: int, *, dtype: str, kv_dtype, max_batch: int | None, phase: str = "decode"):
    """The (server, batches) pairs to price: each mesh's :class:`Serving`, and the powers of two up to the
    largest batch that fits (and that batch), each padded to a multiple of the devices the KV cache's batch
    splits over (:meth:`Serving.batches`)."""
    for mesh, sharding in meshes(cfg, chips, phase):
        s = Serving(cfg, hw, chips=chips, dtype=dtype, kv_dtype=kv_dtype, mesh=mesh, sharding=sharding)
        top = s.max_batch(seq)
        if max_batch:
            top = min(top, max_batch)
        yield mesh, s, s.batches(top)


def price(server: Serving, mesh: str, batches, seq: int, phase: str, causal: bool = True):
    """Each batch's step on one mesh; the layout is planned once (at a batch of 64 or the largest that
    fits; one prompt for prefill, a prompt being thousands of tokens)."""
    rank_at = max(1, min(max(batches), 64 if phase == "decode" else 1))
    for b in batches:
        yield ServingRun(mesh, _step(server, phase, b, seq, rank_at, causal), server)


def _step(server: Serving, phase: str, batch: int, seq: int, plan_at: int | None, causal: bool):
    """The phase's step (a prefill's attention ``causal`` or over the whole prompt)."""
    if phase == "decode":
        return server.decode(batch, seq, plan_batch=plan_at)
    return server.prefill_step(batch, seq, plan_at, causal=causal)


def qualifies(run: ServingRun, latency: float | None) -> bool:
    """The filter: a device holds its weights and KV caches, and the step meets the latency target."""
    return run.step.fits and (latency is None or run.step.step_time <= latency)


def rank(runs) -> list[ServingRun]:
    """Most tokens a second per chip first; the shorter step breaks ties."""
    return sorted(runs, key=lambda r: (-r.step.tokens_per_s_per_chip, r.step.step_time))


@caching.collector_paused()
def search_serving(cfg, hw, chips: int, seq: int, *, latency: float | None = None, top: int = 5,
                   dtype: str = "bf16", kv_dtype: str | None = None, max_batch: int | None = None,
                   phase: str = "decode", causal: bool = True, jobs=1) -> SearchResult:
    """The ``top`` (mesh, batch) pairs with the most tokens a second per chip whose step fits in HBM and
    takes at most ``latency`` seconds (any, without one). ``phase``: ``decode`` (a generation step with
    ``seq`` tokens of context) or ``prefill`` (``batch`` prompts of ``seq`` tokens:
    :meth:`Serving.prefill_step`, their attention ``causal`` or not; the step is the time to the first
    token). ``jobs``: worker processes the layouts (a mesh and its sharding) are priced in, and the best rows
    derived again (1: this one; a number; ``"auto"`` or None: every core, where there are
    :data:`AUTO_MESHES` layouts or more); the answer is the same."""
    if chips < 1 or seq < 1:
        raise UsageError("a serving search needs positive --chips and --seq")
    if phase not in PHASES:
        raise UsageError(f"a serving search is over {' or '.join(PHASES)}, not {phase!r}")
    if latency is not None and latency <= 0:
        raise UsageError(f"--latency must be positive, not {latency:g}")
    start = time.perf_counter()
    processes.workers(jobs, 1)          # a bad --jobs is refused before anything is priced
    found = searches.run(_Stages(cfg, hw, chips, seq, phase, latency, dtype, kv_dtype, max_batch, causal, jobs))
    ranked = found.ranked
    searched = sum(max(1, len(batches)) for _, _, batches in found.items[:found.done])
    rows = at_their_batch(ranked, top, seq, phase, latency, causal, _workers(jobs, len(found.items)))
    return SearchResult(searched, len(ranked), time.perf_counter() - start, rows,
                        (("phase", phase), *((("mask", "causal" if causal else "full"),) if phase == "prefill" else ()),
                         ("meshes", [_layout(m, srv) for m, srv, _ in found.items]),
                         ("latency", latency)),
                        complete=found.complete)


#: how many of the sweep's best rows, per row shown, are derived again at their own batch
AGAIN = 3


def at_their_batch(ranked, top: int, seq: int, phase: str, latency: float | None, causal: bool = True,
                   jobs: int = 1) -> tuple:
    """The ``top`` rows, each derived at its own batch as ``serve --mesh M --batch B`` derives it (the sweep
    prices a layout at every batch with the plan made at one, which at thousands of sequences may be far
    from the plan made there: DeepSeek-V3's ``Y=1,Z=8`` at 2,608 sequences, 139 ms swept, 103 ms derived).
    Derived again: the sweep's best :data:`AGAIN` x ``top`` rows, ranked by what they derive to (in ``jobs``
    worker processes where it is more than one, each layout's rows by one worker, which shares its caches
    between them)."""
    pick = list(ranked[:AGAIN * top])
    if pick:
        progress.say(f"serving search: its best {len(pick)} rows derived again, each at its own batch")
    layouts: dict = {}        # each layout's rows (a mesh and its sharding): one worker derives them, in turn
    for r in pick:
        layouts.setdefault((r.mesh, r.server.sharding), []).append(r)
    if jobs > 1 and len(layouts) > 1:
        work = [("rows", mesh, sharding, tuple(r.batch for r in rows), seq, phase, causal)
                for (mesh, sharding), rows in layouts.items()]
        got = iter(step for steps in _answers(work, jobs, pick[0].server) for step in steps)
        derived = {id(r): next(got) for rows in layouts.values() for r in rows}
    else:
        derived = {id(r): _step(r.server, phase, r.batch, seq, None, causal) for r in pick}
    again = [run for run in (ServingRun(r.mesh, derived[id(r)], r.server) for r in pick) if qualifies(run, latency)]
    return tuple(rank(again)[:top])


#: the fewest meshes for which ``jobs="auto"`` starts workers, a mesh to a worker (each mesh's plan, and each
#: row derived again, derives the whole layer program; a worker's caches start cold). Measured on 2 cores
#: (2026-11-27): LLaMA 3 8B on 8 H100s (4 meshes) decode 3.4 s -> 2.2 s, prefill 5.2 s -> 2.6 s; LLaMA
#: 3-70B's decode 2.6-2.7 s -> 2.1-2.4 s; LLaMA 3 8B on 2 H100s (2 meshes): decode 1.5 s -> 1.6 s
AUTO_MESHES = 4


def _workers(jobs, layouts: int) -> int:
    """Worker processes for a search of ``layouts`` layouts (``auto``: from :data:`AUTO_MESHES` up)."""
    return processes.workers(jobs, layouts, least=AUTO_MESHES)


def _answers(work: list, n: int, server: Serving):
    """:func:`_work` of each item of ``work``, in order, as they come from ``n`` worker processes (an item to
    a worker), each serving the model as ``server`` does."""
    init = (server.cfg, server.hw, server.chips, server.dtype, server.kv_dtype)
    for _, (got,) in processes.answered([[w] for w in work], n, _work, _setup, init, what="serving worker"):
        yield got


_job: dict = {}      # a worker's model, hardware and chips


def _setup(cfg, hw, chips: int, dtype: str, kv_dtype) -> None:
    _job.update(cfg=cfg, hw=hw, chips=chips, dtype=dtype, kv_dtype=kv_dtype, servers={})


def _work(item):
    """A worker's answer for one mesh: its steps at each of the batches with the plan made at one
    (``sweep``), or each derived at its own batch (``rows``)."""
    kind, mesh, sharding, batches, seq, phase, causal = item
    key = (mesh, sharding)
    server = _job["servers"].get(key)
    if server is None:
        server = _job["servers"][key] = Serving(_job["cfg"], _job["hw"], chips=_job["chips"], dtype=_job["dtype"],
                                                kv_dtype=_job["kv_dtype"], mesh=mesh, sharding=sharding)
    if kind == "rows":
        return tuple(_step(server, phase, b, seq, None, causal) for b in batches)
    return tuple(r.step for r in price(server, mesh, batches, seq, phase, causal))


def _layout(mesh: str, server: Serving) -> str:
    """A mesh as the search names it: ``Y=8``, ``Y=8; experts over Y`` where the experts are split,
    ``Y=8,Z=2; tokens over Z`` where the tokens are."""
    return mesh + experts_over(server.sharding.experts) + tokens_over(server.sharding.context)


@dataclass(frozen=True)
class _Stages:
    """The serving search as :class:`symcost.searches.Stages`: each mesh's server and batches, every batch
    priced, kept where it fits and meets the latency target, most tokens a second per chip first."""

    cfg: object
    hw: object
    chips: int
    seq: int
    phase: str
    latency: float | None
    dtype: str
    kv_dtype: str | None
    max_batch: int | None
    causal: bool = True
    jobs: object = 1
    name = "serving search"
    unit = "meshes"

    def items(self) -> tuple:
        """Each mesh's (mesh, server, batches)."""
        return tuple(space(self.cfg, self.hw, self.chips, self.seq, dtype=self.dtype, kv_dtype=self.kv_dtype,
                           max_batch=self.max_batch, phase=self.phase))

    def count(self, n: int) -> str:
        return f"{n:,} meshes to price, each at every batch that fits"

    def price(self, items):
        """Each mesh's batches priced with its plan, in the meshes' order: here, or each mesh in a worker
        process where ``jobs`` starts them (the same steps, sent back)."""
        n = _workers(self.jobs, len(items))
        priced = [(mesh, server, batches) for mesh, server, batches in items if batches]
        if n == 1 or len(priced) < 2:
            for mesh, server, batches in items:
                yield tuple(price(server, mesh, batches, self.seq, self.phase, self.causal)) if batches else ()
            return
        work = [("sweep", mesh, server.sharding, batches, self.seq, self.phase, self.causal)
                for mesh, server, batches in priced]
        with closing(_answers(work, n, priced[0][1])) as answers:     # stopped, the workers go at once
            for mesh, server, batches in items:
                yield tuple(ServingRun(mesh, step, server) for step in next(answers)) if batches else ()

    def passes(self, run: ServingRun) -> bool:
        return qualifies(run, self.latency)

    def rank(self, kept: list) -> list:
        return rank(kept)

    def label(self, item) -> str:
        return item[0]


__all__ = ["PHASES", "ServingRun", "meshes", "search_serving"]

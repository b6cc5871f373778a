"""Choosing how to launch a training run: every way to split ``chips`` into tensor, pipeline and data
parallelism, with the microbatch, the interleaving, the ZeRO stage, recomputation and sequence
parallelism, priced by the execution model (:class:`symcost.models.execution.Run`), kept where it fits in
HBM and ranked by iteration time. Runs that differ only in the pipeline, the data-parallel split, the
interleaving or the ZeRO stage share one priced layer (:class:`~symcost.models.layer_cost.LayerCost`), so
a search of thousands of runs prices a few dozen layers.

    >>> from symcost.models.config import load_model_config
    >>> from symcost.hardware import hardware
    >>> res = search_runs(load_model_config("megatron-22b"), hardware("a100"), chips=8, sequences=4, seq=2048)
    >>> res["searched"], res["feasible"]
    (354, 198)
    >>> best = res["runs"][0]["config"]
    >>> best["tp"], best["pp"], best["dp"], best["zero"], best["recompute"], best["seq_parallel"]
    (4, 2, 1, 0, 'none', True)

The space: TP over divisors of the chips that divide the heads and fit in the fast domain (an NVLink node); PP
over the divisors of what is left (stages may hold unequal numbers of layers; interleaved chunks only where
they put no more layers on the fullest stage than the stages alone: :func:`_full_chunks`); DP the rest (it
must divide the sequences); microbatches of 1, 2, 4, 8 ... sequences; interleaving 1 to 8 chunks where the
layers and microbatches allow; ZeRO 0, 1 and 3 with data parallelism; recomputation none, selective and full;
sequence parallelism with TP; context parallelism up to ``max_cp`` ranks (``--max-cp``; off by default: long
sequences want it); for an MoE model, expert parallelism over every power of two that divides the experts and
the replicas. Each runner-up says what it loses by: the part of the iteration (bubble, TP comms,
recomputation, ...) whose time exceeds the best run's by the most.
"""
from __future__ import annotations

import itertools
import time

from .. import progress
from ..errors import UsageError
from .execution import Run

RECOMPUTE = ("none", "selective", "full")
PARTS = ("forward", "backward", "recompute", "tp_comms", "cp_comms", "ep_comms", "head", "bubble", "p2p", "dp_comms", "optimizer")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _full_chunks(layers: int, pp: int, v: int) -> bool:
    """Interleaving ``v`` chunks a stage puts no more layers on the fullest stage than ``pp`` stages alone
    do: chunks of equal size (Megatron-LM's rule), or as even as LLaMA 3 405B's 126 layers on 16 stages x 2
    (chunks of at most 4, 8 a stage either way)."""
    return pp * v <= layers and v * -(-layers // (pp * v)) == -(-layers // pp)


def candidates(cfg, hw, chips: int, sequences: int, seq: int, *, max_tp: int | None = None,
               max_microbatch: int = 8, max_interleave: int = 8, max_cp: int = 1, attention: str = "unfused"):
    """Every run of the space (as :class:`Run` keyword arguments) that the execution model accepts;
    context parallelism up to ``max_cp`` ranks (powers of two dividing the sequence)."""
    domain = max_tp or hw.nvlink_domain or (max(hw.pod) if hw.topology.startswith("torus") else 8)
    cps = [c for c in (2 ** i for i in range(0, 8)) if c <= max_cp and seq % c == 0]
    for tp, cp in itertools.product(_divisors(chips), cps):
        if tp > domain or cfg.N % tp or chips % (tp * cp):
            continue
        for pp in _divisors(chips // (tp * cp)):
            if pp > cfg.L:
                continue
            dp = chips // (tp * pp * cp)
            if sequences % dp:
                continue
            per_replica = sequences // dp
            micro = [m for m in (2 ** i for i in range(0, 12)) if m <= max_microbatch and per_replica % m == 0]
            for mb in micro:
                m = per_replica // mb
                chunks = [1] + ([v for v in range(2, max_interleave + 1)
                                 if _full_chunks(cfg.L, pp, v) and m % pp == 0] if pp > 1 else [])
                eps = [e for e in (2 ** i for i in range(0, 12)) if cfg.is_moe and cfg.E % e == 0
                       and (dp * cp) % e == 0] or [1]
                for v, rec, sp_, zero, ep in itertools.product(chunks, RECOMPUTE, (False, True) if tp > 1 else (False,),
                                                               (0, 1, 3) if dp * cp > 1 else (0,), eps):
                    yield dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, sequences=sequences, microbatch=mb, seq=seq, interleave=v,
                               recompute=rec, seq_parallel=sp_, zero=zero, attention=attention)


def search_runs(cfg, hw, chips: int, sequences: int, seq: int, top: int = 5, **space) -> dict:
    """The ``top`` fastest runs that fit, each with its iteration, MFU, memory and what it loses by."""
    if chips < 1 or sequences < 1 or seq < 1:
        raise UsageError("a run search needs positive --chips, --sequences (or --batch) and --seq")
    t0 = time.perf_counter()
    space_list = list(candidates(cfg, hw, chips, sequences, seq, **space))
    if not space_list:
        raise UsageError(f"no way to launch {cfg.name} on {chips} chips with {sequences} sequences: TP must "
                         f"divide the {cfg.N} heads, PP the {cfg.L} layers, DP the sequences")
    priced = []
    for kw in space_list:
        progress.advance(1, "pricing runs", total=len(space_list), unit=" runs")
        run = Run(cfg, hw, **kw)
        mem = run.memory()["total"]
        if mem > hw.hbm_bytes:
            continue
        rep = run.report()
        priced.append((rep["iteration"]["iteration"], kw, rep))
    priced.sort(key=lambda r: (r[0], r[1]["pp"], -r[1]["tp"]))
    runs = []
    best = priced[0][2]["iteration"] if priced else None
    for t, kw, rep in priced[:top]:
        it = rep["iteration"]
        worse = {p: it[p] - best[p] for p in PARTS}
        mostly = max(worse, key=worse.get)
        runs.append({"config": {k: v for k, v in kw.items() if k not in ("sequences", "seq", "attention")},
                     "step_time": t, "mfu": rep["mfu"], "hfu": rep["hfu"], "memory_bytes": rep["memory"]["total"],
                     "breakdown": {p: it[p] for p in PARTS},
                     "loses_by": t - priced[0][0], "mostly": mostly if t > priced[0][0] else None})
    return {"searched": len(space_list), "feasible": len(priced), "search_seconds": time.perf_counter() - t0,
            "runs": runs}


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
    out += f", recompute {cfg['recompute']}"
    if cfg["seq_parallel"]:
        out += ", seq-parallel"
    return out


__all__ = ["search_runs", "candidates", "describe"]

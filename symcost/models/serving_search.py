"""Choosing how to serve a model: every split of ``chips`` into a head axis Y (tensor parallelism over the
key-value heads) and a batch axis Z (the KV cache's batch; F and the vocabulary over both), and every batch
that fits, priced by the derived decode step (:meth:`symcost.models.inference.Serving.decode`) or prefill
step (:meth:`~symcost.models.inference.Serving.prefill_step`); kept where the step meets a latency
target, ranked by tokens a second per chip.

    >>> from symcost.models.config import load_model_config
    >>> from symcost.hardware import hardware
    >>> res = search_serving(load_model_config("llama3-8b"), hardware("h100"), chips=8, seq=4096, latency=0.02)
    >>> best = res["runs"][0]
    >>> best["mesh"], best["batch"], best["bound"]
    ('Y=2,Z=4', 512, 'hbm')

With ``phase="prefill"`` the step is a prefill of ``batch`` prompts of ``seq`` tokens (the time to the first
token; ``latency`` bounds it) and tokens a second count the prompts' tokens:

    >>> pre = search_serving(load_model_config("llama3-8b"), hardware("h100"), chips=8, seq=4096, latency=0.5,
    ...                      phase="prefill")
    >>> pre["runs"][0]["mesh"], pre["runs"][0]["bound"]
    ('Y=2,Z=4', 'math')

A layout is planned once per mesh (at a batch of 64 or the largest that fits; one prompt for prefill) and
priced at every batch: the sweep of :meth:`Serving.frontier`. ``bound`` says which term sets the step:
``hbm`` (weights and KV cache streaming), ``math`` or ``comms``.
"""
from __future__ import annotations

import math
import time

from .. import progress
from ..errors import UsageError
from .inference import Serving, split_mesh
from .transformer import Sharding


def meshes(cfg, chips: int) -> list[tuple[str, Sharding]]:
    """Every (mesh, sharding): Y splits the heads (a divisor of the key-value heads, or of the heads with
    latent attention), Z the KV cache's batch, F and the vocabulary both."""
    heads = cfg.N if cfg.is_mla else cfg.K
    return [split_mesh(y, chips // y) for y in range(1, chips + 1) if chips % y == 0 and heads % y == 0]


def _bound(r: dict) -> str:
    terms = {"hbm": r["t_hbm"], "math": r["t_math"], "comms": r["t_comms"]}
    return max(terms, key=terms.get)


PHASES = ("decode", "prefill")


def search_serving(cfg, hw, chips: int, seq: int, *, latency: float | None = None, top: int = 5,
                   dtype: str = "bf16", kv_dtype: str | None = None, max_batch: int | None = None,
                   phase: str = "decode") -> dict:
    """The ``top`` (mesh, batch) pairs with the most tokens a second per chip whose step fits in HBM and
    takes at most ``latency`` seconds (any, without one). ``phase``: ``decode`` (a generation step with
    ``seq`` tokens of context) or ``prefill`` (``batch`` prompts of ``seq`` tokens:
    :meth:`Serving.prefill_step`; the step is the time to the first token)."""
    if chips < 1 or seq < 1:
        raise UsageError("a serving search needs positive --chips and --seq")
    if phase not in PHASES:
        raise UsageError(f"a serving search is over {' or '.join(PHASES)}, not {phase!r}")
    if latency is not None and latency <= 0:
        raise UsageError(f"--latency must be positive, not {latency:g}")
    t0 = time.perf_counter()
    rows, searched = [], 0
    options = meshes(cfg, chips)
    for mesh, sharding in options:
        progress.advance(1, "pricing meshes", total=len(options), unit=" meshes", label=mesh)
        s = Serving(cfg, hw, chips=chips, dtype=dtype, kv_dtype=kv_dtype, mesh=mesh, sharding=sharding)
        top_batch = s.max_batch(seq)
        if max_batch:
            top_batch = min(top_batch, max_batch)
        if top_batch < 1:
            searched += 1
            continue
        batches = sorted({2 ** i for i in range(int(math.log2(top_batch)) + 1)} | {top_batch})
        rank_at = max(1, min(top_batch, 64 if phase == "decode" else 1))   # a prompt is thousands of tokens
        for b in batches:
            searched += 1
            r = s.decode(b, seq, plan_batch=rank_at) if phase == "decode" else s.prefill_step(b, seq, rank_at)
            if not r["fits"] or (latency is not None and r["step_time"] > latency):
                continue
            rows.append({"mesh": mesh, "batch": b, "step_time": r["step_time"],
                         "tokens_per_s_per_chip": r["tokens_per_s_per_chip"], "tokens_per_s": r["tokens_per_s"],
                         "memory_bytes": r["memory_bytes"], "kv_copies": r["kv_copies"], "bound": _bound(r),
                         "t_math": r["t_math"], "t_hbm": r["t_hbm"], "t_comms": r["t_comms"]})
    rows.sort(key=lambda r: (-r["tokens_per_s_per_chip"], r["step_time"]))
    return {"phase": phase, "searched": searched, "feasible": len(rows), "meshes": [m for m, _ in options],
            "search_seconds": time.perf_counter() - t0, "latency": latency, "runs": rows[:top]}


__all__ = ["search_serving", "meshes", "PHASES"]

"""The answers of the serving and run models as values: frozen, with ``as_dict()`` for JSON.

A search has one shape (the space, each candidate priced, the ones that pass the filter, ranked), so
:class:`SearchResult` is shared by the serving search and the run search; what differs is the row.

    >>> step = ServingStep(batch=8, step_time=0.01, t_math=0.002, t_hbm=0.01, t_comms=0.001, tokens=8, chips=8,
    ...                    mesh=(("Y", 8), ("Z", 1)), memory_bytes=4e10, hbm_bytes=8e10, max_batch=64,
    ...                    kv_copies=1, weight_bytes_read=3e10)
    >>> step.tokens_per_s, step.bound, step.fits, step.as_dict()["mesh"]
    (800.0, 'hbm', True, {'Y': 8, 'Z': 1})
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class ServingStep:
    """One decode or prefill step on a mesh: its time and the terms that set it (seconds), the tokens it
    makes (decode) or reads (prefill), and what a device holds (``memory_bytes``, weights and KV cache as
    the layouts hold them; of it ``weight_bytes_held`` the weights) and reads of the weights
    (``weight_bytes_read``)."""

    batch: int
    step_time: float
    t_math: float
    t_hbm: float
    t_comms: float
    tokens: int
    chips: int
    mesh: tuple[tuple[str, int], ...]
    memory_bytes: float
    hbm_bytes: float
    max_batch: int
    kv_copies: int
    weight_bytes_read: float
    experts_read: float | None = None
    t_kernels: float = 0.0      # the local kernels one after another, each at its own bound (and floor)
    weight_bytes_held: float = 0.0   # bytes of weights a chip holds (of memory_bytes; the rest is KV cache)
    padded_batch: int = 0       # the batch priced: ``batch`` padded to a multiple of the KV cache's batch axes
    experts_over: tuple[str, ...] = ()   # the mesh axes an MoE layer's routed experts are split over (EP)
    tokens_over: tuple[str, ...] = ()    # the mesh axes that split the tokens (context parallelism)
    padding: tuple = ()         # (dimension, size, devices, padded size) of each model dimension the layouts pad

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step_time

    @property
    def tokens_per_s_per_chip(self) -> float:
        return self.tokens_per_s / self.chips

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.hbm_bytes

    @property
    def bound(self) -> str:
        """The term that sets the step: ``hbm`` (weights and KV cache streaming), ``math`` or ``comms``."""
        terms = {"hbm": self.t_hbm, "math": self.t_math, "comms": self.t_comms}
        return max(terms, key=terms.get)

    def as_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items()
               if k not in ("mesh", "tokens", "hbm_bytes", "experts_read", "experts_over", "tokens_over", "padding")}
        out.update(mesh=dict(self.mesh), padded_batch=max(self.padded_batch, self.batch),
                   tokens_over=list(self.tokens_over),
                   padding=[dict(zip(("dim", "size", "devices", "padded"), p)) for p in self.padding],
                   tokens_per_s=self.tokens_per_s, tokens_per_s_per_chip=self.tokens_per_s_per_chip, fits=self.fits,
                   bound=self.bound)
        if self.experts_read is not None:
            out["experts_read"] = self.experts_read
            out["experts_over"] = list(self.experts_over)
        return out


@dataclass(frozen=True)
class PrefillEstimate:
    """The book's prefill estimate: ``flops`` at ``mfu`` of the slice's peak (``mfu_source`` says where the
    figure comes from), no faster than a chip streams the weights it holds (``hbm_floor``); what a chip
    holds (``memory_bytes``) against its HBM."""

    batch: int
    flops: float
    seconds: float
    mfu: float
    mfu_source: str
    hbm_floor: float
    mesh: tuple[tuple[str, int], ...]
    memory_bytes: float
    hbm_bytes: float
    mask: str = "causal"     # the attention's mask: "causal" (half the attention's FLOPs) or "full"

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.hbm_bytes

    def as_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k not in ("mesh", "hbm_bytes")}
        return {**out, "mesh": dict(self.mesh), "fits": self.fits}


@dataclass(frozen=True)
class SearchResult:
    """A search's answer (:mod:`symcost.searches`): how many candidates it priced (``searched``), how many
    passed its filter (``feasible``), how long it took, and the best ``rows`` in rank order (each a frozen
    value with ``as_dict()``); ``extra`` carries what the search says about its space (the meshes, the chips
    used). ``complete`` is False when the search was stopped (Ctrl-C): the rows are the best priced until then."""

    searched: int
    feasible: int
    seconds: float
    rows: tuple = ()
    extra: tuple[tuple[str, object], ...] = field(default=())
    complete: bool = True

    def get(self, key: str, default=None):
        return dict(self.extra).get(key, default)

    def as_dict(self) -> dict:
        return {"searched": self.searched, "feasible": self.feasible, "search_seconds": self.seconds,
                "complete": self.complete, **dict(self.extra), "runs": [r.as_dict() for r in self.rows]}


__all__ = ["PrefillEstimate", "SearchResult", "ServingStep"]

"""The result of pricing a training step: a frozen value with the figures ``model --train`` reads, and its
dictionary (what ``Run.report`` and the run search hand on).

    >>> from symcost.hardware import hardware
    >>> from symcost.models.config import load_model_config
    >>> from symcost.models.execution import Run
    >>> r = Run(load_model_config("megatron-22b"), hardware("a100"), tp=8, sequences=4, microbatch=4,
    ...         recompute="full").result()
    >>> r.memory_policy, round(r.iteration["iteration"], 2), r.schedule["in_flight_microbatches"]
    ('saved', 1.38, 1)
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


def _frozen(d: dict) -> MappingProxyType:
    return MappingProxyType({k: _frozen(v) if isinstance(v, dict) else v for k, v in d.items()})


def _thawed(d) -> dict:
    return {k: _thawed(v) if isinstance(v, MappingProxyType) else v for k, v in d.items()}


@dataclass(frozen=True)
class TrainingStep:
    """One iteration of a run: seconds by part (``iteration`` the total), FLOPs (``6N``, ``model``,
    ``hardware``), MFU and HFU, the schedule, bytes per device by part, the memory policy and one layer's
    forward, backward and recompute seconds for one microbatch (communication included as it runs)."""

    iteration: MappingProxyType
    flops: MappingProxyType
    mfu: float
    hfu: float
    mfu_6n: float
    schedule: MappingProxyType
    memory: MappingProxyType
    memory_policy: str
    layer: MappingProxyType

    @classmethod
    def of(cls, *, iteration, flops, mfu, hfu, mfu_6n, schedule, memory, memory_policy, layer) -> "TrainingStep":
        return cls(_frozen(iteration), _frozen(flops), mfu, hfu, mfu_6n, _frozen(schedule), _frozen(memory),
                   memory_policy, _frozen(layer))

    @property
    def fits_in(self) -> float:
        return self.memory["total"]

    def as_dict(self) -> dict:
        return {"iteration": _thawed(self.iteration), "flops": _thawed(self.flops), "mfu": self.mfu,
                "hfu": self.hfu, "mfu_6n": self.mfu_6n, "schedule": _thawed(self.schedule),
                "memory": _thawed(self.memory), "memory_policy": self.memory_policy, "layer": _thawed(self.layer)}


__all__ = ["TrainingStep"]

"""Pipeline schedules: GPipe, 1F1B and interleaved 1F1B (Narayanan et al. 2021, "Efficient Large-Scale
Language Model Training on GPU Clusters Using Megatron-LM", section 2.2), and ZB-H1 (Qi et al. 2024,
"Zero Bubble Pipeline Parallelism", ICLR, section 3.1).

With ``p`` stages, ``m`` microbatches and ``v`` virtual stages per device (interleaving), every schedule
runs ``m`` microbatches through each stage and idles ``(p - 1) / v`` microbatch-times while the pipeline
fills and drains (the bubble). They differ in how many microbatches' activations a stage holds at once:
GPipe all ``m``; 1F1B at most ``p`` (the first stage); interleaved 1F1B ``p (1 + (p - 1) / (p v))``
(Korthikanti et al. 2022, section 4.2.3); none holds more than the ``m`` microbatches there are.

ZB-H1 splits each backward pass into its input gradients (B) and its weight gradients (W), and runs a
stage's W late, in what would have been its bubble: the bubble shrinks from ``(p - 1)(F + B + W)`` to
``(p - 1)(F + B - W)`` microbatch-stage times, with 1F1B's peak of ``p`` microbatches in flight
(:meth:`Schedule.bubble`: the run gives F + B + W and W).

    >>> s = Schedule("interleaved", stages=8, microbatches=64, interleave=3)
    >>> round(s.bubble_fraction, 4), s.in_flight, s.sends_per_microbatch
    (0.0365, 10.333333333333334, 6)
    >>> Schedule("1f1b", stages=8, microbatches=4).in_flight
    4
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")


@dataclass(frozen=True)
class Schedule:
    name: str
    stages: int          # p: pipeline stages (devices along the pipeline axis)
    microbatches: int    # m: microbatches per iteration (per data-parallel replica)
    interleave: int = 1  # v: model chunks per device (virtual stages)

    def __post_init__(self):
        if self.name not in SCHEDULES:
            raise UsageError(f"unknown pipeline schedule {self.name!r}; choose one of {', '.join(SCHEDULES)}")
        for what, v in (("stages", self.stages), ("microbatches", self.microbatches),
                        ("interleave", self.interleave)):
            if v < 1:
                raise UsageError(f"pipeline {what} must be at least 1, not {v}")
        if self.interleave > 1 and self.name != "interleaved":
            raise UsageError(f"--interleave {self.interleave} needs the interleaved schedule")
        if self.name == "interleaved" and self.stages > 1 and self.microbatches % self.stages:
            raise UsageError(f"the interleaved schedule needs microbatches ({self.microbatches}) divisible by "
                             f"the pipeline stages ({self.stages})")

    @property
    def bubble_microbatches(self) -> float:
        """Microbatch-times each device idles per iteration: (p - 1) / v."""
        return (self.stages - 1) / self.interleave

    def bubble(self, microbatch: float, weight_grads: float) -> float:
        """Seconds each device idles per iteration, ``microbatch`` being one microbatch's time through a
        stage (forward, backward and what runs with them) and ``weight_grads`` the part of its backward that
        computes the weights' gradients (W): ZB-H1 runs W in the bubble, ``(p - 1)(microbatch - 2 W)``;
        the others ``(p - 1) / v`` microbatches."""
        if self.name == "zb-h1":
            return max(0.0, (self.stages - 1) * (microbatch - 2 * weight_grads))
        return self.bubble_microbatches * microbatch

    @property
    def bubble_fraction(self) -> float:
        """The bubble over the useful time: (p - 1) / (v m)."""
        return self.bubble_microbatches / self.microbatches

    @property
    def in_flight(self) -> float:
        """Microbatches whose activations the first stage holds at the peak (in units of one microbatch
        through that stage's layers), at most ``m``."""
        p, m, v = self.stages, self.microbatches, self.interleave
        if self.name == "gpipe" or p == 1:
            return m if self.name == "gpipe" else 1
        if self.name in ("1f1b", "zb-h1"):
            return min(p, m)
        return min(m, p * (1 + (p - 1) / (p * v)))     # never more than the microbatches there are

    @property
    def sends_per_microbatch(self) -> int:
        """Point-to-point sends a device makes per microbatch: an activation forward and a gradient backward
        at each of its ``v`` chunk boundaries (none without a pipeline)."""
        return 0 if self.stages == 1 else 2 * self.interleave

    def as_dict(self) -> dict:
        return {"schedule": self.name, "stages": self.stages, "microbatches": self.microbatches,
                "interleave": self.interleave, "bubble_fraction": self.bubble_fraction,
                "in_flight_microbatches": self.in_flight, "sends_per_microbatch": self.sends_per_microbatch}


def default_schedule(stages: int, interleave: int) -> str:
    """Megatron's default: interleaved 1F1B when chunks are interleaved, 1F1B otherwise."""
    return "interleaved" if interleave > 1 else "1f1b"

"""Where a run's parallel groups sit on the machine, and what their collectives cost there.

Groups are laid out innermost first (TP, then CP or PP, then DP), so a group spanning ``span`` consecutive
devices stays in the fast domain -- a GPU node's NVLink, a TPU pod's ICI -- where it fits and crosses the
data-centre network otherwise. A collective's bandwidth is the link's (NVLink at a GPU's one-way figure,
a TPU ring along one ICI axis both ways -- the book's W_ici --, the network at its per-chip figure) times
the preset's achieved fraction for that link and collective, plus its fixed latency.

    >>> from symcost.hardware import hardware
    >>> link(hardware("h100"), 8), link(hardware("h100"), 16), link(hardware("tpu-v5p"), 64)
    ('nvlink', 'dcn', 'ici')
"""
from __future__ import annotations

import math


def link(hw, span: int) -> str:
    """The link a group spanning ``span`` consecutive devices uses."""
    domain = hw.nvlink_domain or (math.prod(hw.pod) if hw.topology.startswith("torus") else 1)
    return ("nvlink" if hw.nvlink_domain else "ici") if span <= domain else "dcn"


def bandwidth(hw, link_kind: str, kind: str = "") -> tuple[float, float]:
    """(bytes a second, latency in seconds) a collective of ``kind`` gets over ``link_kind``."""
    eta, lat = hw.efficiency.net(link_kind, kind)
    bw = {"dcn": hw.dcn_bandwidth, "ici": hw.ici_bandwidth}.get(link_kind, hw.ici_one_way)
    return bw * eta, lat


def collective(hw, kind: str, nbytes: float, group: int, link_kind: str) -> float:
    """Seconds of a ring AllReduce / AllGather / ReduceScatter of ``nbytes`` (the whole tensor) over
    ``group`` devices (nothing for a group of one)."""
    if group == 1:
        return 0.0
    bw, lat = bandwidth(hw, link_kind, kind)
    share = (group - 1) / group * (2 if kind == "AllReduce" else 1)
    return share * nbytes / bw + lat


__all__ = ["link", "bandwidth", "collective"]

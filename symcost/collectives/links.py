"""Link models: how fast a group of mesh axes moves bytes, and how many hops its collectives take.

Every collective's time is ``max(T_min * hops, bytes / bandwidth)`` (book Part 3, "a latency floor of
about 1 us per hop"). What differs by link kind is the bandwidth and the fraction of V that crosses the
busiest link:

- ``ici`` with wraparound (a ring): V / (W_ici * links), W_ici the bidirectional bandwidth per link and
  ``links`` the torus dimensions the axes span (book Part 3, "AllGather ... V / W_ici"; Part 2: "a
  collective over k torus axes gets k times the bandwidth"); hops edge / 2 per torus dimension, where an
  axis of n chips over k dimensions has edges of n^(1/k).
- ``ici`` without wraparound (a line): the data crosses the line one way, (n-1)/n of V over the one-way
  bandwidth W_ici / 2 (book Part 3, the 560 us example on a v5e 4-chip axis); hops |axis| - 1.
- ``nvlink`` (a switched domain): every GPU reaches every other in one hop; V (n-1)/n through each GPU's
  one-way link (NVIDIA NVLink Switch; HARDWARE.md).
- ``dcn`` (between slices): the per-chip DCN bandwidth (book Part 5, "scaling between pods").
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Group:
    """The devices a collective over ``axes`` runs among, as the link model sees them."""

    kind: str          # ici | nvlink | dcn
    ring: bool         # every axis wraps around (ici)
    n: object          # devices in the group
    sizes: tuple       # each axis's size
    links: object      # sum of the axes' link counts
    spans: tuple = ()  # each axis's link count where it is a number (the torus dimensions it spans)

    @property
    def switched(self) -> bool:
        return self.kind in ("nvlink", "dcn")


def group(axes, env) -> Group:
    info = [env.axis_info(a) for a in axes]
    sizes = tuple(env.axis(a) for a in axes)
    return Group(info[0].kind, all(a.ring for a in info), env.prod(sizes), sizes,
                 env.total(env.links(a) for a in axes), tuple(a.links if isinstance(a.links, int) else 1 for a in info))


def bandwidth(g: Group, env):
    """(bytes/s through the busiest link, fraction of V that crosses it) for AllGather-like traffic."""
    if g.kind == "dcn":
        return env.W_dcn, env.one
    if g.kind == "nvlink":
        return env.W_nvlink, (g.n - 1) / g.n
    if g.ring:
        return env.W_ici * g.links, env.one
    return env.W_ici / 2 * g.links, (g.n - 1) / g.n


def hops(g: Group, env):
    """Hops of one pass around the group: edge/2 per ring dimension, edge-1 per line dimension (an axis of n
    chips over k torus dimensions has k edges of n^(1/k)), 1 in a switch."""
    if g.kind == "nvlink":
        return env.one
    spans = g.spans or (1,) * len(g.sizes)
    edges = [n if k == 1 else n ** (1 / k) if env.is_numeric else n ** (env.one / k) for n, k in zip(g.sizes, spans)]
    if g.kind == "dcn" or g.ring:
        return env.total(k * e for k, e in zip(spans, edges)) / 2
    return env.total(k * (e - 1) for k, e in zip(spans, edges))


def one_way(g: Group, env):
    """Bytes/s one device can send to one neighbour (a collective-permute or a send)."""
    if g.kind == "ici" and g.ring:
        return env.W_ici / 2 * g.links
    bw, _ = bandwidth(g, env)
    return bw


def trivial(g: Group) -> bool:
    """A group of one device moves nothing and costs nothing."""
    try:
        return bool(g.n == 1)
    except TypeError:
        return False

"""Link models: how fast a group of mesh axes moves bytes, and how many hops its collectives take.

Every collective's time is ``max(T_min * hops, load)`` (book Part 3, "a latency floor of about 1 us per
hop"), ``load`` the seconds the busiest directed link of the collective's route needs: the route sends every
block along shortest paths of the axis's topology, and the closed forms here count the blocks on each link
(tests/collectives/test_link_loads.py routes every block on small topologies and checks them):

- ``ici`` with wraparound (rings): an AllGather runs on k edge-disjoint Hamiltonian rings through the k
  torus dimensions it spans, V / (W_ici k) for an even group (book Part 3, "AllGather ... V / W_ici";
  Part 2: "a collective over k torus axes gets k times the bandwidth"), W_ici the bidirectional bandwidth
  per link; hops edge / 2 per torus dimension, where an axis of n chips over k dimensions has edges of
  n^(1/k). An AllToAll routes dimension by dimension (:func:`all_to_all_load`).
- ``ici`` without wraparound (a line): the block of one end crosses every link, (n-1)/n of V over the
  one-way bandwidth W_ici / 2 (book Part 3, the 560 us example on a v5e 4-chip axis); hops |axis| - 1.
  Several dimensions with a line among them: :func:`gather_load`.
- ``nvlink`` (a switched domain): every GPU reaches every other in one hop; V (n-1)/n through each GPU's
  one-way link (NVIDIA NVLink Switch; HARDWARE.md).
- ``dcn`` (between slices): the per-chip DCN bandwidth, V (n-1)/n into each chip (book Part 5, "scaling
  between pods", whose V / W_dcn is the large-n limit kept where the slice count is a symbol).
- ``pcie`` (host memory): each chip's PCIe link to its host, W_pcie (book Part 2, "PCIe ... about 1.5e10
  B/s per chip").

A collective over axes of several kinds runs in :func:`phases`, innermost kind first (book Part 5,
multi-slice training: "ReduceScatter inside the slice, AllReduce across slices, AllGather inside").

A collective-permute (a relabelling of which device holds which block, or a send) is priced by its
:func:`route`: each block travels the shortest way along each torus axis in mesh order (dimension-order
routing), or one hop through a switch; the latency floor is ``T_min`` per hop of the longest route, the
throughput term the most blocks that cross one link one way, over that link's one-way bandwidth.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from .. import caching

#: link kinds from the inside of a slice out: a mixed collective runs its phases in this order
KIND_ORDER = ("ici", "nvlink", "dcn")


@dataclass(frozen=True)
class Group:
    """The devices a collective over ``axes`` runs among, as the link model sees them."""

    kind: str          # ici | nvlink | dcn
    ring: bool         # every axis wraps around (ici)
    n: int | sp.Expr   # devices in the group (an expression where a size is a symbol)
    sizes: tuple       # each axis's size
    links: int | sp.Expr   # sum of the axes' link counts
    spans: tuple = ()        # each axis's link count where it is a number (the torus dimensions it spans)
    rings: tuple = ()        # each axis wraps around
    link_counts: tuple = ()  # each axis's link count
    edges: tuple = ()        # each axis's slice edges where placed (() where not)

    @property
    def switched(self) -> bool:
        return self.kind in ("nvlink", "dcn")


def group(axes, env) -> Group:
    """The group of ``axes`` (of one link kind; see :func:`phases` for several)."""
    info = [env.axis_info(a) for a in axes]
    sizes = tuple(env.axis(a) for a in axes)
    counts = tuple(env.links(a) for a in axes)
    return Group(info[0].kind, all(a.ring for a in info), env.prod(sizes), sizes, env.total(counts),
                 tuple(a.links if isinstance(a.links, int) else 1 for a in info), tuple(a.ring for a in info), counts,
                 tuple(a.edges for a in info))


def phases(axes, env) -> tuple[Group, ...]:
    """``axes`` grouped by link kind, innermost first: one group when they share a kind (kept by ``env``,
    whose sizes and links they read: a ranker prices thousands of moves over the same axes)."""
    axes = tuple(axes)
    got = env.groups.get(axes)
    if got is None:
        kinds = [env.axis_info(a).kind for a in axes]
        if all(k == kinds[0] for k in kinds):
            got = (group(axes, env),)
        else:
            got = tuple(group(tuple(a for a, k in zip(axes, kinds) if k == kind), env)
                        for kind in KIND_ORDER if kind in kinds)
        env.groups[axes] = got
    return got


def by_kind(axes, mesh) -> list[tuple[str, tuple]]:
    """(link kind, its axes) for ``axes`` on ``mesh``, innermost kind first."""
    kinds = {a: mesh.axis(a).kind for a in axes}
    return [(k, tuple(a for a in axes if kinds[a] == k)) for k in KIND_ORDER if k in kinds.values()]


def hierarchical(axes: tuple, V, env):
    """(latency, throughput) of a ReduceScatter consuming V bytes (an AllGather producing them with
    ``outer_first``) over ``axes``: one pass per link kind, each kind's pass on V over the devices of the
    kinds inside it (book Part 5: the slow links carry 1/|inside| of the data; an AllGather runs the passes
    the other way round, on the same data). Passes run one after another, so their latencies and throughput
    terms add up. One kind: the collective of Part 3."""
    return env.kept_link_time(("hierarchical", axes, V), lambda: _hierarchical(axes, V, env))


def _hierarchical(axes, V, env):
    lat, thr, inside = env.zero, env.zero, env.one
    for g in phases(axes, env):
        l, t = gather_time(g, V / inside, env)
        lat, thr = lat + l, thr + t
        inside = inside * g.n
    return lat, thr


def bandwidth(g: Group, env):
    """Bytes/s through one link of a switched group (one way per device: NVLink, or a chip's DCN share)."""
    return env.W_dcn if g.kind == "dcn" else env.W_nvlink


def half(e, env):
    """floor(e / 2): the most blocks a ring of ``e`` sends one way when every block goes whole the shorter
    way round (ties the positive way); e / 2 when ``e`` is a symbol (power-of-two axes are even)."""
    k = _number(e)
    return e / 2 if k is None else env.one * (k // 2)


def quarter_square(e, env):
    """floor(e^2 / 4): the (source, destination) pairs that cross the middle link of a line of ``e``."""
    k = _number(e)
    return e ** 2 / 4 if k is None else env.one * (k * k // 4)


def physical(g: Group, env) -> list | None:
    """(edge, wraps) of every torus dimension the ICI group spans, axes in mesh order (an axis of n chips
    over k torus dimensions has k edges of n^(1/k)); None when a link count is a symbol."""
    out = []
    for n, ring, k, placed in zip(g.sizes, g.rings, g.link_counts, g.edges or ((),) * len(g.sizes)):
        if placed:
            out += [(env.one * e, ring) for e in placed]
            continue
        kk = _number(k)
        if kk is None:
            return None
        if kk == 1:
            out.append((n, ring))
            continue
        nn = _number(n)
        if nn is not None:
            e = round(nn ** (1 / kk))
            edge = env.one * e if e ** kk == nn else n ** (1 / kk)
        else:
            edge = n ** (env.one / kk)
        out += [(edge, ring)] * kk
    return out


def hops(g: Group, env):
    """Hops of one pass around the group: edge/2 per ring dimension, edge-1 per line dimension (an axis of n
    chips over k torus dimensions has k edges of n^(1/k)), 1 in a switch."""
    if g.kind == "nvlink":
        return env.one
    dims = physical(g, env) if g.kind == "ici" else None
    if dims is not None and any(g.edges):
        if g.ring:
            return env.total(e for e, _ in dims) / 2
        return env.total(e - 1 for e, _ in dims)
    spans = g.spans or (1,) * len(g.sizes)
    edges = [n if k == 1 else n ** (1 / k) if env.is_numeric else n ** (env.one / k) for n, k in zip(g.sizes, spans)]
    if g.kind == "dcn" or g.ring:
        return env.total(k * e for k, e in zip(spans, edges)) / 2
    return env.total(k * (e - 1) for k, e in zip(spans, edges))


def one_way(g: Group, env):
    """Bytes/s one device can send to one neighbour (a collective-permute or a send)."""
    if g.kind == "ici":
        return env.W_ici / 2 * g.links
    return bandwidth(g, env)


def trivial(g: Group) -> bool:
    """A group of one device moves nothing and costs nothing."""
    try:
        return bool(g.n == 1)
    except TypeError:
        return False


def gather_time(g: Group, V, env):
    """(latency, throughput) of an AllGather producing V bytes (or a ReduceScatter consuming them) in ``g``:
    the bytes on the busiest link of its route over that link's bandwidth (see :func:`gather_load`)."""
    if trivial(g):
        return env.zero, env.zero
    return env.T_min * hops(g, env), gather_load(g, V, env)


def gather_load(g: Group, V, env):
    """Seconds the busiest link of an AllGather's route needs. Every device's block of V / n is broadcast
    whole along shortest paths, so a link carries each block at most once:

    - switched (NVLink, DCN): each device receives the other n - 1 blocks through its own link, V (n-1)/n
      (DCN with a symbolic slice count: the book's V / W_dcn, its large-n limit);
    - every torus dimension wraps: k edge-disjoint Hamiltonian rings through the group's k dimensions (a
      product of cycles decomposes so: Kotzig 1973 for two, Foregger 1978 for three), each carrying V / k;
      on a ring of N a link carries floor(N/2) blocks one way: 2 floor(N/2) V / (N k W_ici), the book's
      V / (k W_ici) for even N;
    - otherwise (a line among the dimensions) the better of two routes: where the group is even and spans
      several dimensions, one ring through a Hamiltonian cycle of its grid (a grid with an even side has
      one), V / W_ici; and V split in k parts, part j gathering the dimensions in the
      order j, j+1, ..., k, 1, ..., j-1 (each pass on the blocks the earlier passes gathered); a directed
      link of dimension d carries f_d P_{j,d} blocks of V / (k N) in part j, f_d = e_d - 1 on a line,
      floor(e_d / 2) on a ring, P_{j,d} the product of the edges part j crossed before d. One line of n:
      2 V (n-1) / (n W_ici) (book Part 3, the v5e example).
    """
    if g.switched:
        known = _number(g.n) is not None
        frac = (g.n - 1) / g.n if g.kind == "nvlink" or known else env.one
        return V * frac / bandwidth(g, env)
    dims = physical(g, env)
    if dims is None:           # symbolic link counts: the book's form over M links
        if g.ring:
            return V / (env.W_ici * g.links)
        return 2 * V * (g.n - 1) / (g.n * env.W_ici * g.links)
    k = len(dims)
    if all(ring for _, ring in dims):
        return 2 * V * half(g.n, env) / (g.n * k * env.W_ici)
    shares = _rotated(dims, g.n, env)
    if k > 1 and _number(g.n) is not None and _number(g.n) % 2 == 0 and all(_known(x) for x in shares):
        return V * min(1, max(shares)) / env.W_ici   # or one ring through a Hamiltonian cycle of the grid
    return V * env.max(*shares) / env.W_ici


def _rotated(dims, n, env) -> list:
    """Each torus dimension's load under the rotated passes of :func:`gather_load`, in units of V / W_ici."""
    k = len(dims)
    terms = []
    for d, (e, ring) in enumerate(dims):
        f = half(e, env) if ring else e - 1
        crossed = env.zero
        for j in range(k):
            order = list(range(j, k)) + list(range(j))
            crossed = crossed + env.prod(dims[i][0] for i in order[:order.index(d)])
        terms.append(2 * f * crossed / (k * n))
    return terms


def all_to_all_load(g: Group, V, env):
    """Seconds the busiest link of an AllToAll's route needs, V the whole array over the group (each device
    sends V / n^2 to each other). Switched: each device sends n - 1 blocks through its link. On a torus,
    dimension-order routing, each block the shorter way round (a block halfway round a ring split between
    both ways): a directed link of dimension d (edge e) carries the (source, destination) pairs of its line
    that cross it times the n / e lines' worth of other coordinates: floor(e^2/4) pairs on a line, half
    that each way on a ring. Dimension d needs (2 or 1) floor(e^2/4) V / (e n W_ici) (line or ring); the
    links of different dimensions run at once, so the largest is the bound: on rings of even edges the
    book's V max(e) / (4 n W_ici) (Part 3, "ND AllToAll"); a line of n takes V / (2 W_ici), twice a ring."""
    if g.switched:
        return V * (g.n - 1) / (g.n * g.n) / bandwidth(g, env)
    dims = physical(g, env)
    if dims is None:           # symbolic link counts: each axis's M links as parallel lines or rings
        return env.max(*(V * n / ((4 if ring else 2) * g.n * env.W_ici * m)
                         for n, ring, m in zip(g.sizes, g.rings, g.link_counts)))
    return env.max(*((1 if ring else 2) * V * quarter_square(e, env) / (e * g.n * env.W_ici) for e, ring in dims))


def pcie_time(V, env):
    """(latency, throughput) of moving V bytes between a chip's HBM and its host over PCIe."""
    return env.T_min, V / env.W_pcie


# ------------------------------------------------------------------------------- collective-permutes


def _number(v):
    """``v`` as an int when it is a known whole number, else None."""
    try:
        f = float(v)
    except TypeError:
        return None
    return int(f) if f == int(f) else None


def _known(v) -> bool:
    """``v`` is a number (not an expression in symbols)."""
    try:
        float(v)
    except TypeError:
        return False
    return True


def sizes_known(axes, env):
    """The sizes of ``axes`` as ints, or None when one is a symbol."""
    out = tuple(_number(env.axis(a)) for a in axes)
    return None if any(s is None for s in out) else out


def _one_way_axis(a, env):
    info = env.axis_info(a)
    if info.kind == "ici":
        return env.W_ici / 2 * env.links(a)
    return env.W_dcn if info.kind == "dcn" else env.W_nvlink


def _kind_bandwidth(kind, env):
    return env.W_dcn if kind == "dcn" else env.W_nvlink


def permute_time(pairs, axes, block, env):
    """(latency, throughput) of a collective-permute of ``block`` bytes per device: ``pairs`` are (source,
    destination) coordinates over ``axes`` (ints)."""
    kinds = tuple(env.axis_info(a).kind for a in axes)
    rings = tuple(env.axis_info(a).ring for a in axes)
    sizes = sizes_known(axes, env)
    if sizes is None:
        raise ValueError("a route needs every axis's size")
    hop, loads = route(tuple(pairs), sizes, rings, kinds)
    return routed_time(hop, loads, axes, block, env)


def routed_time(hop, loads, axes, block, env):
    """(latency, throughput) of a route found by :func:`route` for blocks of ``block`` bytes."""
    if hop == 0:
        return env.zero, env.zero
    terms = []
    for key, load in loads:
        if not env.is_numeric:          # halves of blocks (a tie split both ways round) as exact fractions
            load = sp.Rational(load)
        bw = _one_way_axis(axes[key], env) if isinstance(key, int) else _kind_bandwidth(key, env)
        terms.append(block * load / bw)
    return env.T_min * hop, env.max(*terms)


def diameter_time(axes, block, env):
    """(latency, throughput) of a collective-permute whose sizes are symbols: the worst route, every ICI axis
    crossed end to end (|axis|/2 hops on a ring, |axis|-1 on a line), each switch once."""
    hop, terms, switched = env.zero, [], set()
    for a in axes:
        info = env.axis_info(a)
        if info.kind != "ici":
            switched.add(info.kind)
            continue
        d = env.axis(a) / 2 if info.ring else env.axis(a) - 1
        hop = hop + d
        terms.append(block * d / _one_way_axis(a, env))
    for k in switched:
        hop = hop + 1
        terms.append(block / _kind_bandwidth(k, env))
    return env.T_min * hop, env.max(*terms)


@caching.memoize(maxsize=16384)
def route(pairs: tuple, sizes: tuple, rings: tuple, kinds: tuple) -> tuple:
    """Route every block of a permutation: (hops of the longest route, ((axis index or switched kind, most
    blocks on one link one way), ...)). Torus axes are crossed in order, each the shorter way round (a line
    has one way; a block halfway round a ring goes half each way, so a ring of two moves a block over both
    its links); the axes of a switched kind are crossed together in one hop."""
    pos = [list(s) for s, _ in pairs]
    dst = [tuple(t) for _, t in pairs]
    length = [0] * len(pairs)
    loads: list = []                 # (an ICI dimension, or a link kind; the busiest link's load)
    for k, (n, ring, kind) in enumerate(zip(sizes, rings, kinds)):
        if kind != "ici":
            continue
        links: dict = {}
        for p, cur in enumerate(pos):
            s, t = cur[k], dst[p][k]
            if s == t:
                continue
            if ring:
                fwd = (t - s) % n
                ways = ((1, fwd, 1),) if fwd < n - fwd else ((-1, n - fwd, 1),) if fwd > n - fwd else \
                    ((1, fwd, 0.5), (-1, fwd, 0.5))       # halfway round: half each way
            else:
                ways = (((1 if t > s else -1), abs(t - s), 1),)
            row = tuple(cur[:k] + cur[k + 1:])
            for step, steps, share in ways:
                c = s
                for _ in range(steps):
                    key = (row, c, step)
                    links[key] = links.get(key, 0) + share
                    c = (c + step) % n
            length[p] += ways[0][1]
            cur[k] = t
        if links:
            loads.append((k, max(links.values())))
    for kind in ("nvlink", "dcn"):
        idx = [k for k, kd in enumerate(kinds) if kd == kind]
        if not idx:
            continue
        out: dict = {}
        into: dict = {}
        for p, cur in enumerate(pos):
            if all(cur[k] == dst[p][k] for k in idx):
                continue
            src = tuple(cur)
            for k in idx:
                cur[k] = dst[p][k]
            out[src] = out.get(src, 0) + 1
            into[tuple(cur)] = into.get(tuple(cur), 0) + 1
            length[p] += 1
        if out:
            loads.append((kind, max(max(out.values()), max(into.values()))))
    return max(length, default=0), tuple(loads)

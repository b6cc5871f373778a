"""The collectives' closed forms against a brute-force routing of every block.

For each collective and topology (rings, lines, tori with and without wraparound, multi-link axes,
switched domains, ICI then DCN passes) the route is simulated block by block on small topologies: bytes
are counted on every directed link, and the busiest link's load over its bandwidth must equal the closed
form of :mod:`symcost.collectives.links` exactly. Directed links are ``(node, dimension, +1 | -1)``; a
torus link carries W_ici / 2 one way; a switched device's link carries W one way.
"""
import itertools
import random

import pytest
import sympy as sp

from symcost.collectives import links
from symcost.env import Env
from symcost.mesh import parse_mesh
from symcost.symbols import W_ici, axis

from conftest import examples

ONE_WAY = 0.5          # W_ici = 1: a torus link carries 1/2 one way
FIGURES = {"W_ici": 1.0, "W_dcn": 1.0, "W_nvlink": 1.0, "T_min": 0.0}


# ------------------------------------------------------------------------------------ the topology
def nodes(dims):
    return list(itertools.product(*(range(e) for e, _ in dims)))


def step(node, d, s, dims):
    e, ring = dims[d]
    c = list(node)
    c[d] = (c[d] + s) % e if ring else c[d] + s
    return tuple(c)


def line_path(node, d, target, dims):
    """The directed links from ``node`` to coordinate ``target`` along dimension d, the shorter way (a tie
    the positive way): [(link, share)] lists, one per way taken (a tie split in halves when ``split``)."""
    e, ring = dims[d]
    s, t = node[d], target
    if ring:
        fwd = (t - s) % e
        ways = [(1, fwd)] if fwd < e - fwd else [(-1, e - fwd)] if fwd > e - fwd else [(1, fwd), (-1, fwd)]
    else:
        ways = [(1 if t > s else -1, abs(t - s))]
    out = []
    for sgn, n in ways:
        cur, path = node, []
        for _ in range(n):
            path.append((cur, d, sgn))
            cur = step(cur, d, sgn, dims)
        out.append(path)
    return out


# ------------------------------------------------------------------------------------ AllGather routes
def broadcast_tree(node, d, dims):
    """The links a block crosses to reach every node of its line along d, sent whole (ties the positive
    way): the union of its shortest paths."""
    e, _ = dims[d]
    tree = set()
    for t in range(e):
        if t != node[d]:
            tree.update(line_path(node, d, t, dims)[0])
    return tree


def gather_rotation(dims, V):
    """V split in k parts; part j gathers the dimensions in the order j, ..., k-1, 0, ..., j-1."""
    k, pts = len(dims), nodes(dims)
    n = len(pts)
    load = {}
    for j in range(k):
        held = {p: 1 for p in pts}                    # blocks of V / (k n) each node holds
        for d in list(range(j, k)) + list(range(j)):
            for p in pts:
                for link in broadcast_tree(p, d, dims):
                    load[link] = load.get(link, 0) + held[p] * V / (k * n)
            held = {p: held[p] * dims[d][0] for p in pts}
    return max(load.values()) / ONE_WAY


def hamiltonian_decomposition(dims, seed=0):
    """k edge-disjoint Hamiltonian cycles covering every link of a torus (every dimension wraps), found by
    a randomised search: each a list of directed links in cycle order."""
    pts = nodes(dims)
    k = len(dims)
    if k == 1:
        return [[(p, 0, 1) for p in sorted(pts)]]
    assert k == 2
    edges = [(p, d) for p in pts for d in range(2)]        # the link from p to p + e_d
    rng = random.Random(seed)
    for _ in range(2000):
        cycle = _random_cycle(pts, edges, set(), dims, rng)
        if cycle is None:
            continue
        used = {e for e, _ in cycle}
        rest = _cycle_of(set(edges) - used, pts, dims)
        if rest is not None:
            return [[_directed(e, s, dims) for e, s in cycle], [_directed(e, s, dims) for e, s in rest]]
    raise AssertionError("no decomposition found")


def _directed(edge, forward, dims):
    p, d = edge
    return (p, d, 1) if forward else (step(p, d, 1, dims), d, -1)


def _incident(p, edges, dims):
    out = []
    for d in range(len(dims)):
        out.append(((p, d), True))                          # p -> p + e_d
        q = step(p, d, -1, dims)
        out.append(((q, d), False))                         # p -> p - e_d, the edge from q
    return [(e, f) for e, f in out if e in edges]


def _random_cycle(pts, edges, banned, dims, rng):
    start = pts[0]
    path, seen, used = [], {start}, set()
    edge_set = set(edges)
    budget = [20000]                      # steps before this attempt gives up (the caller tries again)

    def dfs(p, depth):
        budget[0] -= 1
        if budget[0] < 0:
            return False
        opts = _incident(p, edge_set, dims)
        rng.shuffle(opts)
        for e, fwd in opts:
            if e in used:
                continue
            q = step(p, e[1], 1, dims) if fwd else e[0]
            if q == start and len(seen) == len(pts):
                path.append((e, fwd))
                return True
            if q in seen:
                continue
            seen.add(q)
            used.add(e)
            path.append((e, fwd))
            if dfs(q, depth + 1):
                return True
            path.pop()
            used.discard(e)
            seen.discard(q)
        return False
    return path if dfs(start, 0) else None


def _cycle_of(edges, pts, dims):
    """The edges as one Hamiltonian cycle (each node on two of them, one cycle), or None."""
    if len(edges) != len(pts):
        return None
    start, p, out, left = pts[0], pts[0], [], set(edges)
    while True:
        nxt = [(e, f) for e, f in _incident(p, left, dims)]
        if not nxt:
            break
        e, f = nxt[0]
        left.discard(e)
        out.append((e, f))
        p = step(p, e[1], 1, dims) if f else e[0]
        if p == start:
            break
    return out if not left and p == start else None


def snake(sizes):
    """A Hamiltonian path through a grid of ``sizes`` (boustrophedon: consecutive nodes are neighbours)."""
    if not sizes:
        return [()]
    rest = snake(sizes[1:])
    out = []
    for i in range(sizes[0]):
        out += [(i,) + r for r in (rest if i % 2 == 0 else rest[::-1])]
    return out


def grid_cycle(dims):
    """A Hamiltonian cycle through a grid with an even side (wrap links unused), as directed links: along
    the even dimension's first row of a snake through the others, then back and forth over the rest, home
    along column 0."""
    d0 = next(d for d, (e, _) in enumerate(dims) if e % 2 == 0)
    others = [d for d in range(len(dims)) if d != d0]
    path = snake([dims[d][0] for d in others])             # the other dimensions as one line
    a, b = dims[d0][0], len(path)

    def node(r, c):
        out = [0] * len(dims)
        out[d0] = r
        for d, x in zip(others, path[c]):
            out[d] = x
        return tuple(out)
    order = [(0, c) for c in range(b)]
    for r in range(1, a):
        cols = range(b - 1, 0, -1) if r % 2 == 1 else range(1, b)
        order += [(r, c) for c in cols]
    order += [(r, 0) for r in range(a - 1, 0, -1)]
    cycle = []
    for (r1, c1), (r2, c2) in zip(order, order[1:] + order[:1]):
        u, v = node(r1, c1), node(r2, c2)
        d = next(i for i in range(len(dims)) if u[i] != v[i])
        assert sum(x != y for x, y in zip(u, v)) == 1 and abs(u[d] - v[d]) == 1   # a physical link
        cycle.append((u, d, v[d] - u[d]))
    assert len(set(order)) == len(nodes(dims))
    return cycle


def ring_broadcast(rings, n, V, dims):
    """Every node's block broadcast whole around each ring (ties the positive way), V split over the rings."""
    load = {}
    for r, ring in enumerate(rings):
        back = [(step(l[0], l[1], l[2], dims), l[1], -l[2]) for l in ring]   # each link the other way
        for i in range(n):
            for j in range(1, n):
                path = [ring[(i + s) % n] for s in range(j)] if j <= n - j else \
                    [back[(i - 1 - s) % n] for s in range(n - j)]
                for link in path:
                    load.setdefault(link, set()).add((r, i))
    return max(len(v) for v in load.values()) * V / (len(rings) * n) / ONE_WAY


def gather_brute(dims, V):
    n = len(nodes(dims))
    if all(r for _, r in dims):
        return ring_broadcast(hamiltonian_decomposition(dims), n, V, dims)
    best = gather_rotation(dims, V)
    if len(dims) > 1 and n % 2 == 0:
        best = min(best, ring_broadcast([grid_cycle(dims)], n, V, dims))
    return best


# ------------------------------------------------------------------------------------ AllToAll route
def all_to_all_brute(dims, V):
    """Every (source, destination) block of V / n^2, dimension by dimension, the shorter way (halfway round
    a ring: half each way)."""
    pts = nodes(dims)
    n = len(pts)
    blk = V / (n * n)
    load = {}
    for s in pts:
        for t in pts:
            cur = s
            for d in range(len(dims)):
                if cur[d] == t[d]:
                    continue
                ways = line_path(cur, d, t[d], dims)
                for path in ways:
                    for link in path:
                        load[link] = load.get(link, 0) + blk / len(ways)
                c = list(cur)
                c[d] = t[d]
                cur = tuple(c)
    return max(load.values()) / ONE_WAY


def switched_brute(n, V, kind):
    """Through a switch: an AllGather's blocks enter each device's link, an AllToAll's leave it."""
    into = {d: 0.0 for d in range(n)}
    out = {d: 0.0 for d in range(n)}
    for s in range(n):
        for t in range(n):
            if s != t:
                w = V / n if kind == "gather" else V / (n * n)
                out[s] += w if kind == "all_to_all" else 0
                into[t] += w
    return max(max(into.values()), max(out.values()))


# ------------------------------------------------------------------------------------ the closed forms
def dims_of(mesh_text):
    """The torus dimensions of an ICI mesh written as in --mesh (X=16:2 is a 4 x 4 torus)."""
    out = []
    for a in parse_mesh(mesh_text).axes:
        k = a.links
        e = round(a.size ** (1 / k))
        out += [(e, a.wraparound is not False)] * k
    return out


def group(mesh_text):
    mesh = parse_mesh(mesh_text)
    env = Env.numeric(mesh, {}, FIGURES)
    return links.group(mesh.names, env), env


TOPOLOGIES = ["X=2", "X=3", "X=4", "X=5", "X=8", "X=2:nowrap", "X=3:nowrap", "X=4:nowrap", "X=7:nowrap",
              "X=8:nowrap", "X=4,Y=4", "X=3,Y=4", "X=2,Y=4", "X=4:nowrap,Y=4:nowrap", "X=2:nowrap,Y=4:nowrap",
              "X=8:nowrap,Y=2:nowrap", "X=3:nowrap,Y=3:nowrap", "X=6:nowrap,Y=2:nowrap",
              "X=4,Y=2:nowrap", "X=3:nowrap,Y=5", "X=16:2", "X=16:2:nowrap", "X=2:nowrap,Y=3:nowrap,Z=4:nowrap",
              "X=4,Y=4:nowrap,Z=2"]


@pytest.mark.parametrize("mesh", TOPOLOGIES)
def test_all_gather_closed_form_is_the_busiest_link(mesh):
    g, env = group(mesh)
    dims = dims_of(mesh)      # (three wrapped dimensions would need a three-cycle decomposition: not searched)
    assert links.gather_load(g, 1.0, env) == pytest.approx(gather_brute(dims, 1.0), rel=1e-12)


@pytest.mark.parametrize("mesh", TOPOLOGIES + ["X=2,Y=2,Z=2", "X=4,Y=4,Z=4", "X=64:3"])
def test_all_to_all_closed_form_is_the_busiest_link(mesh):
    g, env = group(mesh)
    assert links.all_to_all_load(g, 1.0, env) == pytest.approx(all_to_all_brute(dims_of(mesh), 1.0), rel=1e-12)


@pytest.mark.parametrize("n", [2, 3, 8])
@pytest.mark.parametrize("kind", ["nvlink", "dcn"])
def test_switched_closed_forms_are_the_busiest_link(n, kind):
    g, env = group(f"X={n}:{kind}")
    assert links.gather_load(g, 1.0, env) == pytest.approx(switched_brute(n, 1.0, "gather"))
    assert links.all_to_all_load(g, 1.0, env) == pytest.approx(switched_brute(n, 1.0, "all_to_all"))


@pytest.mark.parametrize("inner,outer", [("X=4", 2), ("X=4:nowrap,Y=2:nowrap", 4), ("X=3", 3)])
def test_ici_then_dcn_passes_add_up(inner, outer):
    """An AllGather over a slice axis and a DCN axis (book Part 5): the DCN pass on 1/|slice| of the data,
    then the slice's pass on all of it; the passes run one after another."""
    mesh = parse_mesh(f"S={outer}:dcn," + inner)
    env = Env.numeric(mesh, {}, FIGURES)
    V = 1.0
    ici = dims_of(inner)
    n_inside = len(nodes(ici))
    lat, thr = links.hierarchical(mesh.names, V, env)
    assert thr == pytest.approx(gather_brute(ici, V) + switched_brute(outer, V / n_inside, "gather"))


def test_the_line_defect_is_gone():
    """An AllToAll on a line of 8 (a v5p axis of 8 without wraparound) loads its middle link with 16 of
    the 64 blocks each way: V / 4, V / (2 W_ici) -- not 7V / (8 W_ici)."""
    g, env = group("X=8:nowrap")
    assert links.all_to_all_load(g, 1.0, env) == pytest.approx(0.5)


def test_symbolic_forms_are_the_books():
    """With symbolic sizes the closed forms are the book's (even edges): a ring's AllGather V / W_ici, an
    AllToAll V |X| / (4 |X| W_ici) = V / (4 W_ici) on a ring, V / (2 W_ici) on a line."""
    V = sp.Symbol("V")
    for text, gather, a2a in [("X", V / W_ici, V / (4 * W_ici)),
                              ("X:nowrap", 2 * V * (axis("X") - 1) / (axis("X") * W_ici), V / (2 * W_ici))]:
        mesh = parse_mesh(text)
        env = Env.symbolic(mesh)
        g = links.group(("X",), env)
        assert sp.simplify(links.gather_load(g, V, env) - gather) == 0
        assert sp.simplify(links.all_to_all_load(g, V, env) - a2a) == 0


@pytest.mark.parametrize("mesh", ["X=4", "X=3", "X=4:nowrap", "X=4,Y=4", "X=2:nowrap,Y=4:nowrap",
                                  "X=8:nowrap,Y=2:nowrap", "X=4,Y=2:nowrap", "X=16:2"])
def test_the_move_rules_price_their_routes(mesh):
    """The registry's rules use these loads: an AllGather as routed; a ReduceScatter, its transpose, sends
    every block back along the reversed links (the same loads); an AllReduce is both; an AllToAll as
    routed. Blocks of A[I, J] with I = 96 x J = 48 in bf16 (both divide by every mesh's devices: a padded
    block moves more, test_collectives.py), over every axis of the mesh."""
    from symcost.collectives import Move
    from symcost.layout import Layout
    m = parse_mesh(mesh)
    env = Env.numeric(m, {"I": 96, "J": 48}, FIGURES)
    axes = m.names
    V = 96 * 48 * 2.0
    dims = dims_of(mesh)
    full = Layout.of("A", "IJ", [(), ()])
    rows = Layout.of("A", "IJ", [axes, ()])
    cols = Layout.of("A", "IJ", [(), axes])
    partial = Layout("A", ("I", "J"), ((), ()), frozenset(axes))

    def thr(kind, before, after):
        return Move(kind, axes, before, after).rule.link_time(Move(kind, axes, before, after), env)[1]
    gather = gather_brute(dims, V)
    assert thr("AllGather", rows, full) == pytest.approx(gather, rel=1e-12)
    assert thr("ReduceScatter", partial, rows) == pytest.approx(gather, rel=1e-12)
    assert thr("AllReduce", partial, full) == pytest.approx(2 * gather, rel=1e-12)
    assert thr("AllToAll", rows, cols) == pytest.approx(all_to_all_brute(dims, V), rel=1e-12)


# ------------------------------------------------------------------------------------ random topologies
from hypothesis import given, settings, strategies as st   # noqa: E402

AXIS = st.tuples(st.integers(2, 5), st.booleans())


@settings(max_examples=examples(25), deadline=None)
@given(st.lists(AXIS, min_size=1, max_size=3).filter(lambda ax: len(ax) == 1 or not all(w for _, w in ax)))
def test_random_topologies_route_to_the_closed_forms(axes):
    """Any mesh of up to three ICI axes of 2 to 5 chips, each a ring or a line (several rings excepted:
    their decompositions are searched for the listed topologies above): the AllGather and AllToAll routes'
    busiest links are the closed forms."""
    text = ",".join(f"{'XYZ'[i]}={n}{'' if wrap else ':nowrap'}" for i, (n, wrap) in enumerate(axes))
    g, env = group(text)
    dims = dims_of(text)
    assert links.gather_load(g, 1.0, env) == pytest.approx(gather_brute(dims, 1.0), rel=1e-12)
    assert links.all_to_all_load(g, 1.0, env) == pytest.approx(all_to_all_brute(dims, 1.0), rel=1e-12)

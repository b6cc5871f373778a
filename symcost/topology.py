"""Meshes on real hardware: which links each axis runs over, and whether the request is possible at all.

A preset knows its domains: a GPU's NVLink domain (8 GPUs on an H100 node; beyond it, InfiniBand), a TPU's
torus and pod (a v5e slice holds at most 16x16 chips). Axes are laid out inner-first, as a JAX device
mesh orders devices: the last axes fill the fast domain, the rest cross the slower network::

    >>> from symcost.hardware import hardware
    >>> from symcost.mesh import parse_mesh
    >>> p = place(parse_mesh("X=32,Y=8"), hardware("h100"))
    >>> str(p.mesh)
    'X=32:dcn,Y=8:nvlink'
    >>> print(p.notes[0])
    Y=8 runs inside the 8-GPU NVLink domain; X=32 crosses nodes over InfiniBand (W_dcn per GPU)
    >>> str(place(parse_mesh("X=4096"), hardware("tpu-v5p")).mesh)     # a full 16x16x16 torus as one axis
    'X=4096:3'
    >>> str(place(parse_mesh("X=64"), hardware("tpu-v5p")).mesh)       # 64 v5p chips: a 4x4x4 cube, wrapped
    'X=64:3'
    >>> str(place(parse_mesh("X=16,Y=4"), hardware("tpu-v5p")).mesh)   # X over two of its dimensions
    'X=16:2,Y=4'

A request the machine cannot hold is an error that says why.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from . import caching
from .errors import UsageError
from .mesh import Mesh


@dataclass(frozen=True)
class Placement:
    """The mesh with every axis's link kind, link count and wraparound settled, and what was decided."""

    mesh: Mesh
    notes: tuple[str, ...] = ()


def place(mesh: Mesh, hw) -> Placement:
    """The mesh on ``hw``'s chips (kept: every candidate of a search is bound to the same mesh and chip)."""
    if hw is None:
        return Placement(mesh)
    return _placed(mesh, hw)


@caching.memoize(maxsize=64)
def _placed(mesh: Mesh, hw) -> Placement:
    if hw.topology == "switched":
        return _switched(mesh, hw)
    return _torus(mesh, hw)


def _refuse_torus_words(mesh: Mesh, hw) -> None:
    for a in mesh.axes:
        if a.wraparound is not None:
            raise UsageError(f"mesh axis {a}: {hw.name} connects its GPUs through NVLink switches, not a torus, so "
                             f"{':wrap' if a.wraparound else ':nowrap'} means nothing there; drop it")
        if a.kind == "ici" and a.kind_written:
            raise UsageError(f"mesh axis {a}: {hw.name} has no ICI; its axes run over NVLink inside a node "
                             f"(:nvlink) or InfiniBand between nodes (:dcn)")
        if a.links != 1:
            raise UsageError(f"mesh axis {a}: a link count describes a torus; {hw.name} is a switched NVLink domain")


def _switched(mesh: Mesh, hw) -> Placement:
    """Inner axes inside the NVLink domain while they fit; every axis outside it crosses nodes."""
    _refuse_torus_words(mesh, hw)
    domain = hw.nvlink_domain or 1
    inside, axes, outside, filled = 1, list(mesh.axes), [], []
    crossed = False
    for i in reversed(range(len(axes))):
        a = axes[i]
        if a.kind == "dcn" or crossed:
            if a.kind == "nvlink" and a.kind_written:
                raise UsageError(f"mesh axis {a} is marked :nvlink, but the axes after it already fill "
                                 f"{hw.name}'s {domain}-GPU NVLink domain; an outer axis crosses nodes")
            axes[i] = replace(a, kind="dcn")
            outside.append(axes[i])
            crossed = True
            continue
        if a.size is None:
            axes[i] = replace(a, kind="nvlink")
            continue
        if inside * a.size <= domain:
            inside *= a.size
            axes[i] = replace(a, kind="nvlink")
            filled.append(axes[i])
            continue
        if a.kind == "nvlink" and a.kind_written:
            raise UsageError(f"mesh axis {a} needs {inside * a.size} GPUs in one NVLink domain; {hw.name}'s holds "
                             f"{domain}: mark it :dcn (InfiniBand) or make it smaller")
        axes[i] = replace(a, kind="dcn")
        outside.append(axes[i])
        crossed = True
    notes = []
    if outside:
        ins = ",".join(f"{a.name}={a.size}" for a in reversed(filled)) or "no axis"
        outs = ",".join(f"{a.name}={a.size}" for a in reversed(outside))
        notes.append(f"{ins} runs inside the {domain}-GPU NVLink domain; {outs} crosses nodes over InfiniBand "
                     f"(W_dcn per GPU)")
    return Placement(Mesh(tuple(axes)), tuple(notes))


def _torus(mesh: Mesh, hw) -> Placement:
    """ICI axes on the slice's torus (link counts and wraparound from the pod's rules); DCN axes between slices."""
    for a in mesh.axes:
        if a.kind == "nvlink":
            raise UsageError(f"mesh axis {a}: {hw.name} has no NVLink; its chips connect over ICI inside a slice "
                             f"and over DCN between slices (:dcn)")
    ici = [i for i, a in enumerate(mesh.axes) if a.kind == "ici"]
    if not ici or any(mesh.axes[i].size is None for i in ici):
        return Placement(mesh)
    pod = 1
    for e in hw.pod:
        pod *= e
    chips = 1
    for i in ici:
        chips *= mesh.axes[i].size   # type: ignore[operator]  # every ICI axis is sized (checked above)
    if chips > pod:
        shape = "x".join(map(str, hw.pod))
        raise UsageError(f"the mesh puts {chips} chips in one {hw.name} slice; a slice holds at most {pod} (a {shape} "
                         f"pod): mark the axes that cross slices with :dcn (e.g. {mesh.axes[ici[0]].name}="
                         f"{mesh.axes[ici[0]].size}:dcn)")
    if hw.topology == "torus3d" and not any(mesh.axes[i].links_written or isinstance(mesh.axes[i].links, str)
                                            for i in ici):
        placed, why = _slice(mesh, hw, ici, chips)
        if placed is not None:
            return placed
    else:
        why = None
    axes, notes = list(mesh.axes), ([why] if why else [])
    fits = all(mesh.axes[i].size <= max(hw.pod) for i in ici) and len(ici) <= hw.torus_dims
    links: list[int | None] = []
    for i in ici:
        a = axes[i]
        if isinstance(a.links, str):
            links.append(None)
            continue
        # the link model as written; otherwise an axis larger than an edge spans several torus dimensions
        k = a.links if (a.links_written or fits) else None
        edges = hw.edges(a.size, k)
        if k is None and len(edges) > 1:
            axes[i] = a = replace(a, links=len(edges))
            notes.append(f"{a.name}={a.size} spans {len(edges)} torus dimensions of {hw.name} "
                         f"({'x'.join(map(str, edges))}): {len(edges)} links")
        links.append(a.links if isinstance(a.links, int) else None)
    if all(isinstance(axes[i].links, int) for i in ici):
        wrap = hw.wraparound([axes[i].size for i in ici], [axes[i].links for i in ici])
        for i, w in zip(ici, wrap):
            if axes[i].wraparound is None:
                axes[i] = replace(axes[i], wraparound=bool(w))
    return Placement(Mesh(tuple(axes)), tuple(notes))


def _slice(mesh: Mesh, hw, ici: list[int], chips: int) -> tuple[Placement | None, str | None]:
    """The ICI axes on the slice a 3D-torus TPU gives for their chips (book Part 2: slices are near-cubes,
    64 v5p chips a 4x4x4 cube; :meth:`Hardware.edges`), each axis a whole number of the slice's dimensions
    (as ``jax.experimental.mesh_utils.create_device_mesh`` lays a mesh out without splitting a physical
    axis), the last axes first. Every axis wraps where the slice does (a multiple of the 4x4x4 cube).
    (None, why) where the axes cannot be so laid out."""
    shape = hw.edges(chips, hw.torus_dims)
    dims = [e for e in shape if e > 1]
    size = {i: mesh.axes[i].size or 1 for i in ici}        # every ICI axis has a size here
    order = [i for i in reversed(ici) if size[i] > 1]
    spans = _assign([size[i] for i in order], dims)
    text = "x".join(map(str, shape))
    if spans is None:
        names = ",".join(f"{mesh.axes[i].name}={mesh.axes[i].size}" for i in ici)
        return None, (f"{names} is not a {hw.name} slice: {chips} chips are a {text} slice, and an axis "
                      f"that is not a product of whole slice dimensions ({', '.join(map(str, dims))}) splits one; "
                      f"each axis is priced on a torus of its own")
    wrap = len(dims) == 3 and all(e % 4 == 0 for e in dims)
    axes, notes = list(mesh.axes), []
    for i, edges in zip(order, spans):
        a = axes[i]
        axes[i] = replace(a, links=len(edges), edges=tuple(edges),
                          wraparound=a.wraparound if a.wraparound is not None else wrap)
        if len(edges) > 1:
            notes.append(f"{a.name}={a.size} spans {len(edges)} dimensions of the {text} {hw.name} slice "
                         f"({'x'.join(map(str, edges))}): {len(edges)} links")
    return Placement(Mesh(tuple(axes)), tuple(reversed(notes))), None


def _assign(sizes: list[int], dims: list[int]) -> list[tuple[int, ...]] | None:
    """Disjoint groups of ``dims`` (by position), one per size, whose products are the sizes, using every
    dimension; each group as few dimensions as it can, taken in the slice's order. None: no such split."""
    def rec(k: int, free: tuple) -> list | None:
        if k == len(sizes):
            return [] if not free else None
        for r in range(1, len(free) + 1):
            for pick in itertools.combinations(free, r):
                prod = 1
                for j in pick:
                    prod *= dims[j]
                if prod != sizes[k]:
                    continue
                rest = rec(k + 1, tuple(j for j in free if j not in pick))
                if rest is not None:
                    return [tuple(dims[j] for j in pick)] + rest
        return None
    return rec(0, tuple(range(len(dims))))

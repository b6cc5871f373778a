"""What a move kind is: one frozen rule value, and the :class:`Move` it describes.

A rule holds everything about one kind of move in one place: its signature in the book's notation,
which edges of the layout graph it creates (the moves the engine may insert), the bytes V its time
formula uses, its link time per link model (latency floor and throughput term, each citing a source),
its transpose (for backward passes), the words that explain it, what it does to the devices' blocks
(the simulator's semantics), its JAX lowering, and the bytes each device sends under the ring model
that symcost and XLA are compared with. Adding a kind is one module in this package and one test.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import ClassVar, Iterator

from .. import caching
from ..errors import ShardingError
from ..layout import Layout
from ..mesh import Mesh
from ..notation import format_axes
from .links import by_kind

RULES: dict[str, "MoveRule"] = {}


def register(cls: type[MoveRule]) -> type[MoveRule]:
    """Class decorator: the kind's one rule value joins the registry."""
    RULES[cls.name] = cls()
    return cls


@dataclass(frozen=True)
class Move:
    """One collective (or local slice) taking tensor ``before`` to ``after`` over mesh ``axes``.

    ``distance`` is for point-to-point sends: how many hops along the axes each block travels (signed).
    """

    kind: str
    axes: tuple[str, ...]
    before: Layout
    after: Layout
    distance: int = 0

    __hash__ = caching.kept_hash            # moves key the planner's tables: hashed again and again
    __getstate__ = caching.state_without_hash

    def __init__(self, kind: str, axes: tuple, before: Layout, after: Layout, distance: int = 0):
        # written straight into the instance, as Layout's: a cold derivation makes thousands of moves
        if kind not in RULES:
            raise ShardingError(f"unknown move {kind!r}; moves are {', '.join(RULES)}")
        d = self.__dict__
        d["kind"], d["axes"], d["before"], d["after"], d["distance"] = kind, axes, before, after, distance

    @property
    def rule(self) -> "MoveRule":
        return RULES[self.kind]

    @property
    def tensor(self) -> str:
        return self.before.name

    @property
    def label(self) -> str:
        """The collective's name as written: ``AllGather_X``, ``Send_{Z,2}`` (a send of two hops), ``ToHost``."""
        return self.kind + format_axes(self.axes, self.distance if self.distance not in (0, 1) else None)

    def signature(self, mesh: Mesh | None = None) -> str:
        return f"{self.label}({self.before.render(mesh)}) -> {self.after.render(mesh)}"

    def __str__(self) -> str:
        return self.signature()


def gradient(layout: Layout, unreduced=()) -> Layout:
    """The layout of ``d<name>`` laid out like ``layout``, holding partial sums over ``unreduced``."""
    return _gradient(layout, frozenset(unreduced))


@caching.memoize(maxsize=4096)
def _gradient(layout: Layout, unreduced: frozenset) -> Layout:
    """Kept: a backward pass asks for the same gradients' layouts again for every plan it weighs."""
    return Layout("d" + layout.name, layout.dims, layout.axes, unreduced, layout.dtype)


def group_bytes(env, whole: Layout, split: Layout, axes):
    """Bytes of ``whole`` on one device, as a gather or scatter over ``axes`` moves it: the group's blocks of
    ``split``. Where a dimension the move splits does not divide by its devices, each block is padded and the
    group moves ``n`` whole blocks (a batch of 1 scattered over 8 devices moves 8 rows, 7 of them padding);
    elsewhere that is ``whole`` itself."""
    pads = env.pads
    for d, wa, sa in zip(split.dims, whole.axes, split.axes):
        if wa != sa and pads(d, sa):
            return env.group_size(axes) * env.local_bytes(split)
    return env.local_bytes(whole)


def set_axes(axes, i: int, value) -> tuple:
    return axes[:i] + (tuple(value),) + axes[i + 1:]


def append_axes(layout: Layout, i: int, new) -> Layout:
    return layout.with_axes(set_axes(layout.axes, i, layout.axes[i] + tuple(new)))


def shardable(layout: Layout) -> list[int]:
    """Indices of the dimensions a mesh axis may split (not literal sizes)."""
    return [i for i, d in enumerate(layout.dims) if not d.isdigit()]


def changed_dims(move: Move) -> tuple[int | None, int | None]:
    """(the dimension that lost axes, the dimension that gained axes), None where none did."""
    lost = next((k for k, (a, b) in enumerate(zip(move.before.axes, move.after.axes)) if len(b) < len(a)), None)
    gained = next((k for k, (a, b) in enumerate(zip(move.before.axes, move.after.axes)) if len(b) > len(a)), None)
    return lost, gained


def subsets(items):
    """Every non-empty subset of ``items``, smallest first, in order."""
    items = list(items)
    for r in range(1, len(items) + 1):
        yield from itertools.combinations(items, r)


def passes(move: Move, mesh: Mesh | None, steps) -> str:
    """How a collective over several link kinds runs, as words (empty for one kind): ``steps`` names the
    pass over the innermost kind first, e.g. ``("ReduceScatter", "AllReduce", "AllGather")``."""
    if mesh is None:
        return ""
    groups = by_kind(move.axes, mesh)
    if len(groups) < 2:
        return ""
    ax = [format_axes(a)[1:] for _, a in groups]
    inner = "*".join(f"|{a}|" for a in ax[:-1])
    if steps[0] == "AllReduce":        # AllReduce: reduce-scatter in, all-reduce across, all-gather back
        parts = [f"ReduceScatter over {a} ({k})" for (k, _), a in zip(groups[:-1], ax[:-1])]
        parts.append(f"AllReduce over {ax[-1]} ({groups[-1][0]}) on 1/({inner}) of the data")
        parts += [f"AllGather over {a}" for a in reversed(ax[:-1])]
    elif steps[0] == "AllGather":      # the outer kinds first, on the smaller data
        parts = [f"AllGather over {ax[-1]} ({groups[-1][0]}) on 1/({inner}) of the data"]
        parts += [f"then over {a} ({k})" for (k, _), a in reversed(list(zip(groups[:-1], ax[:-1])))]
    else:
        parts = [f"{steps[0]} over {ax[0]} ({groups[0][0]})"]
        parts += [f"then over {a} ({k})" + (f" on 1/({inner}) of the data" if steps[0] == "ReduceScatter" else "")
                  for (k, _), a in zip(groups[1:], ax[1:])]
    return ": " + ", ".join(parts)


def jax_axes(ax) -> str:
    """A mesh-axis argument of a ``jax.lax`` collective: ``'X'`` or ``('X', 'Y')``."""
    return repr(ax[0]) if len(ax) == 1 else "(" + ", ".join(repr(a) for a in ax) + ")"


class MoveRule:
    """The base of every move kind (subclasses are frozen dataclasses, one instance each)."""

    name: ClassVar[str] = ""
    signature: ClassVar[str] = ""       # the book's signature, e.g. AllGather_X(A[I_X, J]) -> A[I, J]
    summary: ClassVar[str] = ""          # what it does, in one line (README's table of moves)
    communicates: ClassVar[bool] = True  # Slice: False (local)
    inserted: ClassVar[bool] = True      # the engine may insert it (Send: only where written)
    premium: ClassVar[float] = 0.0       # relative extra weight in the search, to break ties against it

    # ---------------------------------------------------------------- the layout graph
    def edges(self, layout: Layout, mesh: Mesh) -> Iterator[Move]:
        """Every move of this kind one step away from ``layout``."""
        return iter(())

    # ---------------------------------------------------------------- costs
    def volume(self, move: Move, env):
        """V: the bytes the time formula uses (book Part 3)."""
        raise NotImplementedError

    def link_time(self, move: Move, env):
        """(latency floor, throughput term) in seconds; the move takes the larger."""
        raise NotImplementedError

    def ring_bytes(self, move: Move, env):
        """Bytes each device sends on a ring of n devices (the model symcost and XLA are compared in)."""
        raise NotImplementedError

    def channels(self, move: Move) -> tuple[str, ...]:
        """What the move occupies while it runs: its mesh axes (moves on different axes overlap)."""
        return move.axes

    # ---------------------------------------------------------------- derivations
    def transpose(self, move: Move) -> Move | None:
        """The move that carries the gradient of ``move.after`` back to the gradient of ``move.before``."""
        return None

    def explain(self, move: Move, mesh: Mesh | None = None) -> str:
        """Why-text for the move (``mesh`` says how a collective over several link kinds runs)."""
        return f"{self.name} over {format_axes(move.axes)[1:]}"

    def reason(self, axes, src: Layout, want: Layout) -> str | None:
        """Why a written ``kind_axes(src) -> want`` is not this kind's move (None: no specific reason)."""
        return None

    # ---------------------------------------------------------------- execution
    def simulate(self, blocks: dict, move: Move, grid) -> dict:
        """What the move does to the devices' blocks (numpy; ``grid`` is a :class:`~.blocks.Grid`)."""
        raise NotImplementedError

    def reference(self, full, move: Move, grid):
        """What the move does to the whole (unsharded) array: nothing, for a move that only relocates
        blocks or sums partial sums; a send shifts blocks."""
        return full

    def lower_jax(self, move: Move, mesh: Mesh, var: str) -> list[str]:
        """Lines of a ``shard_map`` body that perform the move on the local block ``var``."""
        raise NotImplementedError

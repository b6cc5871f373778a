"""The devices of a mesh and the blocks they hold, for the numpy semantics of the moves.

Block order is X-major: along a dimension split over ``(X, Y)``, the device with coordinates (x, y)
holds block ``x * |Y| + y`` (as a JAX ``PartitionSpec(('X', 'Y'))``)::

    >>> from symcost.mesh import parse_mesh
    >>> g = Grid(parse_mesh("X=2,Y=3"))
    >>> g.block_index((1, 2), ("X", "Y")), g.block_index((1, 2), ("Y", "X"))
    (5, 5)
    >>> g.group((1, 2), ("Y",))
    [(1, 0), (1, 1), (1, 2)]
"""
from __future__ import annotations

import itertools

from ..errors import SimulationError
from ..mesh import Mesh


class Grid:
    """A mesh with every axis sized: its devices, their coordinates, and groups along axes."""

    def __init__(self, mesh: Mesh):
        self.mesh = mesh
        self.names = mesh.names
        for a in mesh.axes:
            if a.size is None:
                raise SimulationError(f"mesh axis {a.name} needs a size to be simulated")
        self._size: dict[str, int] = {a.name: a.size for a in mesh.axes if a.size is not None}   # each has one

    def size(self, axis: str) -> int:
        return self._size[axis]

    def count(self, axes) -> int:
        n = 1
        for a in axes:
            n *= self._size[a]
        return n

    def devices(self) -> list[tuple]:
        return list(itertools.product(*(range(self._size[a]) for a in self.names)))

    def coord(self, d: tuple, axis: str) -> int:
        return d[self.names.index(axis)]

    def moved(self, d: tuple, values: dict) -> tuple:
        out = list(d)
        for a, v in values.items():
            out[self.names.index(a)] = v
        return tuple(out)

    def block_index(self, d: tuple, axes) -> int:
        """X-major index of device ``d``'s block along a dimension split over ``axes``."""
        idx = 0
        for a in axes:
            idx = idx * self._size[a] + self.coord(d, a)
        return idx

    def group(self, d: tuple, axes) -> list[tuple]:
        """The devices that differ from ``d`` only in ``axes`` (``d`` included), X-major over ``axes``."""
        ranges = [range(self._size[a]) for a in axes]
        return [self.moved(d, dict(zip(axes, vals))) for vals in itertools.product(*ranges)]

    def block_slices(self, d: tuple, layout, shape) -> tuple:
        """The slice of the whole array of ``shape`` that device ``d`` holds under ``layout``."""
        out = []
        for i, axes in enumerate(layout.axes):
            size = shape[i] // self.count(axes)
            k = self.block_index(d, axes)
            out.append(slice(k * size, (k + 1) * size))
        return tuple(out)

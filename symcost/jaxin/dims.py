"""The dimensions of a traced function: a union-find over the axes of its arrays, by size and role.

Two axes are one dimension when the function's operations say so (the contracting and batch dimensions of
a ``dot_general``, the matching axes of an elementwise operation, an axis a reshape or transpose carries
over); a reshape that splits an axis, or merges several, records the axis as the product of finer ones, so
``x @ wq`` followed by ``.reshape(B, T, K, G, H)`` makes ``wq``'s second axis the product ``K G H`` and the
program writes ``Wq[D, K, G, H]``.

    >>> d = Dims()
    >>> a, b, c = d.new(8), d.new(8), d.new(32)
    >>> d.union(a, b); d.find(a) == d.find(b)
    True
    >>> k, h = d.new(4), d.new(8)
    >>> d.factor(c, (k, h)); [d.size(x) for x in d.leaves(c)]
    [4, 8]
"""
from __future__ import annotations

from ..errors import UsageError


class Dims:
    """Mutable while a function is read; the names and sizes it settles are read off at the end."""

    def __init__(self):
        self._parent: list[int] = []
        self._size: list[int] = []
        self._factors: dict[int, tuple[int, ...]] = {}
        self.names: dict[int, str] = {}        # a root's name, where the user gave one

    def new(self, size: int, name: str | None = None) -> int:
        self._parent.append(len(self._parent))
        self._size.append(int(size))
        node = len(self._parent) - 1
        if name:
            self.names[node] = name
        return node

    def find(self, a: int) -> int:
        while self._parent[a] != a:
            self._parent[a] = self._parent[self._parent[a]]
            a = self._parent[a]
        return a

    def size(self, a: int) -> int:
        return self._size[self.find(a)]

    def name(self, a: int) -> str | None:
        return self.names.get(self.find(a))

    def union(self, a: int, b: int) -> None:
        """One dimension: the sizes must agree, and so must the names and the factorisations."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if self._size[ra] != self._size[rb]:
            raise UsageError(f"a dimension of size {self._size[ra]} meets one of size {self._size[rb]}")
        na, nb = self.names.get(ra), self.names.get(rb)
        if na and nb and na != nb:
            raise UsageError(f"the function makes {na} and {nb} one dimension; give them one name")
        fa, fb = self._factors.pop(ra, None), self._factors.pop(rb, None)
        self._parent[rb] = ra
        if nb and not na:
            self.names[ra] = nb
        self.names.pop(rb, None)
        if fa and fb:
            self._factors[ra] = fa
            self._match(fa, fb)
        elif fa or fb:
            self._factors[ra] = fa or fb

    def _match(self, fa, fb) -> None:
        la, lb = [self.size(x) for x in fa], [self.size(x) for x in fb]
        if la != lb:
            raise UsageError(f"a dimension is split two ways by reshapes: {la} and {lb}")
        for x, y in zip(fa, fb):
            self.union(x, y)

    def factor(self, a: int, parts) -> None:
        """``a`` is the product of ``parts`` (major first), as a reshape splits or merges it."""
        parts = tuple(p for p in parts if self.size(p) != 1) or tuple(parts)
        ra = self.find(a)
        prod = 1
        for p in parts:
            prod *= self.size(p)
        if prod != self._size[ra]:
            raise UsageError(f"a reshape splits a dimension of size {self._size[ra]} into parts of product {prod}")
        if len(parts) == 1:
            self.union(ra, parts[0])
            return
        if any(self.find(p) == ra for p in parts):
            return
        have = self._factors.get(ra)
        if have is None:
            self._factors[ra] = parts
        else:
            self._match(have, parts)

    def leaves(self, a: int) -> tuple[int, ...]:
        """The finest dimensions ``a`` is the product of (roots), size-one ones left out."""
        ra = self.find(a)
        parts = self._factors.get(ra)
        if not parts:
            return () if self._size[ra] == 1 else (ra,)
        return tuple(x for p in parts for x in self.leaves(p))

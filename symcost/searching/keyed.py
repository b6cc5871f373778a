"""A search's candidates as tables of integers: for each statement, which of its keys (:mod:`.pieces`: the
splits of its open tensors) each candidate takes, and the candidates' bounds as sums of array rows.

A bounded search reads every candidate's key of every statement (the LLaMA 3 8B layer on ``X=4,Y=2,Z=2``:
80,190 candidates, nine statements, 89,925 distinct keys) and bounds every candidate by its statements'
resource vectors. Here a candidate is a row of role numbers, a statement's key a number made from the roles
as that statement sees them (:func:`.pieces.seer`), and the bounds one array sum a statement::

    >>> from symcost.searching.space import Space
    >>> from symcost.searching import pieces as pcs
    >>> sp = Space.of(open("examples/mlp3.sc").read(), "X=2,Y=2", "tpu-v5p")
    >>> t = Keyed({at: pcs.alone(sp, at) for at in pcs.statements(sp)}, list(sp.candidates()))
    >>> {at: len(ks) for at, ks in t.keys.items()}, len(t.work)
    ({2: 122, 3: 86, 4: 104}, 312)

Each key is made by the statement's splitter, once; ``work`` lists the keys as a walk over the candidates,
statement by statement, first takes them (each with that first candidate).
"""
from __future__ import annotations

import numpy as np

from .pieces import seer, splitter


class Keyed:
    """``keys``: ``{statement: its keys, in the order first taken}``; ``number``: ``{statement: {key: its
    number}}``; ``ids``: ``{statement: for each candidate, the number of its key there}``; ``work``:
    ``(statement, candidate, key)``, each key once, with the first candidate that takes it, in the order
    they are first taken."""

    def __init__(self, subs: dict, cands: list):
        roles: dict = {}
        rows = np.array([[roles.setdefault(r, len(roles)) for r in c.roles] for c in cands], dtype=np.int64)
        rows = rows.reshape(len(cands), len(cands[0].roles) if cands else 0)
        self.keys: dict = {}
        self.number: dict = {}
        self.ids: dict = {}
        firsts = []
        for place, (at, sub) in enumerate(subs.items()):
            split, seen_as = splitter(sub), seer(sub)
            seen: dict = {}
            as_seen = np.array([seen.setdefault(seen_as(r), len(seen)) for r in roles], dtype=np.int64)
            _, first, inverse = np.unique(_coded(as_seen[rows], len(seen)), axis=0, return_index=True,
                                          return_inverse=True)
            number: dict = {}          # a key -> its number (roles seen alike make one key)
            of_code = np.empty(len(first), dtype=np.int64)
            for u in np.argsort(first, kind="stable"):      # in the order first taken
                k = split(cands[first[u]])
                if k not in number:
                    number[k] = len(number)
                    firsts.append((int(first[u]), place, at, k))
                of_code[u] = number[k]
            self.ids[at], self.keys[at], self.number[at] = of_code[inverse.reshape(-1)], list(number), number
        firsts.sort(key=lambda x: (x[0], x[1]))
        self.work = [(at, cands[f], k) for f, _, at, k in firsts]
        self._rows = np.stack(list(self.ids.values()), axis=1).tolist() if self.ids else [()] * len(cands)
        self._lists = list(self.keys.values())

    def of(self, i: int) -> tuple:
        """The keys of candidate number ``i``, statement by statement."""
        return tuple([keys[j] for keys, j in zip(self._lists, self._rows[i])])

    def row(self, i: int) -> list:
        """The numbers of candidate ``i``'s keys, statement by statement (read, not changed)."""
        return self._rows[i]

    def sums(self, rows: dict) -> tuple[np.ndarray, np.ndarray]:
        """``(each candidate's resource sums, whether one of its statements has no vector)`` from ``rows``:
        ``{statement: (its keys' resource vectors, a row a key; whether each key has none)}``. The sums are
        taken statement by statement, in order: each is the one Python's ``sum`` of the vectors gives."""
        total = missing = None
        for at, ids in self.ids.items():
            vectors, absent = rows[at]
            total = vectors[ids] if total is None else total + vectors[ids]
            missing = absent[ids] if missing is None else missing | absent[ids]
        return total, missing


def _coded(seen: np.ndarray, base: int) -> np.ndarray:
    """Each row of roles as seen (numbers below ``base``) as one number where they fit in 62 bits (a sort of
    numbers, not of rows); else the rows themselves."""
    if max(base, 1) ** seen.shape[1] >= 2 ** 62:
        return seen
    code = np.zeros(len(seen), dtype=np.int64)
    for a in range(seen.shape[1]):
        code = code * base + seen[:, a]
    return code

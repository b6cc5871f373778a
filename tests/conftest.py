"""Shared test helpers: the repository's root, a program several rooms test, hypothesis profiles.

Test files take these with ``from conftest import ROOT`` (pytest puts this directory on the path)."""
import gc
import os
import re
from pathlib import Path

import pytest

# A test process derives thousands of plans and keeps what the engine keeps between them (SymPy's caches,
# the process's planning context, parsed programs): half a million to a million long-lived objects, which each full
# collection of CPython's cyclic garbage collector walks. At the default thresholds (700, 10, 10) a full
# collection ran every hundred young ones, and took about a sixth of the fast tier's CPU time; here it runs
# a hundred times less often (young collections as usual, so short-lived cycles are freed as soon as before).
# Nothing a test asserts depends on it: the one test that measures memory collects first (gc.collect()).
gc.set_threshold(700, 10, 1000)

#: the repository's root: derivations/, examples/, docs/ and symcost/schemas/ are read from here
ROOT = Path(__file__).resolve().parent.parent

#: the MLP block of Korthikanti et al. 2022 (section 4.1) with a norm, dropout and a residual
MLP_BLOCK = """
param W1[D, F_Y], W3[F_Y, D]
Xn[B, T, D] = LayerNorm_D(X[B, T, D])
U[B, T, F_Y] = Xn[B, T, D] *_D W1[D, F_Y]
G[B, T, F_Y] = GeLU(U[B, T, F_Y])
Z[B, T, D] = G[B, T, F_Y] *_F W3[F_Y, D]
Zd = Dropout(Z[B, T, D])
Out = Add(X[B, T, D], Zd[B, T, D])
"""

#: how long a search took, as its "priced ..." line says it: the one figure that changes from run to run
_TOOK = re.compile(r"(priced [^;]*?) in \d[\d.e+-]* (?:ns|us|ms|s)\b")


def decode_elementwise_seconds(serving, batch: int, seq: int) -> float:
    """Seconds a ``Serving``'s decode step spends on its layers' elementwise work (norms, rotary, activation,
    residual adds: each step of it alone, as priced), which the book's decode figures do not count."""
    plan = serving._plan("layer", serving._padded(batch), 1, seq)
    return serving.cfg.L * sum(plan.evaluate(st.seconds) for st in plan.steps if st.is_elementwise)


def without_timings(text: str) -> str:
    """``text`` with the wall-clock time of each "priced N ... in T" line written as "in ..."."""
    return _TOOK.sub(r"\1 in ...", text)


@pytest.fixture
def untimed():
    return without_timings


# Hypothesis profiles for the property tests that take their example count from the profile (the simulator's
# backward property): "fast" for your own loop, "ci" for `make test`, which sets SYMCOST_HYPOTHESIS=ci.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("fast", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROFILE = os.environ.get("SYMCOST_HYPOTHESIS", "fast")
if PROFILE not in ("fast", "ci"):
    raise pytest.UsageError(f"SYMCOST_HYPOTHESIS must be 'fast' or 'ci', not {PROFILE!r}")


def examples(n: int) -> int:
    """How many examples a property of the fast tier draws: ``n`` in ``make test`` (the "ci" profile), a
    quarter of them (at least 5) in your own loop, where the same property then costs a quarter."""
    return n if PROFILE == "ci" else max(5, n // 4)



def _scope(nodeid: str) -> str:
    """The unit ``--dist loadscope`` gives one process: a test's class, else its module (as pytest-xdist
    splits a test's id at its last ``::``)."""
    return nodeid.rsplit("::", 1)[0]


def pytest_collection_modifyitems(config, items):
    """On several processes (pytest-xdist, ``--dist loadscope --no-loadscope-reorder``), the units that hold
    a test marked ``long(seconds)`` go first, longest first, then the rest by their number of tests, most
    first (what pytest-xdist does by itself, which puts a long one-test class last: the suite then waits a
    minute for one process). Longest first is how a fixed number of processes finish together; nothing a
    test asserts depends on the order."""
    if not hasattr(config, "workerinput"):
        return
    units: dict = {}
    for item in items:
        units.setdefault(_scope(item.nodeid), []).append(item)
    def seconds(unit) -> float:
        return sum(m.args[0] for i in units[unit] for m in i.iter_markers("long"))
    order = sorted(units, key=lambda u: (-seconds(u), -len(units[u])))
    items[:] = [i for u in order for i in units[u]]

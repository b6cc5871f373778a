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


def _a_share_of_the_cores() -> None:
    """Under pytest-xdist, each test process runs on its share of the cores (on two cores and two processes,
    one each), so that a search left to choose its worker processes (``jobs="auto"``: every core the
    process may run on) works where it is, as it would on a machine of that many cores, rather than starting
    two workers of its own beside the other test process (four processes on two cores, the workers started
    cold where JAX is loaded). The tests of worker processes ask for them (``jobs=2``)."""
    worker, n = os.environ.get("PYTEST_XDIST_WORKER", ""), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or not hasattr(os, "sched_setaffinity"):
        return
    allowed = sorted(os.sched_getaffinity(0))
    if 1 < n <= len(allowed):
        os.sched_setaffinity(0, allowed[int(worker[2:]) % n::n])


_a_share_of_the_cores()

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
    plan = serving._plan("layer", serving.padded(batch), 1, seq)
    return serving.cfg.L * sum(plan.evaluate(st.seconds) for st in plan.steps if st.is_elementwise)


def without_timings(text: str) -> str:
    """``text`` with the wall-clock time of each "priced N ... in T" line written as "in ..."."""
    return _TOOK.sub(r"\1 in ...", text)


@pytest.fixture
def untimed():
    return without_timings


@pytest.fixture
def python_ctrl_c():
    """Ctrl-C handled as Python handles it (``signal.default_int_handler``) for the test's length, and a
    subprocess it starts taking Ctrl-C by default: a test process started with SIGINT ignored (a shell
    without job control ignores it in every command it runs in the background, ``make test &`` included,
    and processes inherit it) would see no Ctrl-C at all, which a user at a terminal sees."""
    import signal
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


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



#: seconds each unit of the suite took (a class, else a module), as the last recording measured them, under
#: each hypothesis profile: ``SYMCOST_DURATIONS=write make test`` (the "ci" profile) and ``SYMCOST_DURATIONS=write
#: make test-fast`` ("fast") write them (:func:`pytest_sessionfinish`)
DURATIONS = Path(__file__).resolve().parent / "durations.json"


def _scope(nodeid: str) -> str:
    """The unit ``--dist loadscope`` gives one process: a test's class, else its module (as pytest-xdist
    splits a test's id at its last ``::``)."""
    return nodeid.rsplit("::", 1)[0]


def _recorded() -> dict:
    """``{unit: seconds}`` recorded under this run's profile (empty where nothing was)."""
    import json
    try:
        return json.loads(DURATIONS.read_text()).get(PROFILE, {})
    except (OSError, ValueError):
        return {}


#: where the tests marked ``timing`` live: ``make test`` runs them alone from this folder, before the rest,
#: without collecting the whole suite for them (about 5 s)
TIMING_HOME = "tests/device/"


def _timing_tests_stay_home(items) -> None:
    strays = [i.nodeid for i in items if i.get_closest_marker("timing") and not i.nodeid.startswith(TIMING_HOME)]
    if strays:
        raise pytest.UsageError(f"tests marked timing live in {TIMING_HOME} (make test runs them from there "
                                f"alone): {', '.join(strays)}")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``timing`` must live in :data:`TIMING_HOME`. On several processes (pytest-xdist, ``--dist loadscope --no-loadscope-reorder``) the units go longest
    first, by the seconds recorded in ``tests/durations.json`` (a unit not recorded yet: its number of tests
    times the recorded seconds of a test). pytest-xdist by itself orders them by their number of tests, which
    put a one-test class of a minute last, and the rest of the suite then waited for one process. Longest
    first is how a fixed number of processes finish together; nothing a test asserts depends on the order."""
    _timing_tests_stay_home(items)
    if not hasattr(config, "workerinput"):
        return
    units: dict = {}
    for item in items:
        units.setdefault(_scope(item.nodeid), []).append(item)
    known = _recorded()
    tests = sum(len(v) for u, v in units.items() if u in known)
    each = sum(known[u] for u in units if u in known) / tests if tests else 0.0
    order = sorted(units, key=lambda u: (-known.get(u, each * len(units[u])), -len(units[u])))
    items[:] = [i for u in order for i in units[u]]


_TOOK_UNIT: dict = {}


def pytest_runtest_logreport(report):
    """Each test's setup, call and teardown seconds, added to its unit's (on the controlling process, which
    sees every process's reports)."""
    if os.environ.get("SYMCOST_DURATIONS") == "write":
        unit = _scope(report.nodeid)
        _TOOK_UNIT[unit] = _TOOK_UNIT.get(unit, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    """``SYMCOST_DURATIONS=write``: the units' seconds of this run replace those recorded under its profile
    (units this run did not reach are kept)."""
    if os.environ.get("SYMCOST_DURATIONS") != "write" or hasattr(session.config, "workerinput") or not _TOOK_UNIT \
            or not session.config.getoption("numprocesses", None):     # the order matters on several processes
        return
    import json
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        data = {}
    got = {**data.get(PROFILE, {}), **{u: round(t, 2) for u, t in _TOOK_UNIT.items()}}
    data[PROFILE] = dict(sorted(got.items()))
    DURATIONS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")

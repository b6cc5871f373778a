"""Shared test helpers."""
import os
import re

import pytest

#: how long a search took, as its "priced ..." line says it: the one figure that changes from run to run
_TOOK = re.compile(r"(priced [^;]*?) in \d[\d.e+-]* (?:ns|us|ms|s)\b")


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

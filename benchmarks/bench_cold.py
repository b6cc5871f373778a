"""Cold start: a fresh ``symcost derive`` process against a fresh Python that only imports the core's
dependencies (sympy, lark, networkx, numpy). What symcost adds to a command line is its own import, the
grammar, the presets it reads and one derivation; the target is at most 1.25 times the dependencies'
import. The two are run in turn, so that a machine's load falls on both alike.

    python benchmarks/bench_cold.py          # or as part of `make bench`
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

TARGET = 1.25
DEPENDENCIES = "import sympy, lark, networkx, numpy"
DERIVE = ("derive", "A[I, J_X] * B[J, K] -> C[I, K]", "--mesh", "X=4")


def _symcost() -> list[str]:
    """The ``symcost`` script beside this interpreter (what a user runs), or the module where there is none."""
    exe = os.path.join(os.path.dirname(sys.executable), "symcost")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "symcost.cli"]


def _wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def measure(repeat: int = 7) -> tuple[float, float]:
    """(median seconds of the dependencies' import, median seconds of ``symcost derive``), after one of each
    to warm the file cache."""
    deps_cmd, derive_cmd = [sys.executable, "-c", DEPENDENCIES], _symcost() + list(DERIVE)
    _wall(deps_cmd), _wall(derive_cmd)
    deps, derive = [], []
    for _ in range(repeat):
        deps.append(_wall(deps_cmd))
        derive.append(_wall(derive_cmd))
    return statistics.median(deps), statistics.median(derive)


def report(repeat: int = 7) -> list[tuple[str, str]]:
    deps, derive = measure(repeat)
    ratio = derive / deps
    verdict = "met" if ratio <= TARGET else "not met"
    return [(f"cold: python -c '{DEPENDENCIES}'", f"{deps * 1e3:8.0f} ms"),
            ("cold: symcost derive (single einsum)", f"{derive * 1e3:8.0f} ms"),
            ("cold ratio derive / dependencies' import", f"{ratio:8.2f} x  (target {TARGET} x: {verdict})")]


if __name__ == "__main__":
    for label, value in report():
        print(f"{label:45s}  {value}")

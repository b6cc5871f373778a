"""symcost benchmarks: `make bench`. Prints a table; docs/benchmarks.md quotes its numbers.

Warm latency: the median of repeated in-process derivations (plan search + symbolic costs), after one
warm-up call. Cold (`bench_cold.py`): wall time of a fresh `symcost derive` process next to a fresh Python
that imports the core's dependencies; docs/benchmarks.md quotes the figures.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
os.chdir(os.path.dirname(HERE))

import symcost  # noqa: E402

CASES = {
    "single einsum (Case 2, X=4)": ("A[I, J_X] * B[J, K] -> C[I, K]", "X=4", "I=256,J=8192,K=8192"),
    "single einsum, 3-axis mesh": ("In[B_X, D_Y] * W[D_Y, F_Z] -> Out[B_X, F_Z]", "X=4,Y=4,Z=4", None),
    "Megatron chain (X=4,Y=4)": ("In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]", "X=4,Y=4",
                                 "B=1024,D=8192,F=32768"),
}
EXTRA = []  # (label, callable) pairs added by other benchmark modules


def warm(fn, repeat=30):
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def fmt(s):
    return f"{s * 1e3:8.2f} ms"


def main():
    rows = []
    for label, (text, mesh, dims) in CASES.items():
        def again(text=text, mesh=mesh, dims=dims):
            return symcost.derive(text, mesh=mesh, dims=dims)

        def cleared(text=text, mesh=mesh, dims=dims):
            symcost.clear_caches()
            return symcost.derive(text, mesh=mesh, dims=dims)
        rows.append((f"warm derive, repeated: {label}", warm(again)))
        rows.append((f"warm process, caches cleared: {label}", warm(cleared)))
    for mod in ("bench_training", "bench_models"):
        path = os.path.join(HERE, mod + ".py")
        if os.path.exists(path):
            m = __import__(mod)
            for label, fn, repeat in m.CASES:
                rows.append((label, warm(fn, repeat)))
    rates = []
    if os.path.exists(os.path.join(HERE, "bench_search.py")):
        rates = __import__("bench_search").report()
    rates += __import__("bench_cold").report()
    width = max(len(r[0]) for r in rows + rates)
    print(f"{'benchmark':{width}s}  median")
    for label, t in rows:
        print(f"{label:{width}s}  {fmt(t)}")
    for label, value in rates:
        print(f"{label:{width}s}  {value}")


if __name__ == "__main__":
    main()

"""How long stopping a search priced in worker processes takes (by hand, not part of `make bench`).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/pool_stops.py METHOD CHUNK TRIALS [BURN] [--fast]

METHOD: fork or forkserver; CHUNK: the most candidates a chunk (``pool.CHUNK``); BURN: busy processes run
beside it, for load. Each trial prices the LLaMA 3 8B layer, forward + backward, on h100 X=4,Y=2 (2,916
candidates; ``--fast``: the MLP's 165 candidates on tpu-v5p X=16,Y=16,Z=16, forward, sixty times over,
so that workers write results all the time) with 2 workers, and stops it: alternately by closing the
generator after k candidates, and by a KeyboardInterrupt raised by SIGALRM at a random moment (Ctrl-C). A
stop that takes over 30 s dumps every thread's stack and exits.
"""
from __future__ import annotations

import faulthandler
import multiprocessing
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from symcost import processes  # noqa: E402
from symcost.searching import _space, pool  # noqa: E402

RAISED = [0.0]


def _burn() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    while True:
        pass


def _interrupt(*_) -> None:
    RAISED[0] = time.perf_counter()
    raise KeyboardInterrupt


def _space_of(fast: bool):
    if fast:        # many quick candidates: the workers write results all the time
        mlp = open("examples/mlp.sc").read()
        space, sizes, _ = _space(mlp, "X=16,Y=16,Z=16", "B=1048576,D=8192,F=32768", "tpu-v5p", None, None)
        return space, list(space.candidates()) * 60, dict(dims=sizes, hw="tpu-v5p")
    from symcost.models.config import load_model_config
    from symcost.models.transformer import open_layer
    text = open_layer(load_model_config("llama3-8b"), batch=8, seq=4096)[0]
    space, sizes, _ = _space(text, "X=4,Y=2", None, "h100", None, None)
    return space, list(space.candidates()), dict(dims=sizes, hw="h100", backward=True)


def _stop_once(space, cands, opts, by_alarm: bool, rng) -> tuple[int, float]:
    """Candidates read, and seconds from the stop to its return."""
    k = rng.randrange(0, 400 if len(cands) > 5000 else 40)
    got, RAISED[0] = 0, 0.0
    gen = pool.priced_all(space, cands, jobs=2, options=opts)
    try:
        if by_alarm:
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.2, 2.0 if len(cands) > 5000 else 6.0))
        for _ in gen:
            got += 1
            if not by_alarm and got >= k:
                break
    except KeyboardInterrupt:
        pass
    start = RAISED[0] if by_alarm and RAISED[0] else time.perf_counter()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0)
        gen.close()
    except KeyboardInterrupt:
        pass
    return got, time.perf_counter() - start


def main() -> None:
    fast = "--fast" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--fast"]
    method, pool.CHUNK, trials = args[0], int(args[1]), int(args[2])
    burn = int(args[3]) if len(args) > 3 else 0
    processes.start_method = lambda: method
    space, cands, opts = _space_of(fast)
    burners = [multiprocessing.get_context("fork").Process(target=_burn, daemon=True) for _ in range(burn)]
    for b in burners:
        b.start()
    signal.signal(signal.SIGALRM, _interrupt)
    faulthandler.enable()
    rng, stops = random.Random(0), []
    try:
        for t in range(trials):
            faulthandler.dump_traceback_later(30, exit=True)
            got, took = _stop_once(space, cands, opts, t % 2 == 1, rng)
            faulthandler.cancel_dump_traceback_later()
            left = [p for p in multiprocessing.active_children() if p not in burners]
            stops.append(took)
            print(f"trial {t:3d} {'alarm' if t % 2 else 'close'} after {got:5d}: stop {took:6.3f} s, "
                  f"workers left {len(left)}", flush=True)
    finally:
        for b in burners:
            b.terminate()
    stops.sort()
    print(f"{method} chunk={pool.CHUNK} burn={burn}{' fast' if fast else ''}: {len(stops)} stops, "
          f"median {stops[len(stops) // 2]:.3f} s, max {stops[-1]:.3f} s")


if __name__ == "__main__":
    main()

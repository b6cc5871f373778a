"""symcost search priced in worker processes: the same ranking, numbers, plans and regimes as one process,
plans derived again only when read, and the --jobs setting. Starting worker processes takes a while in a
test process that has planned for a while (it forks its caches): the fast tier keeps one search on two
processes, the rest are in the slow tier."""
from pathlib import Path

import pytest

import symcost
from symcost.cli import main
from symcost.errors import UsageError
from symcost import processes
from symcost.searching import pool, search

from conftest import ROOT

MLP = (ROOT / "examples" / "mlp.sc").read_text()
DIMS = "B=1048576,D=8192,F=32768"


def _both(**kw):
    out = []
    for jobs in (1, 2):
        symcost.clear_caches()
        out.append(search(MLP, "X=4,Y=4", DIMS, "tpu-v5p", backward=True, jobs=jobs, **kw))
    return out


def test_two_processes_rank_as_one():
    """All 81 candidates of the MLP on X=4,Y=4, forward + backward: the same order, the same numbers
    (exactly: the same engine plans them), the same memory and verdicts; a candidate's plan, derived again
    when read, has the same closed-form step time. (16 v5p chips are a 2x2x4 slice: X lies on the two
    dimensions of 2, Y on the 4, so the axes are not interchangeable: 81 candidates, not 45.)"""
    one, two = _both()
    assert two.priced == one.priced == 81 and two.feasible == one.feasible
    assert [p.candidate for p in two.ranked] == [p.candidate for p in one.ranked]
    for a, b in zip(one.ranked, two.ranked):
        assert (a.t_step, a.t_math, a.t_hbm, a.t_comms, a.memory_bytes, a.fits, a.description) == \
               (b.t_step, b.t_math, b.t_hbm, b.t_comms, b.memory_bytes, b.fits, b.description)
    assert "_derived" not in two.ranked[5].__dict__         # not derived until read
    assert two.ranked[5].plan.t_step == one.ranked[5].plan.t_step
    assert two.ranked[5].memory_expr == one.ranked[5].memory_expr
    d1, d2 = one.as_dict(5), two.as_dict(5)
    d1.pop("seconds"), d2.pop("seconds")
    assert d1 == d2
    assert not any("_derived" in p.__dict__ for p in two.ranked[6:])    # --json reads no plan


@pytest.mark.slow
def test_two_processes_find_the_same_regimes():
    """--vs B: workers send each candidate's curves over the grid; the regimes and their exact boundaries
    are those one process finds, and only the candidates a boundary involves are planned again here."""
    one, two = _both(vs="B")
    assert [(r.best, r.bound) for r in two.regimes] == [(r.best, r.bound) for r in one.regimes]
    assert [(r.end.exact, r.end.value) for r in two.regimes[:-1]] == \
           [(r.end.exact, r.end.value) for r in one.regimes[:-1]]
    assert len(two.regimes) >= 2
    involved = {r.best for r in two.regimes}
    derived = {i for i, p in enumerate(two.ranked) if "_derived" in p.__dict__}
    assert derived <= involved and len(derived) < two.priced


def test_workers_setting():
    assert pool.workers(1, 1000) == 1
    assert pool.workers(4, 3) == 3                  # never more workers than candidates
    assert pool.workers("2", 100) == 2
    n = pool.cores()
    assert pool.workers("auto", pool.MIN_CANDIDATES - 1) == 1
    assert pool.workers(None, 10_000) == (n if n > 1 else 1)
    for bad in (0, -1, "x", 1.5, True):
        with pytest.raises(UsageError, match="--jobs"):
            pool.workers(bad, 100)


@pytest.mark.slow
def test_cli_jobs(capsys, untimed):
    """The text a user reads is the same whatever --jobs is; a bad --jobs is a usage error."""
    argv = ["search", str(ROOT / "examples" / "mlp.sc"), "--backward", "--mesh", "X=4,Y=4", "--hw", "tpu-v5p",
            "--dims", DIMS, "--top", "4"]
    outs = []
    for jobs in ("1", "2"):
        assert main(argv + ["--jobs", jobs]) == 0
        outs.append(capsys.readouterr().out)
    assert untimed(outs[0]) == untimed(outs[1]) and "priced 81 shardings in " in outs[0]
    assert main(argv + ["--jobs", "0"]) == 2
    assert "--jobs must be at least 1" in capsys.readouterr().err


@pytest.mark.slow
def test_fresh_workers(monkeypatch):
    """Workers started from a fresh server process (where forking is unsafe: JAX loaded, threads running)
    receive the space and options pickled, and price as this process does."""
    monkeypatch.setattr(processes, "start_method", lambda: "forkserver")
    one = search(MLP, "X=4", DIMS, "tpu-v5p", backward=True, jobs=1)
    two = search(MLP, "X=4", DIMS, "tpu-v5p", backward=True, jobs=2)
    assert [(p.candidate, p.t_step, p.memory_bytes) for p in two.ranked] == \
           [(p.candidate, p.t_step, p.memory_bytes) for p in one.ranked]
    from multiprocessing import forkserver    # the server imported the engine once, not each worker
    assert "symcost.searching.pool" in forkserver._forkserver._preload_modules


@pytest.mark.slow
def test_a_worker_that_dies_is_an_error_not_a_traceback():
    """A worker killed under a search (out of memory, a signal) ends it with one sentence and its exit code,
    however the workers were started."""
    import multiprocessing
    import os
    import signal

    from symcost.searching import _space
    space, sizes, _ = _space(MLP, "X=4,Y=4", DIMS, "tpu-v5p", None, None)
    got = pool.priced_all(space, list(space.candidates()), jobs=2, options=dict(dims=sizes, hw="tpu-v5p"))
    assert next(got) is not None
    for proc in multiprocessing.active_children():
        os.kill(proc.pid, signal.SIGKILL)
    with pytest.raises(symcost.SymcostError, match=r"a pricing worker stopped \(exit code -9\)"):
        list(got)


def test_start_method_avoids_forking_threads(monkeypatch):
    import sys
    if sys.platform != "linux":
        assert pool.start_method() == "spawn"
        return
    monkeypatch.setitem(sys.modules, "jax", object())
    assert pool.start_method() == "forkserver"
    monkeypatch.delitem(sys.modules, "jax")
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    import threading
    if threading.active_count() == 1:
        assert pool.start_method() == "fork"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads a process's children from /proc")
def test_ctrl_c_stops_the_workers_quietly(tmp_path, python_ctrl_c):
    """Ctrl-C on a terminal interrupts the whole process group: the search stops with exit code 130, no
    traceback from any worker, and no worker left running."""
    import os
    import signal
    import subprocess
    import sys
    import time
    layer = tmp_path / "layer.sc"
    from symcost.models.config import load_model_config
    from symcost.models.transformer import open_layer
    layer.write_text(open_layer(load_model_config("llama3-8b"), batch=8, seq=4096)[0])
    proc = subprocess.Popen([sys.executable, "-m", "symcost.cli", "search", str(layer), "--backward", "--mesh",
                             "X=4,Y=2", "--hw", "h100", "--jobs", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None and len(children.read_text().split()) < 2:
        time.sleep(0.1)
    workers = children.read_text().split()
    assert len(workers) == 2                       # the search (minutes long) is running in two workers
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "Traceback" not in err.decode() and "Worker" not in err.decode()
    assert not any(Path(f"/proc/{w}").exists() and "zombie" not in Path(f"/proc/{w}/status").read_text()
                   for w in workers)


def _stops(method, times, monkeypatch):
    """``times`` pooled pricings of the MLP's 81 candidates (forward only, X=4,Y=4), each stopped
    early after a different number of candidates, alternately by closing the generator and by Ctrl-C
    (KeyboardInterrupt) arriving where the caller waits for the next candidate."""
    import multiprocessing
    import multiprocessing.connection as mp_connection

    from symcost.searching import _space
    monkeypatch.setattr(processes, "start_method", lambda: method)
    handed = []
    real = mp_connection.Connection.send

    def counted(self, obj):                # in this process: the chunks sent to the workers
        handed.append(1)
        return real(self, obj)
    monkeypatch.setattr(mp_connection.Connection, "send", counted)
    space, sizes, _ = _space(MLP, "X=4,Y=4", DIMS, "tpu-v5p", None, None)
    cands = list(space.candidates())
    size = max(1, min(pool.CHUNK, len(cands) // (2 * 8)))
    opts = dict(dims=sizes, hw="tpu-v5p")
    for i in range(times):
        handed.clear()
        got = pool.priced_all(space, cands, jobs=2, options=opts)
        read = [next(got) for _ in range(1 + 3 * i)]
        assert len(read) == 1 + 3 * i and read[0] is not None
        if i % 2:
            with pytest.raises(KeyboardInterrupt):
                got.throw(KeyboardInterrupt)
        else:
            got.close()
        assert got.gi_frame is None                     # the stop returned, the generator is finished
        assert multiprocessing.active_children() == []  # no worker left running
        # no backlog: the workers were handed the chunks read and a window ahead of them, not all
        assert 1 <= len(handed) <= -(-len(read) // size) + processes.WINDOW * 2 + 1 < -(-len(cands) // size)


@pytest.mark.slow
def test_stopping_early_leaves_no_worker(monkeypatch):
    """Four pooled pricings stopped early (the generator closed, or Ctrl-C) each return, leave no worker
    process alive, and had only a window of chunks handed to the pool, so a stop waits on no backlog. (A
    test process that has planned for a while forks slowly: a stop costs it about a second.)"""
    _stops(pool.start_method(), 4, monkeypatch)


@pytest.mark.slow
def test_stopping_early_fresh_workers(monkeypatch):
    """The same with workers started from a fresh server process."""
    _stops("forkserver", 3, monkeypatch)


def _square(x):
    return x * x


def _nothing():
    return None


def test_work_is_done_here_where_no_worker_could_run_the_main_module_again(monkeypatch):
    """``python - < script.py`` with a thread alive (a progress bar's, once): workers not forked run the
    caller's main module again, which they would look for as a file named ``<stdin>``, and every worker
    stopped at once ("a serving worker stopped (exit code 1)"). The work is done in the caller instead, in
    order; a main module that is a file, or none, is run again as before."""
    import sys
    import types
    main_module = types.ModuleType("__main__")
    main_module.__file__ = "<stdin>"
    monkeypatch.setitem(sys.modules, "__main__", main_module)
    monkeypatch.setattr(processes, "start_method", lambda: "forkserver")
    got = list(processes.answered([[1, 2], [3]], 2, _square, _nothing, ()))
    assert got == [([1, 2], [1, 4]), ([3], [9])]
    assert not processes._main_importable()
    main_module.__file__ = __file__
    assert processes._main_importable()
    del main_module.__file__
    assert processes._main_importable()


def test_a_progress_bar_leaves_no_thread_behind():
    """tqdm's monitor thread (it wakes every 10 s to redraw a bar) outlived the bar, and a thread alive made
    every later search start its workers from a fresh server, with cold caches: a serving search on a
    terminal took 4.5 s on two workers, 3.3 s without it."""
    pytest.importorskip("tqdm")
    import subprocess
    import sys
    code = ("import threading\nfrom symcost import progress\nwith progress.showing(True):\n"
            "    progress.advance(1, 'testing the bar', total=2)\n    progress.advance(1, 'testing the bar', total=2)\n"
            "print(threading.active_count())")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0 and got.stdout.split() == ["1"], got.stderr     # a fresh process: no earlier bar

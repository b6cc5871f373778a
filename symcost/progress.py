"""Progress on long work: a bar on the terminal (tqdm, the ``progress`` extra) while a search runs.

Off by default, so that library calls stay silent; the command line turns it on when its standard error is
a terminal. Work reports what it has done with :func:`advance`; nothing is shown for work that ends within
``DELAY`` seconds.

A bar is tqdm without its monitor thread (which wakes every 10 s to redraw a bar left alone; it outlived
the bar): a thread alive makes the searches start their worker processes from a fresh server, with cold
caches, for the rest of the process (:func:`symcost.processes.start_method`: a fork copies one thread alone).
The bars here are updated as the work is done.

    >>> with showing(False):
    ...     advance(10, "searching layouts")   # off: does nothing
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any

DELAY = 2.0          # seconds before a bar appears
_state: dict[str, Any] = {"on": False, "bar": None, "what": None}   # bars shown; the open bar (tqdm); what it counts


@contextlib.contextmanager
def showing(on: bool = True):
    """Show progress bars inside this block (when tqdm is installed)."""
    before = _state["on"]
    _state["on"] = on
    try:
        yield
    finally:
        _state["on"] = before
        _close()


def advance(n: int, what: str, *, total: int | None = None, unit: str = " layouts", label: str = "",
            inner: bool = False) -> None:
    """``n`` more units of ``what`` done (e.g. moves a search looked at); ``total``: how many there will be
    (a bar with an end); ``label``: what is running now, shown after the bar. ``inner``: work that runs
    inside a stage of its own bar (the route searches of a plan a search prices), shown only where no other
    bar is open: it would close that bar, whose count would start again at its next item."""
    if not _state["on"]:
        return
    if _state["what"] != what:
        if inner and _state["bar"] is not None:
            return
        _close()
        try:
            from tqdm import tqdm
        except ImportError:
            _state["on"] = False
            return
        bar = type("Bar", (tqdm,), {"monitor_interval": 0})     # see the module docstring: no monitor thread
        _state["bar"] = bar(desc=what, total=total, unit=unit, delay=DELAY, file=sys.stderr, leave=False)
        _state["what"] = what
    if total is not None and _state["bar"].total != total:
        _state["bar"].total = total
    if label:
        _state["bar"].set_postfix_str(label, refresh=False)
    _state["bar"].update(n)


def say(message: str) -> None:
    """A line for the person waiting (a count, an estimate), on standard error while bars are shown; above
    the bar when one is open. Nothing otherwise (library calls stay silent)."""
    if not _state["on"]:
        return
    if _state["bar"] is not None:
        _state["bar"].write(message, file=sys.stderr)
    else:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


def _close() -> None:
    if _state["bar"] is not None:
        _state["bar"].close()
    _state["bar"], _state["what"] = None, None


def quiet() -> None:
    """This process shows no bar from now on (a worker process: the process that started it shows the
    progress); a bar inherited from that process is left to it."""
    _state.update(on=False, bar=None, what=None)

"""Figures as files (matplotlib, the ``plot`` extra): the one place that checks the file name, loads
matplotlib without a screen and writes the figure, for every command that draws (``plot``, ``search
--plot``, ``measure --plot``).

    >>> check_name("out.txt")
    Traceback (most recent call last):
    ...
    symcost.errors.UsageError: cannot write out.txt: use a .png, .svg or .pdf file name
"""
from __future__ import annotations

import os

from ..errors import UsageError

FORMATS = (".png", ".svg", ".pdf")


def check_name(out: str) -> str:
    """``out`` if matplotlib can write it, else a UsageError naming the formats."""
    if os.path.splitext(out)[1].lower() not in FORMATS:
        raise UsageError(f"cannot write {out}: use a .png, .svg or .pdf file name")
    return out


def pyplot():
    """matplotlib.pyplot on the file-only backend, or a UsageError saying how to install it."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("plots need matplotlib: pip install 'symcost[plot]'") from None
    return plt


def save(fig, out: str) -> str:
    """Write ``fig`` to ``out`` and close it; a file that cannot be written is a UsageError."""
    check_name(out)
    try:
        fig.savefig(out, dpi=120, bbox_inches="tight")
    except OSError as e:
        raise UsageError(f"cannot write {out}: {e.strerror}") from None
    finally:
        pyplot().close(fig)
    return out

"""Hardware presets: chips as data files (``<name>.toml`` here, or a user's own file), every number with
its source.

    >>> from symcost.hardware import hardware
    >>> v5p = hardware("tpu-v5p")
    >>> v5p.C, v5p.ici_bandwidth, round(v5p.C / v5p.ici_bandwidth)
    (459000000000000.0, 180000000000.0, 2550)
    >>> hardware("tpu-v5e").wraparound((16, 4))
    (True, False)

Names are case-insensitive and forgiving: ``v5p``, ``TPUv5p``, ``tpu_v5p`` and ``H100-SXM`` all resolve;
a path to a ``.toml`` file with the presets' schema (as ``symcost calibrate`` writes) loads that file. A mesh
given with a preset is the slice; :meth:`Hardware.wraparound` says which of its axes are rings.
"""
from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from .. import caching
from ..errors import UsageError
from .chip import Hardware
from .efficiency import Efficiency
from .loading import NUMERIC, OPTIONAL, REQUIRED, load, parse

HERE = Path(__file__).parent

__all__ = ["Hardware", "Efficiency", "hardware", "presets", "load", "parse", "REQUIRED", "NUMERIC", "OPTIONAL"]


@caching.memoize(maxsize=1)
def _shipped() -> tuple[str, ...]:
    """The shipped presets' names (each file is read when it is first asked for: a search reads one)."""
    return tuple(sorted(p.stem for p in HERE.glob("*.toml")))


@caching.memoize(maxsize=64)
def _preset(name: str) -> Hardware:
    return load(HERE / f"{name}.toml")


def presets() -> tuple[str, ...]:
    """The shipped preset names, sorted."""
    return _shipped()


def _key(name: str) -> str:
    k = re.sub(r"[\s_]+", "-", name.strip().lower())
    k = re.sub(r"-(sxm|sxm4|sxm5)$", "", k)
    k = re.sub(r"^tpu-?", "", k)
    return k


@caching.memoize(maxsize=64)
def _shipped_named(name: str) -> str | None:
    """The shipped preset a name resolves to (None: none), the names' keys made once a name (every plan a
    search derives names its chip)."""
    return {_key(n): n for n in _shipped()}.get(_key(name))


@caching.memoize(maxsize=64)
def _file(path: str, mtime: float) -> Hardware:
    return load(Path(path))


def hardware(name) -> Hardware:
    """A preset by name (case-insensitive; ``v5p``, ``TPUv5p``, ``tpu_v5p`` and ``H100-SXM`` resolve), or
    a preset file by path (``my-h100.toml``); a Hardware value is returned as it is."""
    if isinstance(name, Hardware):
        return name
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str) or not name.strip():
        raise UsageError("name a hardware preset, e.g. tpu-v5p, or a preset file")
    if name.endswith(".toml") or os.sep in name or os.path.isfile(name):
        if not os.path.isfile(name):
            raise UsageError(f"no hardware file {name}")
        return _file(os.path.abspath(name), os.path.getmtime(name))
    hit = _shipped_named(name)
    if hit is None:
        close = difflib.get_close_matches(name.lower(), list(_shipped()), n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise UsageError(f"unknown hardware {name!r}{hint}{' Known' if close else '; known'} presets: "
                         f"{', '.join(presets())}, or a .toml preset file")
    return _preset(hit)

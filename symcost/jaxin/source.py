"""Where in the user's source an equation of a jaxpr came from, for error messages and comments."""
from __future__ import annotations

import os


def where(eqn, callers=()) -> str:
    """``file.py:12 (fn)``: the user's line an equation came from; ``callers``: the lines of the calls being
    read through (an equation inside a library function -- jnp.cumsum is jitted -- is named by the user's
    line that called it)."""
    try:
        from jax._src import source_info_util
        s = source_info_util.summarize(eqn.source_info)
    except Exception:  # noqa: BLE001 -- a JAX without source_info_util.summarize: say less
        s = ""
    path, _, rest = s.partition(":")
    line = rest.split(":")[0]
    if not line.isdigit():
        return callers[-1] if callers else "an unknown line"
    return os.path.basename(path) + ":" + line + (" " + rest.split(" ", 1)[1] if " " in rest else "")

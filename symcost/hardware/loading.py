"""Reading a preset file: the TOML schema of the shipped presets, every bad field named.

    >>> parse({"name": "x"}, "x.toml")
    Traceback (most recent call last):
    ...
    symcost.errors.UsageError: x.toml lacks the fields 'family', 'description', 'hbm_bytes', 'hbm_bandwidth', ...
"""
from __future__ import annotations

import difflib
import math
import tomllib
from pathlib import Path

from ..errors import UsageError
from .chip import Hardware
from .efficiency import Efficiency, parse_efficiency

REQUIRED = ("name", "family", "description", "hbm_bytes", "hbm_bandwidth", "ici_bandwidth", "ici_one_way",
            "dcn_bandwidth", "pcie_bandwidth", "t_min", "topology", "pod", "host", "flops", "sources")
NUMERIC = ("hbm_bytes", "hbm_bandwidth", "ici_bandwidth", "ici_one_way", "dcn_bandwidth", "pcie_bandwidth",
           "t_min")
OPTIONAL = ("nvlink_domain", "vector_flops", "efficiency", "calibration")
FAMILIES = ("tpu", "gpu", "cpu")
TOPOLOGIES = ("torus2d", "torus3d", "switched")


def _positive(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def _shape(v, field: str, where: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not v or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
        raise UsageError(f"{where}: field {field!r} must be a list of positive integers, not {v!r}")
    return tuple(v)


def _sources(data: dict, where: str) -> dict:
    """The preset's [sources] table, with a source for every figure it gives."""
    sources = data["sources"]
    if not isinstance(sources, dict):
        raise UsageError(f"{where}: field 'sources' must be a table of strings")
    needed = list(NUMERIC) + ["flops"] + [f for f in ("vector_flops", "efficiency") if f in data]
    for f in needed:
        if not isinstance(sources.get(f), str) or not sources[f].strip():
            raise UsageError(f"{where} gives no source for {f!r} (add it under [sources])")
    return sources


def parse(data: dict, where: str) -> Hardware:
    """A Hardware value from a preset's parsed TOML (``where`` names the file in errors)."""
    missing = [f for f in REQUIRED if f not in data]
    unknown = sorted(set(data) - set(REQUIRED) - set(OPTIONAL))
    if unknown:         # a misspelt field is named with the one it may mean, before the one it leaves missing
        f = unknown[0]
        near = difflib.get_close_matches(f, [*missing, *OPTIONAL], n=1) or \
            difflib.get_close_matches(f, [*REQUIRED, *OPTIONAL], n=1)
        more = f"; {len(unknown) - 1} more: {', '.join(map(repr, unknown[1:]))}" if len(unknown) > 1 else ""
        raise UsageError(f"{where}: unknown field {f!r}" + (f" (did you mean {near[0]!r}?)" if near else "") + more)
    if missing:         # every field a preset lacks at once, not one a try
        raise UsageError(f"{where} lacks the field{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} "
                         f"(the shipped presets, symcost/hardware/*.toml, give each with its source)")
    for f in NUMERIC:
        if not _positive(data[f]):
            raise UsageError(f"{where}: field {f!r} must be a positive number, not {data[f]!r}")
    if data["family"] not in FAMILIES:
        raise UsageError(f"{where}: field 'family' must be one of {', '.join(FAMILIES)}, not {data['family']!r}")
    if data["topology"] not in TOPOLOGIES:
        raise UsageError(f"{where}: field 'topology' must be one of {', '.join(TOPOLOGIES)}, not {data['topology']!r}")
    flops = data["flops"]
    if not isinstance(flops, dict) or not flops:
        raise UsageError(f"{where}: field 'flops' must be a table of FLOPs/s by dtype")
    for k, v in flops.items():
        if not _positive(v):
            raise UsageError(f"{where}: field 'flops.{k}' must be a positive number, not {v!r}")
    eff = parse_efficiency(data["efficiency"], where) if "efficiency" in data else Efficiency()
    sources = _sources(data, where)
    if "vector_flops" in data and not _positive(data["vector_flops"]):
        raise UsageError(f"{where}: field 'vector_flops' must be a positive number, not {data['vector_flops']!r}")
    cal = data.get("calibration", {})
    if not isinstance(cal, dict) or any(isinstance(v, (dict, list)) for v in cal.values()):
        raise UsageError(f"{where}: field 'calibration' must be a table of plain values (what was measured, where, "
                         f"when)")
    domain = data.get("nvlink_domain")
    if domain is not None and not (isinstance(domain, int) and not isinstance(domain, bool) and domain > 0):
        raise UsageError(f"{where}: field 'nvlink_domain' must be a positive integer, not {domain!r}")
    return Hardware(
        name=str(data["name"]), family=data["family"], description=str(data["description"]),
        hbm_bytes=float(data["hbm_bytes"]), hbm_bandwidth=float(data["hbm_bandwidth"]),
        flops=tuple((k, float(v)) for k, v in flops.items()),
        ici_bandwidth=float(data["ici_bandwidth"]), ici_one_way=float(data["ici_one_way"]),
        dcn_bandwidth=float(data["dcn_bandwidth"]), pcie_bandwidth=float(data["pcie_bandwidth"]),
        t_min=float(data["t_min"]), topology=data["topology"], pod=_shape(data["pod"], "pod", where),
        host=_shape(data["host"], "host", where), nvlink_domain=domain,
        sources=tuple(sorted((k, str(v)) for k, v in sources.items())),
        vector_flops=float(data["vector_flops"]) if "vector_flops" in data else None, efficiency=eff,
        origin=where)


def load(path: Path) -> Hardware:
    """Read and check a preset file."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read hardware file {path}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"hardware file {path} is not valid TOML: {e}") from None
    return parse(data, str(path) if path.parent != Path(__file__).parent else path.name)

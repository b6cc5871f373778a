"""A calibration as a preset file (the schema of the shipped presets, ``--hw FILE`` reads it back).

By default the best measured figures become the preset's peaks (the FLOP/s of the best matmul of each
dtype, the HBM bandwidth of the better of copy and read, the link bandwidth the fastest collective
implies, T_min from the fitted latencies), and ``[efficiency]`` says how far below them smaller work falls
(matmul by size and dtype, copy against read, each collective's bandwidth fraction, latency and fit
residual): the engine prices with the peaks, so its predictions use what was measured. What was not
measured comes from the device's shipped preset (an H100, a TPU v5e, ...), from the nearest shipped chip
for an unknown accelerator, or from nominal figures for a CPU, each source saying so; a dtype not swept
is scaled by the fraction of the datasheet the swept one reached. ``measured_peaks=False`` (``--peaks
datasheet``) keeps a known chip's datasheet peaks and writes the fractions of them a run reaches.
"""
from __future__ import annotations

import json
import math
import statistics

from ..errors import UsageError
from ..hardware import Hardware, hardware, parse, presets
from . import runtime

#: device kinds as JAX names them -> the shipped preset
KINDS = (("a100", "a100"), ("h100", "h100"), ("h200", "h200"), ("b200", "b200"), ("v5 lite", "tpu-v5e"),
         ("v5e", "tpu-v5e"), ("v5p", "tpu-v5p"), ("v6", "tpu-v6e"), ("v4", "tpu-v4p"), ("v3", "tpu-v3"))
NEAREST = {"gpu": "h100", "tpu": "tpu-v5e"}
#: the figure a link kind's collectives are priced with (``Hardware`` field) and its binding
LINK_FIGURE = {"ici": ("ici_bandwidth", "W_ici"), "nvlink": ("ici_one_way", "W_nvlink"),
               "dcn": ("dcn_bandwidth", "W_dcn")}
MAX_ETA = 1.5


def match_preset(info: runtime.DeviceInfo) -> str | None:
    """The shipped preset of the device JAX sees, or None."""
    kind = info.kind.lower()
    if info.platform == "cpu":
        return None
    return next((name for needle, name in KINDS if needle in kind and name in presets()), None)


def provisional(info: runtime.DeviceInfo) -> Hardware:
    """A preset for a device without a datasheet here: figures from the nearest shipped chip (a CPU gets
    nominal ones) until the calibration replaces them with its measurements."""
    near = NEAREST.get(info.platform)
    n = max(1, info.count)
    if near:
        h = hardware(near)
        data = _as_data(h)
        data.update(name=f"{info.platform}-calibrated", pod=[n], host=[n],
                    description=f"{info.kind}: calibrated by symcost (no datasheet preset; unmeasured figures "
                                f"from {near})")
        if data.get("nvlink_domain"):
            data["nvlink_domain"] = n
        for k in data["sources"]:
            data["sources"][k] = (f"not measured: from the shipped {near} preset (the nearest chip); "
                                  + data["sources"][k])
        if info.memory:
            data["hbm_bytes"] = info.memory
            data["sources"]["hbm_bytes"] = "the device's memory as JAX reports it (bytes_limit)"
        return parse(data, "calibration")
    memory = info.memory or 1e9
    nominal = "not measured: a nominal figure (host devices share one memory; no network between them is measured)"
    data = {"name": "cpu-calibrated", "family": "cpu",
            "description": f"{info.kind}: {n} host devices, calibrated by symcost",
            "hbm_bytes": memory, "hbm_bandwidth": 1e10, "ici_bandwidth": 1e10, "ici_one_way": 5e9,
            "dcn_bandwidth": 1.25e9, "pcie_bandwidth": 3.2e10, "t_min": 1e-5, "topology": "switched", "pod": [n],
            "host": [n], "nvlink_domain": n, "flops": {"bf16": 1e11},
            "sources": {"hbm_bytes": f"host memory (os.sysconf) over the {n} host devices JAX was given",
                        "hbm_bandwidth": nominal, "ici_bandwidth": nominal, "ici_one_way": nominal,
                        "dcn_bandwidth": "not measured: nominal 10 Gb/s Ethernet",
                        "pcie_bandwidth": "not measured: nominal PCIe Gen4 x16", "t_min": nominal, "flops": nominal,
                        "topology": "host devices: every device reaches every other through shared memory",
                        "nvlink_domain": "host devices: one switched domain of all of them (their axes are priced "
                                         "as :nvlink axes)"}}
    return parse(data, "calibration")


def _efficiency_data(e) -> dict:
    """An ``Efficiency`` value as its ``[efficiency]`` table (what a calibration did not measure is kept)."""
    if e is None or e.ideal:
        return {}
    out: dict = {"hbm": e.hbm, "vector": e.vector}
    if e.matmul:
        out["matmul"] = {dt: {"flops": [f for f, _ in pts], "eta": [x for _, x in pts]} for dt, pts in e.matmul}
    for link, name, eta, lat, res in e.collectives:
        table = out.setdefault("collectives", {}).setdefault(link, {})
        entry = table.setdefault(name, {}) if name else table
        entry.update({"eta": eta, "latency": lat, **({"residual": res} if res else {})})
    if e.waves:
        out["waves"] = {"units": e.waves[0], "tiles": [list(t) for t in e.waves[1]]}
    if e.t_kernel:
        out["t_kernel"] = e.t_kernel
    return out


def _as_data(h: Hardware) -> dict:
    """A Hardware value as preset data (its efficiency table and their sources included)."""
    data = {"name": h.name, "family": h.family, "description": h.description, "hbm_bytes": h.hbm_bytes,
            "hbm_bandwidth": h.hbm_bandwidth, "ici_bandwidth": h.ici_bandwidth, "ici_one_way": h.ici_one_way,
            "dcn_bandwidth": h.dcn_bandwidth, "pcie_bandwidth": h.pcie_bandwidth, "t_min": h.t_min,
            "topology": h.topology, "pod": list(h.pod), "host": list(h.host), "flops": dict(h.flops),
            "sources": dict(h.sources)}
    if not h.efficiency.ideal:
        data["efficiency"] = _efficiency_data(h.efficiency)
    if h.nvlink_domain:
        data["nvlink_domain"] = h.nvlink_domain
    if h.vector_flops:
        data["vector_flops"] = h.vector_flops
    return data


def _eta(x: float) -> float:
    return float(min(MAX_ETA, max(1e-6, x)))


def _round(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def _round_up(x: float, digits: int = 3) -> float:
    """``x`` to ``digits`` significant digits, never below it (a residual written is a bound that holds)."""
    if x <= 0:
        return 0.0
    scale = 10 ** (math.floor(math.log10(x)) - digits + 1)
    return float(f"{math.ceil(x / scale - 1e-9) * scale:.{digits}g}")


OWN = ("not measured", "host", "the device's")     # sources a provisional preset already words as such


def datasheet_flops(base, dt: str) -> float | None:
    """The base preset's datasheet FLOP/s for ``dt`` (None for a provisional preset or a dtype it lacks)."""
    if base.name.endswith("-calibrated"):
        return None
    try:
        return base.flops_for(dt)
    except UsageError:
        return None


def build_preset(cal, name: str, measured_peaks: bool = True) -> dict:
    """Preset data for a calibration ``cal`` (see the module docstring). ``measured_peaks`` (the default):
    the best measured figures are the preset's peaks, with the efficiency table relative to them, so the
    engine's predictions use what was measured; otherwise the base's datasheet peaks stay and the table
    holds the fractions of them a run reaches."""
    base = cal.base
    data = _as_data(base)
    src = data["sources"]
    d = cal.device
    how = f"measured by symcost calibrate on {d.describe()}, {cal.when}"
    data["name"] = name
    if not base.name.endswith("-calibrated"):
        data["description"] = f"{base.description}; calibrated on {d.kind}"
    for k in list(src):
        if not src[k].startswith(OWN):
            src[k] = f"not measured: from the {base.name} preset; " + src[k]
    eff: dict = data.pop("efficiency", {})     # the base's own fractions stand where nothing was measured
    if measured_peaks:                          # ... unless its figures are replaced by measured peaks
        eff = {}
        for k in [k for k in src if k == "efficiency" or k.startswith("efficiency.")]:
            del src[k]
    matmul = _matmul_figures(cal, data, how, measured_peaks)
    if matmul:
        eff.setdefault("matmul", {}).update(matmul)
        eff.pop("waves", None)    # the swept sizes' rates already hold their waves
    eff.update(_memory_figures(cal, data, how, measured_peaks))
    colls = {link: _link_figures(cal, data, how, measured_peaks, link, n) for link, n in _largest_axes(cal).items()}
    if colls:
        eff.setdefault("collectives", {}).update(colls)
    elif cal.skipped.get("collectives"):
        src["efficiency.collectives"] = f"not measured ({cal.skipped['collectives']}): the model's figures stand"
    data["efficiency"] = eff
    src["efficiency"] = f"{how}; each table's own source says what was run"
    data["calibration"] = {"device": d.kind, "platform": d.platform, "devices": d.count, "when": cal.when,
                           "runs": cal.sweep.runs, "jax": d.jax_version, "mesh": cal.mesh, "quick": cal.quick,
                           "base": base.name, "peaks": "measured" if measured_peaks else "datasheet"}
    parse(data, f"the calibrated preset {name}")     # the file must load back
    return data


def _runs(s) -> str:
    return f"median of {s.timing.runs} runs"


def _matmul_figures(cal, data: dict, how: str, measured_peaks: bool) -> dict:
    """The matmul efficiency table by dtype (and, with measured peaks, each dtype's peak FLOP/s: the best
    matmul for a swept dtype, the datasheet's figure scaled by the fraction a swept one reached otherwise)."""
    base, src = cal.base, data["sources"]
    matmul = {}
    for dt, pts in cal.matmul.items():
        best = max(p.rate for p in pts)
        try:
            peak = base.flops_for(dt) if not measured_peaks else None
        except UsageError:
            peak = None
        if peak is None:
            peak = best
            data["flops"][dt] = _round(best)
            src[f"flops.{dt}"] = (f"{how}: the best {dt} matmul ({max(pts, key=lambda p: p.rate).size}^3), "
                                  f"{_runs(pts[0])}")
        matmul[dt] = {"flops": [p.work for p in pts], "eta": [_round(_eta(p.rate / peak), 3) for p in pts]}
        src[f"efficiency.matmul.{dt}"] = (f"{how}: n x n x n {dt} matmuls, n = "
                                          f"{', '.join(str(p.size) for p in pts)}; achieved / {peak:.4g} FLOP/s; "
                                          f"{_runs(pts[0])} each")
        sheet = datasheet_flops(base, dt)
        if measured_peaks and sheet:
            src[f"flops.{dt}"] += f"; {best / sheet:.0%} of the {base.name} datasheet's {sheet:.4g} FLOP/s"
    if "bf16" not in data["flops"]:
        raise UsageError("the calibration measured no bf16 matmul, and the preset needs a bf16 figure")
    if measured_peaks:
        src["flops"] = f"{how}: the best matmul of each dtype (see efficiency.matmul for each size)"
        ref = next((dt for dt in ("bf16", *cal.matmul) if dt in cal.matmul and datasheet_flops(base, dt)), None)
        for dt in [dt for dt in data["flops"] if dt not in cal.matmul]:
            if ref is None:
                continue
            frac = data["flops"][ref] / datasheet_flops(base, ref)
            data["flops"][dt] = _round(data["flops"][dt] * frac)
            src[f"flops.{dt}"] = (f"not measured: the {base.name} datasheet's {dt} figure times the fraction of its "
                                  f"{ref} figure measured ({frac:.0%})")
    return matmul


def _memory_figures(cal, data: dict, how: str, measured_peaks: bool) -> dict:
    """HBM bandwidth and its efficiency, elementwise (vector) work and the per-kernel floor: the entries of
    the efficiency table they give."""
    src, eff = data["sources"], {}
    copy, read = cal.copy, cal.read
    if measured_peaks:
        data["hbm_bandwidth"] = _round(max(copy.rate, read.rate))
        src["hbm_bandwidth"] = (f"{how}: the best of copy ({copy.rate:.4g} B/s over {copy.size:.3g} bytes, read and "
                                f"written) and read ({read.rate:.4g} B/s, a sum), {_runs(copy)}")
    eff["hbm"] = _round(_eta(copy.rate / data["hbm_bandwidth"]), 3)
    src["efficiency.hbm"] = (f"{how}: copy {copy.rate:.4g} B/s (x * a + b over {copy.size:.3g} bytes, in place), read "
                             f"{read.rate:.4g} B/s (a sum) over {data['hbm_bandwidth']:.4g} B/s; {_runs(copy)}")
    ew = cal.elementwise
    if ew is not None:
        if data.get("vector_flops") and not measured_peaks:
            eff["vector"] = _round(_eta(ew.rate / data["vector_flops"]), 3)
        else:
            data["vector_flops"] = _round(ew.rate)
            src["vector_flops"] = (f"{how}: {cal.sweep.depth} dependent bf16 multiply-adds on each of {ew.size} "
                                   f"elements in one kernel, {_runs(ew)}")
        src["efficiency.vector"] = f"{how}: {ew.rate:.4g} elementwise bf16 FLOP/s, {_runs(ew)}"
    kf = getattr(cal, "kernel", None)
    if kf is not None:
        eff["t_kernel"] = _round(kf.per_kernel)
        src["efficiency.t_kernel"] = (f"{how}: {kf.describe()}")
    return eff


def _largest_axes(cal) -> dict:
    """Per link kind, the most devices an axis of it was measured over (its fits are the ones used)."""
    by_link: dict = {}
    for c in cal.collectives:
        by_link[c.link] = max(by_link.get(c.link, c.devices), c.devices)
    return by_link


def _link_figures(cal, data: dict, how: str, measured_peaks: bool, link: str, n: int) -> dict:
    """One link kind's collective table from the fits over its largest axis (``n`` devices); with measured
    peaks, the link's bandwidth is the one the fastest collective implies and T_min the median latency."""
    base, src = cal.base, data["sources"]
    fits = [c for c in cal.collectives if c.link == link and c.devices == n]
    fits = [c for c in fits if c.axis == fits[0].axis]
    field, sym = LINK_FIGURE[link]
    if measured_peaks:   # the model's bandwidth each fit implies; the best is the link's peak
        implied = {c.kind: c.eta * base.bindings("bf16")[sym] for c in fits}
        figure = max(implied.values())
        etas = {k: v / figure for k, v in implied.items()}
        data[field] = _round(figure)
        if link == "ici":
            data["ici_one_way"] = _round(figure / 2)
            src["ici_one_way"] = f"{how}: half the measured link bandwidth"
        elif link == "nvlink":
            data["ici_bandwidth"] = data["ici_one_way"]
            src["ici_bandwidth"] = f"{how}: as ici_one_way"
        best = max(implied, key=implied.get)
        src[field] = (f"{how}: the bandwidth symcost's {link} model needs to match the fastest collective "
                      f"({best} over {fits[0].axis}, {n} devices)")
        data["t_min"] = _round(statistics.median(c.fit.latency / c.hops for c in fits))
        src["t_min"] = f"{how}: the median over the collectives of their fitted latency per hop of the {link} model"
    else:
        etas = {c.kind: c.eta for c in fits}
    table = {"eta": _round(_eta(statistics.median(etas.values())), 3),
             "latency": _round(statistics.median(c.fit.latency for c in fits))}
    for c in fits:
        entry = {"eta": _round(_eta(etas[c.kind]), 3), "latency": _round(max(0.0, c.fit.latency)),
                 "residual": _round_up(c.fit.residual)}
        names = ("Permute", "Send") if c.kind == "Permute" else (c.kind,)
        for nm in names:
            table[nm] = entry
            src[f"efficiency.collectives.{link}.{nm}"] = (
                f"{how}: {c.kind} over {c.axis} ({n} devices) at {len(c.samples)} sizes, "
                f"{c.samples[0].work:.3g} to {c.samples[-1].work:.3g} bytes of V, {_runs(c.samples[0])} each; "
                f"fit latency + V / bandwidth, largest relative residual {c.fit.residual:.1%}"
                + ("; a neighbour shift (collective-permute), which Permute and Send both are"
                   if c.kind == "Permute" else ""))
    src[f"efficiency.collectives.{link}"] = f"{how}: the median over its collectives"
    return table


# ---------------------------------------------------------------------------------------------- TOML


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise UsageError(f"cannot write {v} to a preset")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)


def to_toml(data: dict, header: str = "") -> str:
    """Preset data as TOML text: scalars first, then each table (nested tables as dotted headers)."""
    lines = [f"# {h}" for h in header.splitlines()] if header else []

    def table(d: dict, path: list[str]):
        scalars = [(k, v) for k, v in d.items() if not isinstance(v, dict)]
        if path and scalars:
            lines.append("")
            lines.append("[" + ".".join(_key(p) for p in path) + "]")
        for k, v in scalars:
            lines.append(f"{_key(k)} = {_value(v)}")
        for k, v in d.items():
            if isinstance(v, dict):
                table(v, path + [k])
    table(data, [])
    return "\n".join(lines) + "\n"

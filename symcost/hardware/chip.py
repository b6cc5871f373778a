"""One chip's figures and the topology rules of its slices (a frozen value; presets are data files).

    >>> from symcost.hardware import hardware
    >>> hardware("tpu-v5e").wraparound((16, 4))
    (True, False)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import caching
from ..errors import UsageError
from .efficiency import Efficiency


@dataclass(frozen=True)
class Hardware:
    """One chip's figures (bytes, bytes/s, FLOPs/s, seconds) and the topology rules of its slices."""

    name: str
    family: str
    description: str
    hbm_bytes: float
    hbm_bandwidth: float
    flops: tuple[tuple[str, float], ...]
    ici_bandwidth: float      # TPU: bidirectional per link (W_ici); GPU: NVLink per GPU one way (W_nvlink)
    ici_one_way: float
    dcn_bandwidth: float      # per chip
    pcie_bandwidth: float
    t_min: float              # latency of one hop
    topology: str             # torus2d | torus3d | switched
    pod: tuple[int, ...]
    host: tuple[int, ...]
    nvlink_domain: int | None
    sources: tuple[tuple[str, str], ...]
    vector_flops: float | None = None    # elementwise FLOPs/s (TPU VPU, GPU CUDA cores), bf16
    efficiency: Efficiency = field(default_factory=Efficiency)
    origin: str = ""                     # the file it was read from

    @property
    def C(self) -> float:
        """bf16 FLOPs/s per chip."""
        return self.flops_for("bf16")

    def flops_for(self, dtype: str) -> float:
        """FLOPs/s for matmuls in ``dtype``. fp16 runs at the bf16 rate; int4 at the int8 rate unless the
        chip lists a figure; fp8 at the int8 rate on TPUs that list no fp8; fp32 is not modelled."""
        table = dict(self.flops)
        order = {"bf16": ["bf16"], "fp16": ["fp16", "bf16"], "int8": ["int8", "bf16"],
                 "fp8": ["fp8", "int8", "bf16"], "int4": ["int4", "int8", "bf16"], "fp32": ["fp32"]}
        for key in order.get(dtype, [dtype]):
            if key in table:
                return table[key]
        raise UsageError(f"{self.name} lists no {dtype} FLOPs/s figure; use --compute-dtype bf16")

    def source(self, field: str) -> str:
        return dict(self.sources).get(field, "")

    def bindings(self, dtype: str = "bf16") -> dict[str, float]:
        """Numbers for the cost symbols (C, W_hbm, W_ici, W_dcn, W_nvlink, T_min, C_vec). A preset without a
        vector figure runs elementwise FLOPs at its matmul rate (they are HBM-bound either way)."""
        out = {"C": self.flops_for(dtype), "W_hbm": self.hbm_bandwidth, "W_ici": self.ici_bandwidth,
               "W_dcn": self.dcn_bandwidth, "T_min": self.t_min, "W_pcie": self.pcie_bandwidth,
               "C_vec": self.vector_flops or self.flops_for(dtype)}
        out["W_nvlink"] = self.ici_one_way
        return out

    @property
    def torus_dims(self) -> int:
        return {"torus2d": 2, "torus3d": 3}.get(self.topology, 0)

    def edges(self, n: int, k: int | None = None) -> tuple[int, ...]:
        """The physical torus edges an axis of ``n`` chips spans: ``k`` of them when given, else as few as
        fit the pod's edges. A whole pod is the pod's shape; otherwise the most even split (book Part 2:
        slices are near-cubes of powers of two)."""
        pod = tuple(sorted(self.pod))
        dims = self.torus_dims or 1
        if k is None:
            k = next((d for d in range(1, dims + 1) if _split(n, d, pod)), dims)
        if k == len(pod) and n == _prod(pod):
            return tuple(self.pod)
        return _split(n, k, pod) or _split(n, k, None) or (n,)

    def wraparound(self, shape, links=None) -> tuple[bool, ...]:
        """Which ICI axes of a slice are rings (book Part 2). ``shape[i]`` chips on axis i, spanning
        ``links[i]`` torus dimensions (default: as few as fit the pod).

        v4p / v5p: every axis wraps iff the slice is a multiple of a full 4x4x4 cube. v5e / v6e: an axis
        wraps iff each torus dimension it spans is a full edge of 16. v3: a full edge of 32. A switched
        GPU domain has no rings (its collectives are costed as a switch): all False.
        """
        links = tuple(links) if links is not None else (None,) * len(shape)
        edges = [self.edges(int(n), k) for n, k in zip(shape, links)]
        if self.topology == "switched":
            return (False,) * len(edges)
        if self.topology == "torus3d":
            physical = [e for es in edges for e in es if e > 1]
            physical += [1] * max(0, 3 - len(physical))
            cube = len(physical) == 3 and all(e % 4 == 0 for e in physical)
            return (cube,) * len(edges)
        return tuple(all(e == self.pod[0] for e in es) for es in edges)

    def show(self) -> str:
        """Every figure with its source: each source written once, at the end, and cited by number."""
        src = dict(self.sources)
        notes: list[str] = []

        def cite(key: str) -> str:
            text = src.get(key, "")
            if not text:
                return ""
            if text not in notes:
                notes.append(text)
            return f"[{notes.index(text) + 1}]"

        rows = [f"{self.name}: {self.description}"]

        def row(label, value, key):
            rows.append(f"  {label:22s} {value:>12s}   {cite(key)}".rstrip())

        row("HBM per chip", f"{self.hbm_bytes:.3g} B", "hbm_bytes")
        row("HBM bandwidth W_hbm", f"{self.hbm_bandwidth:.3g} B/s", "hbm_bandwidth")
        for dt, v in self.flops:
            row(f"{dt} FLOPs/s", f"{v:.3g}", "flops")
        if self.family == "gpu":
            row("NVLink W_nvlink", f"{self.ici_one_way:.3g} B/s", "ici_one_way")
        else:
            row("ICI W_ici (bidi/link)", f"{self.ici_bandwidth:.3g} B/s", "ici_bandwidth")
            row("ICI one way / link", f"{self.ici_one_way:.3g} B/s", "ici_one_way")
        row("DCN per chip W_dcn", f"{self.dcn_bandwidth:.3g} B/s", "dcn_bandwidth")
        row("PCIe", f"{self.pcie_bandwidth:.3g} B/s", "pcie_bandwidth")
        row("latency per hop T_min", f"{self.t_min:.3g} s", "t_min")
        row("topology", self.topology, "topology")
        rows.append(f"  pod {'x'.join(map(str, self.pod))}, host {'x'.join(map(str, self.host))}")
        if self.vector_flops:
            row("vector FLOPs/s", f"{self.vector_flops:.3g}", "vector_flops")
        rows += [f"  {line}" for line in self.efficiency.describe(cite)]
        link = ("C/W_ici", self.ici_bandwidth) if self.family == "tpu" else ("C/W_nvlink", self.ici_one_way)
        rows.append(f"  C/W_hbm = {self.C / self.hbm_bandwidth:.0f}   {link[0]} = {self.C / link[1]:.0f}   "
                    f"C/W_dcn = {self.C / self.dcn_bandwidth:.0f}   (bf16 arithmetic intensities)")
        if notes:
            rows.append("  sources:")
            rows += [f"  [{i}] {text}" for i, text in enumerate(notes, 1)]
        return "\n".join(rows)


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


@caching.memoize(maxsize=4096)
def _split(n: int, k: int, pod) -> tuple[int, ...] | None:
    """``n`` as ``k`` factors, each at most the matching edge of ``pod`` (sorted, when given), as even as
    possible (ties: more multiples of 4); None if there is none. Kept: a run search asks it of the same
    group sizes for every candidate."""
    best = None

    def rec(rest, left, lo, acc):
        nonlocal best
        if left == 1:
            cand = tuple(sorted(acc + [rest]))
            if pod is not None and any(c > p for c, p in zip(cand, pod[-k:])):
                return
            key = (cand[-1] / cand[0], -sum(c % 4 == 0 for c in cand))
            if best is None or key < best[0]:
                best = (key, cand)
            return
        for f in divisors:          # ascending: the first of equally even splits is kept
            if f < lo or rest % f:
                continue
            if f * f > rest and not (left > 2 and f <= rest):
                break
            rec(rest // f, left - 1, f, acc + [f])
    if k == 1:
        return (n,) if pod is None or n <= pod[-1] else None
    # only n's divisors can be factors: a walk over them, not over every number up to n (a search asks
    # for the edges of thousands of groups, on pods of thousands of chips)
    divisors = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    divisors = sorted(set(divisors + [n // d for d in divisors]))
    rec(n, k, 2 if n >= 2 ** k else 1, [])
    return best[1] if best else None

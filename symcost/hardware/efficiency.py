"""Achieved efficiency as data: what fraction of a datasheet figure a real run reaches.

A preset without an ``[efficiency]`` table is the book's ideal machine (every fraction 1, no per-collective
latency beyond T_min per hop). A preset may give, each with a source:

    [efficiency]
    hbm = 0.88                        # achieved / peak HBM bandwidth
    vector = 0.8                      # achieved / peak elementwise FLOP/s
    t_kernel = 4e-6                   # the per-kernel floor, seconds: no kernel runs in less
    [efficiency.matmul.bf16]          # achieved / peak FLOP/s by the FLOPs of one matmul (log-interpolated)
    flops = [2.1e9, 1.7e10, 1.4e11, 1.1e12]
    eta = [0.35, 0.62, 0.74, 0.79]
    [efficiency.collectives.nvlink]   # per link kind: achieved bandwidth fraction, fixed latency per collective
    eta = 0.78
    latency = 8e-6
    [efficiency.collectives.nvlink.AllReduce]    # optionally per collective (a calibration's fit)
    eta = 0.74
    latency = 1.1e-5
    residual = 0.03
    [efficiency.waves]                # a GPU's matmul runs in waves of output tiles over its SMs
    units = 108
    tiles = [[256, 128], [128, 256]]

    >>> e = Efficiency(matmul=(("bf16", ((1e9, 0.4), (1e12, 0.8))),))
    >>> round(e.math(3.16e10), 2), e.math(1e15), e.hbm
    (0.6, 0.8, 1.0)

**Waves.** A GPU computes a matmul's ``M x N`` output in tiles, one tile per streaming multiprocessor at a
time; the tiles run in waves of ``units`` (NVIDIA, *Matrix Multiplication Background User's Guide*,
"Dimension Quantization Effects": an A100 has 108 SMs and cuBLAS's large tiles are 256 x 128). A block that
does not fill its tile (tile quantization) and a last wave that does not fill the SMs (wave quantization)
leave multipliers idle, so a matmul reaches ``wave_fraction(M, N, batch)`` of the rate its size gives
(:meth:`Efficiency.matmul_shape`): the useful fraction of the work the waves hold, the best of the tile
shapes (a library picks its tile by the shape). A table measured at a shape whose tiles fill whole waves
(the shapes a best-case sweep finds) is the rate of a full wave.

    >>> w = Efficiency(waves=(108, ((256, 128), (128, 256))))
    >>> (round(w.wave_fraction(6912, 16384), 3), round(w.wave_fraction(2048, 4608), 3),
    ...  round(w.wave_fraction(2048, 96, 32), 3))
    (1.0, 0.889, 0.593)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UsageError


#: an output this thin (a decode step's few tokens) runs as matrix-vector work, not in tensor-core tiles
#: (the smallest MMA shape is 16 rows): it streams its weights and leaves no tiles to quantize
GEMV_ROWS = 16


@dataclass(frozen=True)
class Efficiency:
    hbm: float = 1.0
    vector: float = 1.0
    matmul: tuple = ()        # ((dtype, ((flops, eta), ...)), ...), flops ascending
    collectives: tuple = ()   # ((link kind, collective or "", eta, latency, residual), ...)
    waves: tuple = ()         # (units, ((tile rows, tile columns), ...)): matmuls run in waves of tiles
    t_kernel: float = 0.0     # the per-kernel floor (launch and tail of one kernel; an XLA op), seconds

    @property
    def ideal(self) -> bool:
        return (self.hbm == 1.0 and self.vector == 1.0 and not self.matmul and not self.collectives
                and not self.waves and not self.t_kernel)

    def wave_fraction(self, m: float, n: float, batch: float = 1) -> float:
        """The useful fraction of the tiles' waves for an ``m x n`` output (``batch`` of them): 1 without
        ``[efficiency.waves]``."""
        if not self.waves or min(m, n) <= GEMV_ROWS:
            return 1.0
        units, tiles = self.waves
        best = 0.0
        for tm, tn in tiles:
            count = math.ceil(m / tm) * math.ceil(n / tn) * batch
            best = max(best, m * n * batch / (math.ceil(count / units) * units * tm * tn))
        return best

    def matmul_shape(self, m: float, n: float, k: float, batch: float = 1, dtype: str = "bf16") -> float:
        """The fraction of peak a matmul ``[batch, m, k] x [batch, k, n]`` reaches: its size's rate
        (:meth:`math`) times the fraction of its waves that does useful work."""
        return self.math(2 * m * n * k * batch, dtype) * self.wave_fraction(m, n, batch)

    def math(self, flops: float, dtype: str = "bf16") -> float:
        """The fraction of peak FLOP/s a matmul of ``flops`` reaches (log-linear between the table's points,
        flat beyond them; the bf16 table serves a dtype that has none)."""
        table = dict(self.matmul)
        pts = table.get(dtype) or table.get("bf16") or (next(iter(table.values())) if table else None)
        if not pts:
            return 1.0
        if flops <= pts[0][0]:
            return pts[0][1]
        for (f0, e0), (f1, e1) in zip(pts, pts[1:]):
            if flops <= f1:
                w = (math.log(flops) - math.log(f0)) / (math.log(f1) - math.log(f0))
                return e0 + w * (e1 - e0)
        return pts[-1][1]

    def net(self, link: str, collective: str = "") -> tuple[float, float]:
        """(bandwidth fraction, latency in seconds) for a collective over a link kind."""
        best = None
        for lk, name, eta, lat, _ in self.collectives:
            if lk == link and name == collective:
                return eta, lat
            if lk == link and name == "":
                best = (eta, lat)
        return best or (1.0, 0.0)

    def describe(self, cite=None) -> list[str]:
        """The achieved figures, a line each; ``cite(key)`` (of a preset's sources) marks where one is from."""
        cite = cite or (lambda key: "")
        if self.ideal:
            return ["efficiency: ideal (every figure at its datasheet peak)"]
        out = [f"efficiency: HBM {self.hbm:.2f}, vector {self.vector:.2f}   {cite('efficiency')}".rstrip()]
        if self.t_kernel:
            out.append(f"  per-kernel floor: {self.t_kernel * 1e6:.3g} us   {cite('efficiency.t_kernel')}".rstrip())
        for dtype, pts in self.matmul:
            out.append(f"  matmul {dtype}: " + ", ".join(f"{e:.2f} at {f:.2g} FLOPs" for f, e in pts))
        if self.waves:
            units, tiles = self.waves
            out.append(f"  matmul waves: {units} units, tiles " + ", ".join(f"{a}x{b}" for a, b in tiles))
        for lk, name, eta, lat, res in self.collectives:
            out.append(f"  {lk} {name or 'collectives'}: bandwidth x{eta:.2f}, latency {lat * 1e6:.3g} us"
                       + (f" (fit residual {res:.2g})" if res else ""))
        return out


def _fraction(v, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v <= 1.5:
        raise UsageError(f"{where} must be a fraction of the peak between 0 and 1.5, not {v!r}")
    return float(v)


def _seconds(v, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise UsageError(f"{where} must be a non-negative number of seconds, not {v!r}")
    return float(v)


def _residual(v, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise UsageError(f"{where} must be a non-negative fraction (the fit's largest relative error), not {v!r}")
    return float(v)


def parse_efficiency(data: dict, where: str) -> Efficiency:
    """An ``[efficiency]`` table, every bad field named (``where`` is the file)."""
    if not isinstance(data, dict):
        raise UsageError(f"{where}: field 'efficiency' must be a table")
    unknown = set(data) - {"hbm", "vector", "matmul", "collectives", "waves", "t_kernel"}
    if unknown:
        raise UsageError(f"{where}: unknown field 'efficiency.{sorted(unknown)[0]}' (known: hbm, vector, matmul, "
                         f"collectives, waves, t_kernel)")
    hbm = _fraction(data.get("hbm", 1.0), f"{where}: field 'efficiency.hbm'")
    vector = _fraction(data.get("vector", 1.0), f"{where}: field 'efficiency.vector'")
    matmul = []
    for dtype, t in (data.get("matmul") or {}).items():
        f = f"{where}: field 'efficiency.matmul.{dtype}'"
        flops, eta = (t or {}).get("flops"), (t or {}).get("eta")
        if not isinstance(flops, list) or not isinstance(eta, list) or len(flops) != len(eta) or not flops:
            raise UsageError(f"{f} needs lists 'flops' and 'eta' of the same, non-zero length")
        pts = sorted((float(x), _fraction(e, f + ".eta")) for x, e in zip(flops, eta))
        if any(x <= 0 for x, _ in pts):
            raise UsageError(f"{f}.flops must be positive")
        matmul.append((dtype, tuple(pts)))
    colls = []
    for link, t in (data.get("collectives") or {}).items():
        f = f"{where}: field 'efficiency.collectives.{link}'"
        if link not in ("ici", "nvlink", "dcn", "pcie"):
            raise UsageError(f"{f}: the link kind must be ici, nvlink, dcn or pcie")
        if not isinstance(t, dict):
            raise UsageError(f"{f} must be a table")
        colls.append((link, "", _fraction(t.get("eta", 1.0), f + ".eta"),
                      _seconds(t.get("latency", 0.0), f + ".latency"), 0.0))
        for name, sub in t.items():
            if isinstance(sub, dict):
                g = f"{f}.{name}"
                colls.append((link, name, _fraction(sub.get("eta", 1.0), g + ".eta"),
                              _seconds(sub.get("latency", 0.0), g + ".latency"),
                              _residual(sub.get("residual", 0.0), g + ".residual")))
    t_kernel = _seconds(data.get("t_kernel", 0.0), f"{where}: field 'efficiency.t_kernel'")
    return Efficiency(hbm, vector, tuple(matmul), tuple(colls), _waves(data.get("waves"), where), t_kernel)


def _waves(t, where: str) -> tuple:
    if t is None:
        return ()
    f = f"{where}: field 'efficiency.waves'"
    if not isinstance(t, dict):
        raise UsageError(f"{f} must be a table with 'units' and 'tiles'")
    units, tiles = t.get("units"), t.get("tiles")
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        raise UsageError(f"{f}.units must be a positive whole number (streaming multiprocessors), not {units!r}")
    if (not isinstance(tiles, list) or not tiles or
            any(not isinstance(x, list) or len(x) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                                                             for v in x) for x in tiles)):
        raise UsageError(f"{f}.tiles must be a list of [rows, columns] pairs of positive whole numbers, "
                         f"e.g. [[256, 128], [128, 256]]")
    return units, tuple((x[0], x[1]) for x in tiles)

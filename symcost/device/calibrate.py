"""``symcost calibrate``: the microbenchmarks a preset needs, run on the devices JAX sees.

    cal = calibrate(quick=True)        # about 30 s; the full sweep takes a few minutes on an accelerator
    cal.matmul["bf16"][-1].rate        # FLOP/s of the largest matmul
    cal.kernel.per_kernel              # the per-kernel floor, seconds
    cal.collectives[0].fit             # latency + bytes / bandwidth, with its residual

What is swept depends on the backend (a CPU gets smaller sizes than a GPU, so that the sweep ends in
seconds) and on ``quick``. The matmul sweep goes on doubling past its listed sizes until the peak is
reached -- :data:`PEAK_RUN` sizes in a row within :data:`PEAK_WITHIN` of each other and of the best (two
agreed by chance under load: a CPU's 256^3 and 512^3 both read 21 GFLOP/s once, its peak being 47) -- or the next
size's call would take longer than :data:`MAX_CALL` seconds at the rate the last one ran (eight times its
FLOPs; a peak taken at a size still climbing would price every large einsum too slow, a call of several
seconds on a CPU adds its length to the calibration five times over); its :data:`AGAIN` fastest sizes
are then timed again, the faster reading of each kept (other work on a shared machine only slows a run: a
size read low once no longer sets the peak). ``model`` adds matmuls at the shapes of a model's layers
(its weights, at ``tokens`` rows: decode and prefill). The
per-kernel floor is timed as chains of dependent matrix-vector kernels in one jit
(:class:`~symcost.device.bench.KernelFloor`). The result is a value; :mod:`symcost.device.preset` turns
it into a preset file.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import UsageError
from ..mesh import parse_mesh
from ..progress import advance
from ..topology import place
from . import bench, runtime
from .fit import LineFit, fit_line

KB, MB, GB = 1 << 10, 1 << 20, 1 << 30
PEAK_WITHIN = 0.03       # PEAK_RUN sizes in a row this close (and this close to the best): the peak is reached
PEAK_RUN = 3
MAX_CALL = 1.0           # seconds: the matmul sweep does not double into a call predicted to take longer
MAX_N = 32768            # and never goes past this n
AGAIN = 3                # the fastest sizes of the sweep timed a second time, the faster reading kept
KERNEL_CHAIN = 128       # kernels in each chain of the per-kernel floor


@dataclass(frozen=True)
class Sweep:
    """What a calibration measures: matmul sizes and dtypes, HBM and elementwise sizes, collective bytes,
    and the timed runs of each point."""

    matmul: tuple[int, ...]
    dtypes: tuple[str, ...]
    hbm: int
    elementwise: int
    depth: int
    collective: tuple[int, ...]
    runs: int


def sweep_for(backend: str, quick: bool, dtypes=None) -> Sweep:
    """The default sweep of a backend (``cpu``, ``gpu``, ``tpu``)."""
    if backend == "cpu":
        s = Sweep((64, 128, 256, 512, 1024), ("bf16", "fp32"), 128 * MB, 1 << 20, 32,
                  (4 * KB, 16 * KB, 64 * KB, 256 * KB, MB, 4 * MB), 10)
        if quick:
            s = Sweep((64, 256, 512), ("bf16", "fp32"), 32 * MB, 1 << 18, 32, (4 * KB, 64 * KB, 512 * KB, 2 * MB), 5)
    else:
        acc = ("bf16", "fp16", "fp8", "int8") if backend == "gpu" else ("bf16", "int8", "fp8")
        s = Sweep((256, 512, 1024, 2048, 4096, 8192, 16384), acc, 2 * GB, 1 << 26, 256,
                  tuple(4 * KB * 4 ** i for i in range(10)), 20)
        if quick:
            s = Sweep((512, 2048, 8192), ("bf16",), 512 * MB, 1 << 24, 256, (4 * KB, 64 * KB, MB, 16 * MB, 128 * MB), 5)
    if dtypes:
        from .. import dtypes as dt
        s = Sweep(s.matmul, tuple(dt.canonical(d) for d in dtypes), s.hbm, s.elementwise, s.depth, s.collective,
                  s.runs)
    return s


@dataclass(frozen=True)
class CollectiveFit:
    """One collective over one mesh axis: its samples (work = V bytes), the fitted line, and symcost's
    throughput term per byte of V at the figures it was compared with (``model_per_byte``)."""

    kind: str
    axis: str
    devices: int
    link: str
    samples: tuple
    fit: LineFit
    model_per_byte: float
    hops: float = 1.0         # the model's latency floor over T_min

    @property
    def eta(self) -> float:
        """The model's throughput time over the measured one: the fraction of the model's bandwidth reached."""
        return self.model_per_byte * self.fit.bandwidth

    def as_dict(self) -> dict:
        return {"kind": self.kind, "axis": self.axis, "devices": self.devices, "link": self.link,
                "points": [s.as_dict("bytes") for s in self.samples], "latency": self.fit.latency,
                "bandwidth": self.fit.bandwidth, "residual": self.fit.residual, "rms": self.fit.rms,
                "eta": self.eta}


@dataclass
class Calibration:
    """Everything one calibration measured, on what, and when."""

    device: runtime.DeviceInfo
    when: str
    quick: bool
    sweep: Sweep
    mesh: str
    base: object = None                 # the Hardware whose figures the measurements are compared with
    matmul: dict = field(default_factory=dict)      # dtype -> [Sample] by size
    copy: object = None
    read: object = None
    elementwise: object = None
    kernel: object = None               # bench.KernelFloor
    shapes: list = field(default_factory=list)      # (weight, m, k, n, Sample): a model's layer matmuls
    peak_reached: dict = field(default_factory=dict)  # dtype -> whether PEAK_RUN sizes in a row agreed
    collectives: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)     # what could not be measured, and why

    def as_dict(self) -> dict:
        d = self.device
        return {
            "device": {"platform": d.platform, "kind": d.kind, "count": d.count, "memory": d.memory,
                       "jax": d.jax_version},
            "when": self.when, "quick": self.quick, "runs": self.sweep.runs, "mesh": self.mesh,
            "base": getattr(self.base, "name", None),
            "matmul": {dt: [s.as_dict("flops") for s in pts] for dt, pts in self.matmul.items()},
            "hbm": {"copy": self.copy.as_dict("bytes") if self.copy else None,
                    "read": self.read.as_dict("bytes") if self.read else None},
            "elementwise": self.elementwise.as_dict("flops") if self.elementwise else None,
            "kernel": self.kernel.as_dict() if self.kernel else None,
            "peak_reached": dict(self.peak_reached),
            "shapes": [{"weight": w, "m": m, "k": k, "n": n, **s.as_dict("flops")} for w, m, k, n, s in self.shapes],
            "collectives": [c.as_dict() for c in self.collectives],
            "skipped": dict(self.skipped),
        }


def calibration_mesh(text: str | None, count: int, base):
    """The mesh collectives are measured over: ``--mesh`` (its axes must fit the devices), or every
    device on one axis X; link kinds as the base preset settles them."""
    mesh = parse_mesh(text or f"X={count}")
    if not mesh.bound:
        raise UsageError("give the calibration mesh's axes sizes (--mesh X=2,Y=4)")
    n = 1
    for a in mesh.axes:
        n *= a.size
    if n > count:
        raise UsageError(f"--mesh {mesh} needs {n} devices; JAX sees {count}")
    return place(mesh, base).mesh if base is not None else mesh


def matmul_to_peak(sizes, dtype: str, runs: int, key, step=lambda n: None) -> tuple[list, bool]:
    """n x n x n matmuls at ``sizes``, then doubling n until the peak is reached (see the module
    docstring): the samples, and whether the peak was reached."""
    pts, n = [], None
    todo = list(sizes)
    while todo:
        n = todo.pop(0)
        step(n)
        pts.append(bench.matmul(n, dtype, runs, key))
        if not todo and not _at_peak(pts) and 8 * pts[-1].timing.median <= MAX_CALL and 2 * n <= MAX_N:
            todo.append(2 * n)
    reached = _at_peak(pts)
    # a second look at the fastest sizes: other work on the machine only ever slows a run, so a size that
    # read low once (the sweep may have stopped on it, its neighbour agreeing) keeps the faster reading
    for i in sorted(range(len(pts)), key=lambda i: -pts[i].rate)[:AGAIN]:
        step(pts[i].size)
        again = bench.matmul(pts[i].size, dtype, runs, key)
        if again.rate > pts[i].rate:
            pts[i] = again
    return pts, reached


def _at_peak(pts) -> bool:
    if len(pts) < PEAK_RUN:
        return False
    rates = [p.rate for p in pts[-PEAK_RUN:]]
    best = max(p.rate for p in pts)
    return max(rates) - min(rates) <= PEAK_WITHIN * max(rates) and rates[-1] >= (1 - PEAK_WITHIN) * best


def kernel_widths(backend: str, quick: bool) -> tuple[int, ...]:
    """The k of the k x k weights the per-kernel floor streams: from about the floor's own time to well
    past it, every chain larger than a GPU's L2 cache (50 MB on an H100) where the device is a GPU."""
    if backend == "cpu":
        return (64, 128, 256) if quick else (64, 128, 256, 512)
    return (1024, 2048, 4096) if quick else (512, 1024, 2048, 4096)


def layer_shapes(model: str, tokens=(1, 2048)) -> list[tuple[str, int, int, int]]:
    """(weight, m, k, n) of each distinct weight matmul of a model's layer and its unembedding, at each
    row count of ``tokens`` (a decode step's batch, a prefill's tokens)."""
    from ..models.config import load_model_config
    c = load_model_config(model)
    weights = {"Wq": (c.D, c.N * c.H), "Wk": (c.D, c.K * c.H), "Wo": (c.N * c.H, c.D), "W1": (c.D, c.F),
               "W3": (c.F, c.D), "Wu": (c.D, c.V)}
    return [(w, m, k, n) for m in tokens for w, (k, n) in weights.items()]


def calibrate(*, quick: bool = False, mesh: str | None = None, base=None, dtypes=None, runs: int | None = None,
              progress: bool = True, sweep: Sweep | None = None, model: str | None = None,
              tokens=(1, 2048)) -> Calibration:
    """Run the microbenchmarks (see the module docstring). ``base``: the Hardware the measurements are
    compared with (None: the device's own best figures serve as its peaks); ``model``: a model whose layer
    shapes are measured too, at ``tokens`` rows."""
    runtime.jax()                      # the jax extra, or a clear error
    info = runtime.device_info()
    sw = sweep or sweep_for(info.platform, quick, dtypes)
    if runs:
        sw = Sweep(sw.matmul, sw.dtypes, sw.hbm, sw.elementwise, sw.depth, sw.collective, runs)
    smesh = calibration_mesh(mesh, info.count, base) if info.count > 1 or mesh else None
    cal = Calibration(info, runtime.now(), quick, sw, str(smesh) if smesh else "", base)
    key = runtime.key(0)
    axes = [a for a in smesh.axes if a.size > 1] if smesh else []
    total = (len(sw.dtypes) * len(sw.matmul) + 3 + len(axes) * len(bench.COLLECTIVES) * len(sw.collective)
             + (len(layer_shapes(model, tokens)) if model else 0))

    def step(label: str) -> None:      # a bar on the terminal (the progress room), when it is showing
        if progress:
            advance(1, "calibrating", total=total, unit=" benchmarks", label=label)
    for dt in sw.dtypes:
        try:
            pts, cal.peak_reached[dt] = matmul_to_peak(sw.matmul, dt, sw.runs, key,
                                                       lambda n, dt=dt: step(f"matmul {dt} {n}"))
            cal.matmul[dt] = pts
        except Exception as e:     # a dtype the backend cannot multiply: said, not fatal
            cal.skipped[f"matmul {dt}"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    if model is not None:
        for w, m, k, n in layer_shapes(model, tokens):
            step(f"matmul {w} {m}x{k}x{n}")
            cal.shapes.append((w, m, k, n, bench.gemm(m, k, n, "bf16", sw.runs, key)))
    step("kernel floor")
    cal.kernel = bench.kernel_floor(kernel_widths(info.platform, quick), KERNEL_CHAIN, sw.runs, key)
    step("HBM")
    cal.copy, cal.read = bench.hbm(sw.hbm, sw.runs, key)
    step("elementwise")
    cal.elementwise = bench.elementwise(sw.elementwise, sw.depth, "bf16", sw.runs, key)
    if axes:
        from .programs import jax_mesh
        jmesh = jax_mesh(smesh)
        for a in axes:
            for kind in bench.COLLECTIVES:
                samples, model = [], []
                for target in sw.collective:
                    step(f"{kind} {a.name} {target}")
                    s, t_model, hops = bench.collective(kind, smesh, jmesh, a.name, target, sw.runs, base, key)
                    samples.append(s)
                    model.append(t_model / s.work)
                fit = fit_line([s.work for s in samples], [s.timing.median for s in samples])
                cal.collectives.append(CollectiveFit(kind, a.name, a.size, a.kind, tuple(samples), fit,
                                                     sum(model) / len(model), max(1.0, hops)))
    elif info.count == 1:
        cal.skipped["collectives"] = "one device: nothing to communicate with"
    return cal

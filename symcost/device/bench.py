"""Microbenchmarks on the devices JAX sees: matmul FLOP/s by size and dtype, HBM copy and read bandwidth,
elementwise FLOP/s, and each collective's time by size over a mesh axis.

Every benchmark compiles first (never timed) and times with :func:`~symcost.device.timing.time_call`.
A collective is one of symcost's own moves (``AllGather_X(A[I_X]) -> A[I]`` ...), lowered through its
rule's ``lower_jax`` as ``export-jax`` lowers it, and its bytes are the V its time formula uses, so the
fitted bandwidth compares directly with the prediction.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..collectives import Move
from ..env import Env
from ..errors import UsageError
from ..layout import Layout
from . import programs, runtime
from .timing import Timing, time_call

#: the collectives calibrated, with the symcost move each is measured as
COLLECTIVES = ("AllGather", "ReduceScatter", "AllReduce", "AllToAll", "Permute")


@dataclass(frozen=True)
class Sample:
    """One measured point: its size (``n`` of an n x n x n matmul, or bytes), the work it does (FLOPs or
    bytes), and its timing."""

    size: int
    work: float
    timing: Timing

    @property
    def rate(self) -> float:
        return self.work / self.timing.median

    def as_dict(self, unit: str) -> dict:
        return {"size": self.size, unit: self.work, "seconds": self.timing.median, "runs": self.timing.runs,
                "spread": self.timing.spread, "rate": self.rate}


def _time(fn, args, runs, donate=False) -> Timing:
    if not donate:
        return time_call(lambda: fn(*args), block=runtime.block, runs=runs)
    state = list(args)

    def call():
        state[0] = fn(*state)
        return state[0]
    return time_call(call, block=runtime.block, runs=runs)


def _every_device():
    """A sharding that puts one slice of a leading axis on each device JAX sees."""
    jx = runtime.jax()
    from jax.sharding import NamedSharding, PartitionSpec as P
    n = len(jx.devices())
    return n, NamedSharding(runtime.make_mesh([n], ("d",)), P("d"))


def matmul(n: int, dtype: str, runs: int, key) -> Sample:
    """An ``n x n @ n x n`` matmul in ``dtype`` (accumulating in fp32, or int32 for integers, and written in
    ``dtype``: the einsum a plan runs, as ``export-jax`` lowers it) on every device at once, each on its own
    operands: the rate of one device while all of them work, as in a plan (host devices share the
    machine's cores; chips do not)."""
    jx = runtime.jax()
    import jax.numpy as jnp
    dt = runtime.jnp_dtype(dtype)
    acc = jnp.int32 if jnp.issubdtype(dt, jnp.integer) else jnp.float32   # as a plan's einsums run (export-jax)
    d, sh = _every_device()
    k1, k2 = jx.random.split(key)
    a = runtime.random_array(k1, (d, n, n), dtype, sh)
    b = runtime.random_array(k2, (d, n, n), dtype, sh)
    f = jx.jit(lambda x, y: jnp.matmul(x, y, preferred_element_type=acc).astype(dt),
               out_shardings=sh).lower(a, b).compile()
    return Sample(n, 2.0 * n ** 3, _time(f, (a, b), runs))


def hbm(nbytes: int, runs: int, key) -> tuple[Sample, Sample]:
    """(copy, read) per device, every device at once: ``x * a + b`` written over its own (donated) buffer
    moves 2 x nbytes; a sum reads nbytes. fp32 elements."""
    jx = runtime.jax()
    import jax.numpy as jnp
    n = max(1024, nbytes // 4)
    d, sh = _every_device()
    x = runtime.random_array(key, (d, n), "fp32", sh)
    read = jx.jit(lambda v: jnp.sum(v, axis=1), out_shardings=sh).lower(x).compile()
    r = Sample(n * 4, n * 4.0, _time(read, (x,), runs))
    copy = jx.jit(lambda v: v * 0.999 + 0.001, donate_argnums=0, out_shardings=sh).lower(x).compile()
    c = Sample(n * 4, n * 8.0, _time(copy, (x,), runs, donate=True))
    return c, r


def elementwise(n: int, depth: int, dtype: str, runs: int, key) -> Sample:
    """``depth`` dependent multiply-adds on each of ``n`` elements per device in one fused kernel: 2 x depth
    FLOPs an element for one read and one write, so the vector units, not memory, bound it."""
    jx = runtime.jax()
    coeffs = [(1.0 - 1.0 / (i + 3), 1.0 / (i + 7)) for i in range(depth)]

    def fma(v):
        for a, b in coeffs:
            v = v * a + b
        return v
    d, sh = _every_device()
    x = runtime.random_array(key, (d, n), dtype, sh)
    f = jx.jit(fma, donate_argnums=0, out_shardings=sh).lower(x).compile()
    return Sample(n, 2.0 * depth * n, _time(f, (x,), runs, donate=True))


def gemm(m: int, k: int, n: int, dtype: str, runs: int, key, copies: int = 0) -> Sample:
    """An ``[m, k] @ [k, n]`` matmul in ``dtype`` (a model layer's shape: ``m`` tokens through a ``k x n``
    weight) on one device, timed as ``copies`` products with distinct weights in one jitted call (default:
    enough to stream about 256 MB, 1 to 16) so that a short product is not timed as the host's dispatch of
    a call; ``size`` is ``m``, the time one product's."""
    jx = runtime.jax()
    import jax.numpy as jnp
    dt = runtime.jnp_dtype(dtype)
    r = copies or max(1, min(16, int(256e6 // (2.0 * k * n))))
    k1, k2 = jx.random.split(key)
    a = runtime.random_array(k1, (m, k), dtype, None)
    bs = [runtime.random_array(kk, (k, n), dtype, None) for kk in jx.random.split(k2, r)]
    f = jx.jit(lambda x, ws: [jnp.matmul(x, w, preferred_element_type=jnp.float32).astype(dt) for w in ws]
               ).lower(a, bs).compile()
    t = _time(f, (a, bs), runs)
    one = Timing(t.median / r, t.runs, t.spread, t.inner, tuple(x / r for x in t.samples))
    return Sample(m, 2.0 * m * k * n, one)


@dataclass(frozen=True)
class KernelFloor:
    """The per-kernel floor, measured as a decode step meets it: chains of dependent matrix-vector
    products in one jitted function, each product its own kernel streaming its own weight, at several
    weight sizes. A line ``seconds per kernel = t_kernel + bytes / bandwidth`` through them separates what
    every kernel pays whatever it moves (its launch, ramp and tail: the intercept) from the rate a
    weight-streaming kernel reaches (the slope)."""

    samples: tuple          # Sample per weight size: size = k (a k x k weight), work = bytes per kernel
    chain: int              # kernels in each chain
    fit: object             # LineFit over (bytes, seconds per kernel)

    @property
    def per_kernel(self) -> float:
        return max(0.0, self.fit.latency)

    @property
    def bandwidth(self) -> float:
        return self.fit.bandwidth

    def describe(self) -> str:
        pts = ", ".join(f"{s.work / 1e6:.3g} MB {s.timing.median / self.chain * 1e6:.3g} us" for s in self.samples)
        return (f"chains of {self.chain} dependent matrix-vector products in one jit, each its own kernel "
                f"streaming its own bf16 weight ({pts} a kernel, median of {self.samples[0].timing.runs} runs); "
                f"a line through them: {self.per_kernel * 1e6:.3g} us a kernel plus bytes at "
                f"{self.bandwidth / 1e12:.3g} TB/s (largest relative residual {self.fit.residual:.1%})")

    def as_dict(self) -> dict:
        return {"chain": self.chain, "points": [s.as_dict("bytes") for s in self.samples],
                "per_kernel": self.per_kernel, "bandwidth": self.bandwidth, "residual": self.fit.residual}


def kernel_floor(widths, chain: int, runs: int, key) -> KernelFloor:
    """Time a chain of ``chain`` dependent ``k x k`` matrix-vector products (bf16 weights, a distinct one
    each) for each ``k`` of ``widths``, and fit the line of :class:`KernelFloor`."""
    from .fit import fit_line
    jx = runtime.jax()
    import jax.numpy as jnp
    out = []
    for k in widths:
        key, sub = jx.random.split(key)
        ws = runtime.random_arrays(sub, (k, k), "bf16", chain)
        v = jnp.ones((k,), jnp.bfloat16)

        def f(x, weights):
            for w in weights:
                x = jnp.matmul(w, x) * 0.01     # each product waits on the last
            return x
        g = jx.jit(f).lower(v, ws).compile()
        t = _time(g, (v, ws), runs)
        out.append(Sample(k, 2.0 * k * k, t))
        del ws
    fit = fit_line([s.work for s in out], [s.timing.median / chain for s in out])
    return KernelFloor(tuple(out), chain, fit)


# ------------------------------------------------------------------------------------------ collectives


def collective_move(kind: str, axis: str) -> Move:
    """The move a collective is measured as, over one mesh axis, on fp32 arrays."""
    a = (axis,)
    if kind == "AllGather":
        return Move(kind, a, Layout.of("A", "I", [a], dtype="fp32"), Layout.of("A", "I", dtype="fp32"))
    if kind == "ReduceScatter":
        return Move(kind, a, Layout.of("A", "I", unreduced=a, dtype="fp32"), Layout.of("A", "I", [a], dtype="fp32"))
    if kind == "AllReduce":
        return Move(kind, a, Layout.of("A", "I", unreduced=a, dtype="fp32"), Layout.of("A", "I", dtype="fp32"))
    if kind == "AllToAll":
        return Move(kind, a, Layout.of("A", "IJ", [a, ()], dtype="fp32"), Layout.of("A", "IJ", [(), a], dtype="fp32"))
    if kind == "Permute":   # a neighbour shift: XLA's collective-permute (symcost's Send, one hop)
        lay = Layout.of("A", "I", [a], dtype="fp32")
        return Move("Send", a, lay, lay, 1)
    raise UsageError(f"unknown collective {kind!r}; calibrated: {', '.join(COLLECTIVES)}")


def sizes_for(move: Move, mesh, target: float) -> dict:
    """Dimension sizes that give ``move`` about ``target`` bytes of V (every dimension divisible)."""
    n = mesh.axis(move.axes[0]).size
    base = {"I": n, "J": n}
    per = move.rule.volume(move, Env.numeric(mesh, base)) / n     # V per element of I
    i = max(n, int(round(target / per / n)) * n)
    return {"I": i, "J": n}


def collective(kind: str, mesh, jmesh, axis: str, target: float, runs: int, hw, key) -> tuple[Sample, float, float]:
    """Time ``kind`` over ``axis`` at about ``target`` bytes: the measured sample (work = V), symcost's
    throughput term for it at ``hw``'s figures (seconds) and the hops of its latency floor."""
    move = collective_move(kind, axis)
    dims = sizes_for(move, mesh, target)
    env = Env.numeric(mesh, dims, hw.bindings("bf16") if hw is not None else None)
    v = float(move.rule.volume(move, env))
    floor, throughput = move.rule.link_time(move, env)
    names = programs.Names()
    r = programs.build(jmesh, mesh, (move.before,), (move.after,), programs.move_lines(move, mesh, names), names, dims,
                       key, str(move))
    return Sample(int(v), v, _time(r.fn, r.args, runs)), float(throughput), float(floor) / env.T_min

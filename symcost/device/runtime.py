"""The devices JAX sees: importing JAX with a clear error, describing the devices, naming dtypes, making
random arrays directly in their shardings, and a mesh of the devices.

JAX is an optional extra (``pip install 'symcost[jax]'``); nothing here imports it before it is needed.
On a machine without an accelerator, ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (set before
JAX is first imported) gives JAX eight CPU devices, which is how the commands run in CI.
"""
from __future__ import annotations

import datetime
import os
import platform
from dataclasses import dataclass

from .. import caching
from ..errors import UsageError
from ..export.lowering import JNP_DTYPES

PIP = "pip install 'symcost[jax]'"
FORCE = "XLA_FLAGS=--xla_force_host_platform_device_count=8"


def jax():
    """The ``jax`` module, or a UsageError saying how to install it."""
    try:
        import jax as jx
    except ImportError:
        raise UsageError(f"this command runs on the devices through JAX: {PIP}") from None
    return jx


@dataclass(frozen=True)
class DeviceInfo:
    """What the measurements ran on."""

    platform: str        # cpu | gpu | tpu
    kind: str            # e.g. 'NVIDIA H100 80GB HBM3', 'TPU v5 lite', or the host CPU's model
    count: int
    memory: float | None  # bytes per device, where JAX reports it
    jax_version: str

    def describe(self) -> str:
        many = f"{self.count} x " if self.count > 1 else ""
        return f"{many}{self.kind} ({self.platform}, jax {self.jax_version})"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def host_memory() -> float | None:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def device_info() -> DeviceInfo:
    jx = jax()
    devs = jx.devices()
    d = devs[0]
    memory = None
    try:
        stats = d.memory_stats() or {}
        memory = float(stats.get("bytes_limit")) if stats.get("bytes_limit") else None
    except Exception:   # backends without memory statistics
        memory = None
    kind = d.device_kind
    if d.platform == "cpu":
        kind = f"{_cpu_model()}, {os.cpu_count()} cores"
        host = host_memory()
        memory = host / len(devs) if host else None
    return DeviceInfo(d.platform, kind, len(devs), memory, jx.__version__)


def key(seed: int):
    """A ``jax.random`` key (a typed key where JAX has them, the legacy uint32 pair otherwise)."""
    jx = jax()
    make = getattr(jx.random, "key", None) or jx.random.PRNGKey
    return make(seed)


class out_of_memory:
    """Turns the device running out of memory (compiling or running) into a UsageError saying what to do."""

    def __init__(self, advice: str):
        self.advice = advice

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        text = str(err) if err is not None else ""
        if err is not None and not isinstance(err, UsageError) and (
                "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()):
            raise UsageError(f"the device ran out of memory: {self.advice} ({text.splitlines()[0][:200]})") from None
        return False


def now() -> str:
    """The time of a measurement, as written into presets (UTC, to the second)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def jnp_dtype(name: str):
    """The jnp dtype of a symcost dtype name."""
    import jax.numpy as jnp
    from .. import dtypes
    return getattr(jnp, JNP_DTYPES[dtypes.canonical(name)])


def block(x):
    return jax().block_until_ready(x)


def make_mesh(shape, names):
    """A ``jax.sharding.Mesh`` of the first prod(shape) devices."""
    import numpy as np
    jx = jax()
    n = 1
    for s in shape:
        n *= s
    have = len(jx.devices())
    if n > have:
        backend = jx.default_backend()
        how = (f"on a CPU, run with {FORCE.replace('8', str(n))}" if backend == "cpu" else
               f"measure runs on this machine's {have} {backend.upper()} device{'s' if have > 1 else ''}: give a mesh "
               f"of at most {have} devices (the prediction of a larger mesh is 'symcost derive')")
        raise UsageError(f"the mesh needs {n} devices; JAX sees {have} ({how})")
    return jx.sharding.Mesh(np.array(jx.devices()[:n]).reshape(tuple(shape)), tuple(names))


@caching.memoize(maxsize=256)
def _maker(shape: tuple, dtype: str, sharding):
    jx = jax()
    import jax.numpy as jnp
    dt = jnp_dtype(dtype)

    def index():
        """Each element's flat index (mod 2**32), built from per-dimension iotas: each device makes only its
        own block (a flat iota reshaped would be made whole first)."""
        if not shape:
            return jnp.uint32(0)
        x = jx.lax.broadcasted_iota(jnp.uint32, shape, 0)
        for d in range(1, len(shape)):
            x = x * jnp.uint32(shape[d]) + jx.lax.broadcasted_iota(jnp.uint32, shape, d)
        return x

    def make(seed):
        """A hash of each element's index and the seed (cheap to compile, unlike jax.random's threefry):
        uniform in [-1, 1) for floating dtypes, in [-8, 8) for integer ones."""
        x = index() ^ seed
        x = (x ^ (x >> 16)) * jnp.uint32(0x7FEB352D)
        x = (x ^ (x >> 15)) * jnp.uint32(0x846CA68B)
        x = x ^ (x >> 16)
        if jnp.issubdtype(dt, jnp.integer):
            return ((x >> 28).astype(jnp.int32) - 8).astype(dt)
        return ((x >> 8).astype(jnp.float32) * (2.0 / (1 << 24)) - 1.0).astype(dt)
    return jx.jit(make, out_shardings=sharding) if sharding is not None else jx.jit(make)


def random_maker(shape, dtype: str, sharding=None):
    """``key -> random array``, made on the devices in its sharding (never whole on the host). ``key`` is
    a ``jax.random`` key; what it makes does not depend on how often the maker is asked."""
    jx = jax()
    import jax.numpy as jnp
    f = _maker(tuple(int(s) for s in shape), dtype, sharding)

    def make(key):
        seed = jx.random.key_data(key).ravel()[-1] if hasattr(jx.random, "key_data") else key[-1]
        return f(jnp.uint32(seed))
    return make


def random_array(key, shape, dtype: str, sharding=None):
    """One random array (see :func:`random_maker`)."""
    return random_maker(shape, dtype, sharding)(key)


def random_arrays(key, shape, dtype: str, count: int, sharding=None) -> list:
    """``count`` distinct random arrays of one shape, as :func:`random_maker` makes them, the key read once:
    each array's seed is the key's plus a multiple of an odd constant (reading a key on the host for each of
    a kernel chain's 128 weights took a fifth of a CPU calibration)."""
    import numpy as np
    jx = jax()
    f = _maker(tuple(int(s) for s in shape), dtype, sharding)
    data = jx.random.key_data(key) if hasattr(jx.random, "key_data") else key
    base = int(np.asarray(data).ravel()[-1])
    return [f(np.uint32((base + i * 0x9E3779B9) & 0xFFFFFFFF)) for i in range(count)]


def spec(layout):
    """The ``PartitionSpec`` of a layout (unreduced axes are not a sharding: they are left out)."""
    from jax.sharding import PartitionSpec as P
    return P(*[(ax if len(ax) > 1 else ax[0]) if ax else None for ax in layout.axes])


def shard_map():
    """``jax.shard_map`` (``jax.experimental.shard_map`` on older JAX)."""
    jx = jax()
    try:
        return jx.shard_map
    except AttributeError:   # older JAX
        from jax.experimental.shard_map import shard_map as sm
        return sm


def sharded(fn, mesh, in_specs, out_specs):
    """``shard_map`` without the replication check (partial sums are returned as they are)."""
    sm = shard_map()
    try:
        return sm(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    except TypeError:
        return sm(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)

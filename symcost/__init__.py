"""symcost: symbolic cost derivation for sharded tensor programs.

    >>> import symcost
    >>> plan = symcost.derive("A[I, J_X] * B[J, K] -> C[I, K]", mesh={"X": 4}, dims="I=256,J=8192,K=64")
    >>> [s.kind for s in plan.collectives]                  # the book's Case 2 with a small K
    ['AllReduce']

The notation is the book *How to Scale Your Model*'s (Part 3). See README.md and docs/commands.md for the command line.
"""
from .api import check, clear_caches, derive, parse_dims, search
from .errors import NotationError, ShardingError, SymcostError, UsageError
from .hardware import Hardware, hardware, presets as hardware_presets
from .layout import Layout, bytes_per_device, bytes_total, local_shape
from .mesh import Axis, Mesh, parse_mesh
from .notation import parse
from .plan import Plan
from .trace import Step

__version__ = "0.2.0"


def __getattr__(name: str):
    """``symcost.from_jax`` is loaded on first use: importing symcost never imports JAX."""
    if name == "from_jax":
        from .jaxin import from_jax
        return from_jax
    raise AttributeError(f"module 'symcost' has no attribute {name!r}")

__all__ = ["derive", "check", "search", "clear_caches", "parse", "parse_mesh", "parse_dims", "hardware",
           "hardware_presets",
           "Hardware", "Plan", "Step", "Layout", "Mesh", "Axis", "local_shape", "bytes_per_device", "bytes_total",
           "SymcostError", "NotationError", "ShardingError", "UsageError", "from_jax", "__version__"]

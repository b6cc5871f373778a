"""symcost: symbolic cost derivation for sharded tensor programs.

    >>> import symcost
    >>> plan = symcost.derive("A[I, J_X] * B[J, K] -> C[I, K]", mesh={"X": 4})
    >>> [s.kind for s in plan.collectives]
    ['AllToAll', 'AllGather']

The notation is the book *How to Scale Your Model*'s (Part 3). See the README for the command line.
"""
from .api import check, clear_caches, derive, parse_dims
from .errors import NotationError, ShardingError, SymcostError, UsageError
from .layout import Layout, bytes_per_device, bytes_total, local_shape
from .mesh import Axis, Mesh, parse_mesh
from .notation import parse
from .plan import Plan, Step


from .hardware import Hardware, presets as hardware_presets  # noqa: E402  (loads the subpackage first)
from .hardware import hardware as _hardware  # noqa: E402


def hardware(name: str) -> Hardware:
    """A hardware preset by name: ``symcost.hardware("tpu-v5p").C``."""
    return _hardware(name)


__version__ = "0.1.0"
__all__ = ["derive", "check", "clear_caches", "parse", "parse_mesh", "parse_dims", "hardware", "hardware_presets", "Hardware", "Plan", "Step", "Layout",
           "Mesh", "Axis", "local_shape", "bytes_per_device", "bytes_total", "SymcostError",
           "NotationError", "ShardingError", "UsageError"]

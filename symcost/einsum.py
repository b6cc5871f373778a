"""The local einsum: what every device computes on its own blocks, and its FLOPs and bytes (book Part 3).

    >>> from symcost.env import Env
    >>> from symcost.layout import Layout
    >>> from symcost.mesh import parse_mesh
    >>> a, b = Layout.of("A", "IJ", [("X",), ()]), Layout.of("B", "JK")
    >>> e = LocalEinsum((a, b), Layout.of("C", "IK", [("X",), ()]), ("I", "J", "K"), (("X",), (), ()))
    >>> e.subscripts(), flops(e, Env.symbolic(parse_mesh("X")))
    ('ab,bc->ac', 2*I*J*K/X)
"""
from __future__ import annotations

from dataclasses import dataclass

from . import caching
from .layout import Layout
from .mesh import Mesh


@dataclass(frozen=True)
class LocalEinsum:
    """An einsum every device runs on its own blocks (the layouts are the local shardings)."""

    inputs: tuple[Layout, ...]
    output: Layout
    dims: tuple[str, ...]                     # every dimension of the einsum
    axes: tuple[tuple[str, ...], ...]         # sigma: the axes splitting each of ``dims``

    kind = "Einsum"
    __hash__ = caching.kept_hash            # einsums key the planner's tables: hashed again and again
    __getstate__ = caching.state_without_hash

    @property
    def tensor(self) -> str:
        return self.output.name

    @property
    def contracted(self) -> tuple[str, ...]:
        return tuple(d for d in self.dims if d not in self.output.dims)

    def mesh_axes(self, mesh: Mesh) -> tuple[str, ...]:
        """The mesh axes that split the work, in mesh order."""
        return tuple(a for a in mesh.names if any(a in ax for ax in self.axes))

    def subscripts(self) -> str:
        """A numpy subscript string, e.g. 'ab,bc->ac'."""
        letters = {d: chr(ord("a") + i) for i, d in enumerate(self.dims)}
        ins = ",".join("".join(letters[d] for d in t.dims) for t in self.inputs)
        return ins + "->" + "".join(letters[d] for d in self.output.dims)

    def signature(self, mesh: Mesh | None = None) -> str:
        return " * ".join(t.render(mesh) for t in self.inputs) + " -> " + self.output.render(mesh)

    def __str__(self) -> str:
        return self.signature()


def flops(e: LocalEinsum, env):
    """FLOPs per device: 2 x the product of every dimension over the axes that split it (book Part 3;
    replicated work is not divided; a padded block does the padded work). A one-operand einsum sums (1 FLOP an
    element) or only moves data."""
    size = env.prod(env.local(d, ax) for d, ax in zip(e.dims, e.axes))
    if len(e.inputs) >= 2:
        return 2 * size
    return size if e.contracted else env.zero


def gemm_shape(e: LocalEinsum, env) -> tuple:
    """``(m, n, k, batch)`` of the matmul a device runs for a two-operand einsum: ``batch`` the dimensions
    both operands and the result have, ``m`` the first operand's free dimensions, ``n`` the second's, ``k``
    the contracted ones (each a product of local sizes; 1 where there are none).

        >>> from symcost.env import Env
        >>> from symcost.layout import Layout
        >>> from symcost.mesh import parse_mesh
        >>> a, b = Layout.of("A", "BIJ", [(), ("X",), ()]), Layout.of("W", "BJK")
        >>> e = LocalEinsum((a, b), Layout.of("C", "BIK", [(), ("X",), ()]), ("B", "I", "J", "K"), ((), ("X",), (), ()))
        >>> gemm_shape(e, Env.numeric(parse_mesh("X=4"), {"B": 2, "I": 64, "J": 8, "K": 16}))
        (16.0, 16.0, 8.0, 2.0)
    """
    first, second = e.inputs[0].dims, e.inputs[1].dims if len(e.inputs) > 1 else ()
    out = e.output.dims

    def size(keep):
        if not any(map(keep, e.dims)):
            return env.one
        return env.prod(env.local(d, ax) for d, ax in zip(e.dims, e.axes) if keep(d))
    return (size(lambda d: d in first and d in out and d not in second),
            size(lambda d: d in second and d in out and d not in first),
            size(lambda d: d not in out), size(lambda d: d in first and d in second and d in out))


def hbm_bytes(e: LocalEinsum, env, on_chip=frozenset()):
    """Bytes one device reads and writes: its operand blocks and its result block (for T_hbm), except the
    tensors named in ``on_chip`` (intermediates a fused kernel keeps out of HBM)."""
    return env.total(env.local_bytes(t) for t in e.inputs + (e.output,) if t.name not in on_chip)

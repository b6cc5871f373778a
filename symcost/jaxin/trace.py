"""``symcost.from_jax``: a JAX function, traced with abstract arguments, as a symcost program.

    import jax, jax.numpy as jnp, symcost
    def mlp(x, w_in, w_out):
        return jax.nn.silu(x @ w_in) @ w_out
    S = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.bfloat16)
    t = symcost.from_jax(mlp, S(8, 4096), S(4096, 14336), S(14336, 4096), mesh="X=4",
                         in_specs={"x": "B_X,D", "w_in": "D,F", "w_out": "F,D"})
    print(t.text)       # param w_in[D, F], w_out[F, D]
                        # Dot1[B_X, F] = x[B_X, D] *_D w_in[D, F]
                        # SiLU1[B_X, F] = SiLU(Dot1[B_X, F])
                        # Out[B_X, D] = SiLU1[B_X, F] *_F w_out[F, D]

The program is read from ``jax.make_jaxpr`` (nothing runs), its dimensions named by the specs (and by
``names``: {name: size} for dimensions the specs do not reach), its sizes bound (:attr:`Traced.sizes`), and
it is a program like any other: :meth:`Traced.derive` plans it.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from ..errors import UsageError
from ..mesh import parse_mesh
from .dims import Dims
from .program import Tensor
from .reader import Reader
from .regions import relaid, spec_layout
from .specs import notation_dtype, parse_spec
from .write import Writer

#: a jax.checkpoint policy -> which forward values the backward pass may reuse (``derive --reuse``):
#: saving nothing recomputes the forward, gathers included; saving everything reuses them all
REUSE = {"nothing_saveable": "none", "everything_saveable": "all"}


@dataclass(frozen=True)
class Traced:
    """A traced function: its program (``text``), the sizes it binds, the mesh, and the ``reuse`` policy its
    ``jax.checkpoint`` asked for (None: no checkpoint)."""

    text: str
    sizes: tuple
    mesh: str
    reuse: str | None = None
    policies: tuple = ()

    @property
    def dims(self) -> dict:
        return dict(self.sizes)

    def dims_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.sizes)

    def derive(self, hw=None, **options):
        """Plan the program (options as :func:`symcost.derive`; ``reuse`` defaults to the checkpoint's)."""
        from ..program import derive_program
        if self.reuse is not None:
            options.setdefault("reuse", self.reuse)
        return derive_program(self.text, self.mesh, self.dims, hw, **options)

    def to_notation(self) -> str:
        """The program as a file: a comment with the command that plans it, then the statements."""
        head = "#   symcost derive FILE" + (f" --mesh {self.mesh}" if self.mesh else "") + f" --dims {self.dims_text()}"
        if self.reuse:
            head += f" --reuse {self.reuse}"
        return head + "\n" + self.text


def _mesh_sizes(mesh) -> tuple[str, dict]:
    m = parse_mesh(mesh) if isinstance(mesh, str) or mesh is None else None
    if isinstance(mesh, dict):
        m = parse_mesh(",".join(f"{k}={v}" for k, v in mesh.items()))
    elif m is None:
        m = mesh
    if any(a.size is None for a in m.axes):
        raise UsageError("tracing needs every mesh axis sized (--mesh X=4,Y=2)")
    text = ",".join(f"{a.name}={a.size}" for a in m.axes)
    return text, {a.name: a.size for a in m.axes}


def _specs(fn, nargs: int, in_specs) -> tuple[list[str], list]:
    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()][:nargs]
    except (TypeError, ValueError):
        names = []
    names += [f"a{k}" for k in range(len(names), nargs)]
    if in_specs is None:
        specs = [None] * nargs
    elif isinstance(in_specs, dict):
        unknown = set(in_specs) - set(names)
        if unknown:
            raise UsageError(f"specs name {', '.join(sorted(unknown))}, which the function does not take "
                             f"(it takes {', '.join(names)})")
        specs = [in_specs.get(n) for n in names]
    else:
        specs = list(in_specs) + [None] * (nargs - len(in_specs))
    return names, specs


def _spec_of(spec, rank: int, what: str):
    """((name or None, axes), ...) per axis from "B_X,T,D", a PartitionSpec or None."""
    if spec is None:
        return tuple((None, ()) for _ in range(rank))
    if isinstance(spec, str):
        dims = parse_spec(spec, f"the spec of {what}")
        if len(dims) != rank:
            raise UsageError(f"the spec of {what} names {len(dims)} dimensions; it has {rank}")
        return dims
    return tuple((None, axes) for axes in spec_layout(spec, rank))


def _abstract_mesh(sizes: dict):
    import jax
    from jax.sharding import AbstractMesh, AxisType
    names = tuple(sizes)
    return AbstractMesh(tuple(sizes.values()), names, axis_types=(AxisType.Auto,) * len(names)), jax


def from_jax(fn, *args, mesh=None, in_specs=None, out_specs=None, names=None, params=None,
             elementwise: bool = True) -> Traced:
    """Trace ``fn`` on abstract ``args`` (``jax.ShapeDtypeStruct`` or arrays) into a program.

    ``mesh``: ``"X=4,Y=2"``, a dict or a :class:`~symcost.mesh.Mesh`; ``in_specs``: per argument (a dict by
    argument name, or a sequence) its dimensions and layout, ``"B_X,T,D"`` (or a ``PartitionSpec``, leaving
    the names to inference); ``out_specs``: the same for the outputs; ``names``: {name: size} for dimensions
    the specs do not name; ``params``: the arguments that are parameters (default: those named ``w...``).
    ``elementwise``: False leaves elementwise work and reductions out (fused into the matmuls, as
    ``symcost model --program`` writes a layer): the program is the function's matmuls alone.
    """
    try:
        import jax
    except ImportError:
        raise UsageError("tracing needs JAX: pip install 'symcost[jax]'") from None
    mesh_text, sizes = _mesh_sizes(mesh)
    arg_names, specs = _specs(fn, len(args), in_specs)
    d = Dims()
    reader = Reader(sizes, d, fused=not elementwise)
    by_name: dict[str, int] = {}
    vals = []
    for name, a, spec in zip(arg_names, args, specs):
        if not (hasattr(a, "shape") and hasattr(a, "dtype")):
            raise UsageError(f"argument {name} is a {type(a).__name__}; from_jax takes arrays "
                             "(jax.ShapeDtypeStruct): pass a structure's leaves as arguments")
        shape = tuple(a.shape)
        dims = _spec_of(spec, len(shape), name)
        nodes = []
        for size, (dn, axes) in zip(shape, dims):
            for ax in axes:
                if ax not in sizes:
                    raise UsageError(f"the spec of {name} splits over {ax}, which the mesh ({mesh_text}) lacks")
            if dn in sizes:
                raise UsageError(f"the spec of {name} names a dimension {dn}, which is a mesh axis; rename one")
            node = d.new(size, dn)
            if dn in by_name:
                d.union(by_name[dn], node)
            elif dn:
                by_name[dn] = node
            nodes.append(node)
        layout = tuple(axes for _, axes in dims)
        is_param = name in params if params is not None else name.lower().startswith("w")
        t = Tensor(name, notation_dtype(a.dtype), tuple(nodes), layout, input=True, param=is_param, name=name)
        reader.read.inputs.append(t)
        vals.append(reader.new_val(shape, nodes, layout, t))
    abstract, jax = _abstract_mesh(sizes)
    structs = [jax.ShapeDtypeStruct(tuple(a.shape), a.dtype) for a in args]
    try:
        with jax.sharding.use_abstract_mesh(abstract):
            closed = jax.make_jaxpr(fn)(*structs)
    except Exception as e:  # noqa: BLE001 -- the user's function failed to trace: one sentence, not a traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise UsageError(f"tracing {getattr(fn, '__name__', 'the function')} raised {type(e).__name__}: "
                         f"{first}") from None
    outs = reader.run(closed.jaxpr, dict(zip(closed.jaxpr.invars, vals)), closed.consts)
    if out_specs is not None:
        specs_out = out_specs if isinstance(out_specs, (list, tuple)) and not hasattr(out_specs, "_partitions") \
            and not isinstance(out_specs, str) else [out_specs]
        outs = [relaid(reader, o, tuple(ax for _, ax in _spec_of(s, len(o.shape), "the output")))
                if s is not None else o for o, s in zip(outs, specs_out)]
    reader.read.outputs = outs
    text, bound = Writer(reader.read, d, sizes, names).write()
    policies = tuple(reader.read.policies)
    reuse = None
    if policies:
        kinds = {REUSE.get(p, "activations") for p, _ in policies}
        reuse = "none" if "none" in kinds else ("activations" if "activations" in kinds else "all")
    return Traced(text, tuple(bound.items()), mesh_text, reuse, policies)

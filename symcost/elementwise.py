"""Elementwise work: norms, activations and gating, softmax, residual adds, rotary embeddings, dropout,
cross-entropy -- each a rule, and the :class:`Elementwise` operation a device runs on its own blocks.

    >>> from symcost.env import Env
    >>> from symcost.layout import Layout
    >>> from symcost.mesh import parse_mesh
    >>> x = Layout.of("X", "BTD", [(), ("Y",), ()])
    >>> op = Elementwise("LayerNorm", (x,), x.renamed("Xn"), reduce="D")
    >>> env = Env.symbolic(parse_mesh("Y"))
    >>> vector_flops(op, env), hbm_bytes(op, env)
    (8*B*D*T/Y, 4*B*D*T/Y)

An elementwise operation reads its operands and writes its result (HBM bytes) and does a few FLOPs an
element on the vector unit (``C_vec``), so it is priced ``max(vector FLOPs / C_vec, bytes / W_hbm)``; on
today's chips that is almost always the HBM term. Each rule says what the backward pass reads (a norm its
input, softmax its output, dropout its one-byte mask, a residual add nothing), which is where a layer's
saved activations come from (Korthikanti et al. 2022, section 4.1, count them the same way).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .layout import Layout
from .mesh import Mesh
from .notation import format_axes


@dataclass(frozen=True)
class Rule:
    """One kind of elementwise operation."""

    name: str
    arity: int                 # operands
    flops: int                 # vector FLOPs per element, forward
    grad_flops: int            # vector FLOPs per element of each operand's gradient
    saves: str                 # what the backward pass reads: inputs | output | mask | none
    reduces: bool = False      # normalises over one dimension (the subscript: LayerNorm_D)
    drops: bool = False        # the reduced dimension leaves the result (cross-entropy: one loss a token)
    linear: bool = False       # partial sums may pass through it
    relabels: bool = False     # the result may rename dimensions (positionally): a view, rotary's keys
    broadcasts: bool = False   # the result gains the subscripted dimension: the first operand copied along it
                               # (a later operand steers where the copies go; it gets no gradient), as a
                               # gather: its own kernel, never fused into its producer's
    summary: str = ""
    #: the forward on one device's blocks in jax.numpy (``export-jax``): ``{0}``, ``{1}`` the operands'
    #: variables, ``{axis}`` the reduced (or added) dimension's position, ``{k}`` the result's size there,
    #: ``{shape}`` the result's block shape; empty where the notation does not say enough to write it
    jax: str = ""
    #: an operand's gradient from the result's (``{0}``) and what the rule saves (``{1}``: its output or
    #: mask), for a rule that does not save its inputs (one that does is differentiated by ``jax.vjp``)
    jax_grad: str = ""

    communicates = False       # the planner's and the printers' question to every step
    inserted = False

    @property
    def free(self) -> bool:
        """Costs nothing: a relabelling view."""
        return self.flops == 0 and self.saves == "none" and self.relabels and self.arity == 1 and not self.reduces


#: FLOPs per element are counted from each formula (an exp, tanh or reciprocal square root as one FLOP):
#: LayerNorm = mean, variance (3), normalise (2), scale and shift (2); GeLU's tanh form
#: 0.5 x (1 + tanh(0.79788 (x + 0.044715 x^3))) = 8 (+6 for its derivative); SiLU x sigmoid(x) = 4.
#: TopK (a router: softmax over the experts, then each token's k largest, their indices and weights
#: written) = softmax's 5 and one comparison an element in the selection pass; the result's last dimension
#: is the k selected, in descending order (``Gk[B, T, J] = TopK_Er(Lg[B, T, Er])``, k the size of J); its
#: backward is softmax's Jacobian restricted to the k chosen, so it keeps its input (the router's
#: probabilities, as Megatron-Core's router keeps them), not only the k weights. Dispatch (an MoE layer's
#: permutation, ``Xk[B, T, J, D] = Dispatch_J(Rn[B, T, D], Gk[B, T, J])``: each token copied to the slots of
#: its k experts, chosen by the router's ``Gk``, whose values do not enter the result) moves bytes and does
#: no arithmetic; its backward sums each token's k copies' gradients (the unpermutation's scatter-add).
RULES: dict[str, Rule] = {r.name: r for r in (
    Rule("LayerNorm", 1, 8, 14, "inputs", reduces=True, summary="normalise over a dimension (mean and variance)",
         jax="({0} - jnp.mean({0}, axis={axis}, keepdims=True))"
             " / jnp.sqrt(jnp.var({0}, axis={axis}, keepdims=True) + 1e-6)"),
    Rule("RMSNorm", 1, 4, 8, "inputs", reduces=True, summary="normalise by the root mean square over a dimension",
         jax="{0} / jnp.sqrt(jnp.mean({0} * {0}, axis={axis}, keepdims=True) + 1e-6)"),
    Rule("Softmax", 1, 5, 4, "output", reduces=True, summary="softmax over a dimension (attention scores)",
         jax="jax.nn.softmax({0}, axis={axis})",
         jax_grad="{1} * ({0} - jnp.sum({0} * {1}, axis={axis}, keepdims=True))"),
    Rule("GeLU", 1, 8, 14, "inputs", summary="GeLU activation (tanh form)", jax="jax.nn.gelu({0}, approximate=True)"),
    Rule("SiLU", 1, 4, 8, "inputs", summary="SiLU (swish) activation, the gate of SwiGLU", jax="jax.nn.silu({0})"),
    Rule("ReLU", 1, 1, 1, "output", summary="ReLU activation", jax="jax.nn.relu({0})",
         jax_grad="{0} * ({1} > 0)"),
    Rule("Pointwise", 1, 1, 1, "inputs",
         summary="a function of one operand, element by element (exp, tanh, rsqrt, a scaling by a constant)"),
    Rule("Mul", 2, 1, 1, "inputs", summary="elementwise product (the gate of a gated MLP)", jax="{0} * {1}"),
    Rule("Add", 2, 1, 0, "none", linear=True, summary="elementwise sum (a residual connection)", jax="{0} + {1}",
         jax_grad="{0}"),
    # rotary embedding's rotation needs each element's global position, and dropout's mask a seed per
    # element, neither of which the notation names: both are lowered as the identity (the simulator's choice)
    Rule("Rotary", 1, 3, 3, "none", linear=True, relabels=True, summary="rotary position embedding", jax="{0}",
         jax_grad="{0}"),
    Rule("Dropout", 1, 2, 1, "mask", linear=True, summary="dropout (writes a one-byte mask the backward pass reads)",
         jax="{0}", jax_grad="{0} * {1}"),
    Rule("View", 1, 0, 0, "none", linear=True, relabels=True, summary="a view: renames dimensions, moves nothing",
         jax="{0}.reshape({shape})", jax_grad="{0}.reshape({shape})"),
    Rule("TopK", 1, 6, 4, "inputs", reduces=True, relabels=True,
         summary="a router's softmax and top-k over the experts (each token's k expert weights)",
         jax="jnp.moveaxis(jax.lax.top_k(jnp.moveaxis(jax.nn.softmax({0}, axis={axis}), {axis}, -1), {k})[0],"
             " -1, {axis})"),
    Rule("Dispatch", 2, 0, 1, "none", reduces=True, broadcasts=True,
         summary="a copy of each token to each of its k experts' slots, steered by the router (an MoE permutation)",
         jax="jnp.broadcast_to(jnp.expand_dims({0}, {axis}), {shape})", jax_grad="jnp.sum({0}, axis={axis})"),
    Rule("CrossEntropy", 1, 6, 3, "inputs", reduces=True, drops=True,
         summary="softmax cross-entropy over the vocabulary (one loss a token)",
         jax="jax.nn.logsumexp({0}, axis={axis})"),
)}

MASK_DTYPE = "int8"   # one byte an element


def rule(name: str) -> Rule:
    from .errors import UsageError
    r = RULES.get(name)
    if r is None:
        raise UsageError(f"unknown elementwise operation {name!r}; known: {', '.join(RULES)}")
    return r


def mask_layout(out: Layout) -> Layout:
    """The one-byte mask dropout keeps for its backward pass, laid out like its result."""
    return replace(out, name=out.name + "_mask", dtype=MASK_DTYPE, unreduced=frozenset())


@dataclass(frozen=True)
class Elementwise:
    """An elementwise operation every device runs on its own blocks (``grad``: its backward, reading the
    result's gradient and what the forward pass saved, writing one operand's gradient)."""

    kind: str
    inputs: tuple[Layout, ...]
    output: Layout
    reduce: str | None = None
    grad: bool = False

    @property
    def rule(self) -> Rule:
        return RULES[self.kind]

    @property
    def tensor(self) -> str:
        return self.output.name

    @property
    def before(self) -> Layout:
        return self.inputs[0]

    @property
    def after(self) -> Layout:
        return self.output

    axes = ()                   # no communication

    def mesh_axes(self, mesh: Mesh) -> tuple[str, ...]:
        """The mesh axes that split the work, in mesh order."""
        return mesh.order(self.inputs[0].sharding_axes + self.output.sharding_axes)

    @property
    def label(self) -> str:
        return self.kind + ("'" if self.grad else "") + (f"_{self.reduce}" if self.reduce else "")

    def signature(self, mesh: Mesh | None = None) -> str:
        return f"{self.label}({', '.join(t.render(mesh) for t in self.inputs)}) -> {self.output.render(mesh)}"

    def __str__(self) -> str:
        return self.signature()

    def saved(self) -> tuple[Layout, ...]:
        """What its backward pass reads (the forward pass keeps these)."""
        how = self.rule.saves
        if how == "inputs":
            return self.inputs
        if how == "output":
            return (self.output,)
        if how == "mask":
            return (mask_layout(self.output),)
        return ()


def operand_layouts(target: Layout, operands, dropped: str | None = None) -> list[Layout]:
    """Each operand laid out the way the result is, dimension by position (a view renames dimensions; a
    cross-entropy's reduced dimension, ``dropped``, is whole); a dispatch's operands (``dropped`` None and
    dimensions the result names) dimension by name."""
    first = operands[0]
    if len(target.dims) > len(first.dims):
        return [Layout(t.name, t.dims, tuple(target.axes_of(d) for d in t.dims), target.unreduced, t.dtype)
                for t in operands]
    keep = [i for i, d in enumerate(first.dims) if d != dropped]
    axes: list[tuple[str, ...]] = [()] * len(first.dims)
    for j, i in enumerate(keep):
        axes[i] = target.axes[j]
    return [Layout(t.name, t.dims, tuple(axes), target.unreduced, t.dtype) for t in operands]


def _elements(layout: Layout, env):
    return env.local_bytes(layout) / env.dtype_bytes(layout.dtype)


def vector_flops(op: Elementwise, env):
    """Vector-unit FLOPs per device: the rule's count an element of the (largest) operand (a dispatch's
    backward: of the copies' gradient it sums)."""
    r = op.rule
    per = r.grad_flops if op.grad else r.flops
    if per == 0:
        return env.zero
    return per * _elements(op.inputs[0] if not op.grad or r.broadcasts else op.output, env)


def hbm_bytes(op: Elementwise, env, on_chip=frozenset()):
    """Bytes one device reads and writes: operands, result, and (dropout) the mask it writes."""
    if op.rule.free:
        return env.zero
    out = env.total(env.local_bytes(t) for t in op.inputs + (op.output,) if t.name not in on_chip)
    if op.rule.saves == "mask" and not op.grad:
        out = out + env.local_bytes(mask_layout(op.output))
    return out


def describe(op: Elementwise, mesh: Mesh) -> str:
    split = format_axes(op.mesh_axes(mesh))[1:]
    what = "backward of " + op.kind if op.grad else op.rule.summary
    return f"elementwise: {what}" + (f"; split over {split}" if split else "; every device does all of it")


__all__ = ["Elementwise", "Rule", "RULES", "rule", "vector_flops", "hbm_bytes", "mask_layout", "MASK_DTYPE",
           "operand_layouts", "check_apply"]


def check_apply(stmt, layouts, error):
    """The rule of an elementwise statement and the dimension it works over; ``error(message, span, hint=)``
    builds the exception for what is wrong with it."""
    kind = RULES.get(stmt.op)
    if kind is None:
        raise error(f"unknown operation {stmt.op!r}", stmt.name_span,
                hint="elementwise operations: " + ", ".join(RULES) +
                     "; collectives are written AllGather_X(A[...]) -> A[...]")
    if len(stmt.operands) != kind.arity:
        raise error(f"{stmt.op} takes {kind.arity} operand{'s' if kind.arity > 1 else ''}, not "
                f"{len(stmt.operands)}", stmt.name_span)
    if stmt.reduce and not kind.reduces:
        raise error(f"{stmt.op} works on each element; it takes no dimension", stmt.name_span)
    first = layouts[0]
    if kind.broadcasts:
        return kind, _check_broadcast(stmt, layouts, error)
    for ref, lay in zip(stmt.operands[1:], layouts[1:]):
        if lay.dims != first.dims:
            raise error(f"{stmt.op} needs operands of the same dimensions; {lay.name} has "
                    f"[{', '.join(lay.dims)}], {first.name} [{', '.join(first.dims)}]", ref.span)
    reduce = stmt.reduce or (first.dims[-1] if kind.reduces else None)
    if reduce is not None and reduce not in first.dims:
        raise error(f"{stmt.op}_{reduce}: {first.name} has no dimension {reduce}", stmt.name_span)
    return kind, reduce


def _check_broadcast(stmt, layouts, error) -> str:
    """A dispatch's dimension: new to its first operand, in its router's operand, and the result the first
    operand's dimensions with it added (``Xk[B, T, J, D] = Dispatch_J(Rn[B, T, D], Gk[B, T, J])``)."""
    first, steer = layouts
    new = stmt.reduce
    if new is None or new in first.dims or new not in steer.dims:
        raise error(f"{stmt.op} needs the dimension it copies along, one its second operand has and its first "
                    f"does not: {stmt.op}_J(X[B, D], G[B, J])", stmt.name_span)
    written = tuple(d.name for d in stmt.output.dims) if stmt.output is not None else ()
    if tuple(d for d in written if d != new) != first.dims or new not in written or not set(steer.dims) <= set(written):
        raise error(f"{stmt.op}_{new} gives {first.name}'s dimensions [{', '.join(first.dims)}] with {new} added; "
                    f"write its result so", stmt.output.span if stmt.output is not None else stmt.name_span)
    return new


def pass_through(ops) -> dict:
    """The gradients a backward pass takes with no step: each operand's of a residual add or a view (a rule
    whose gradient costs nothing) is its result's. ``{operand's gradient: [(the result's gradient, the
    result's dimensions, the operand's)]}`` over the forward operations ``ops``, as the simulator and the
    JAX lowering take them."""
    out: dict = {}
    for op in ops:
        if isinstance(op, Elementwise) and not op.grad and op.rule.grad_flops == 0:
            for x in op.inputs:
                out.setdefault("d" + x.name, []).append(("d" + op.output.name, op.output.dims, x.dims))
    return out


class Passing:
    """A backward pass's pass-through gradients (:func:`pass_through`), taken as whoever runs the pass
    meets them: the simulator (arrays by layout), the JAX lowering (a variable a layout) and the exported
    file's reference (whole arrays by name) hold them differently and take them by this one rule:

    - where a step reads an operand's gradient not held in the layout it reads, that gradient is the first
      pending contribution whose source (the result's gradient) is held laid out the same way;
    - unless the step writes that gradient itself (it adds its own contribution first), every other
      pending contribution whose source is held so is added into it;
    - at the end of the pass (:meth:`settle`), what no step read is added where it belongs: into the
      gradient's last layout, or the layout its source was left in.

    A source is held, made from its own pending contributions (a residual add after a residual add), or
    given (a gradient no step writes: the program's own ``dOut``). The holder is ``store``, with
    ``holds(t)``; ``like(src, dims, t)``: the source (of dimensions ``dims``) laid out as ``t``, None where
    it cannot be; ``given(t)``: whether ``t`` is given (and now held); ``take(t, s)`` and ``add(t, s)``;
    ``final(name, src, dims)``: where ``name``'s contributions belong at the end, None where ``src`` was
    never made. ``t`` is whatever the store reads a gradient as (its name is ``t.name``)."""

    def __init__(self, ops):
        self.pending = pass_through(ops)

    def read(self, t, writer: str | None, store) -> None:
        """Before a step that writes ``writer`` (None: the end of the pass) reads ``t``."""
        entries = self.pending.get(t.name)
        if not entries:
            return
        if not store.holds(t):
            for entry in list(entries):
                s = self._source(entry, t, store)
                if s is not None:
                    entries.remove(entry)
                    store.take(t, s)
                    break
        if writer != t.name and store.holds(t):
            for entry in list(entries):
                s = self._source(entry, t, store)
                if s is not None:
                    entries.remove(entry)
                    store.add(t, s)
        if not entries:
            self.pending.pop(t.name, None)

    def _source(self, entry, t, store):
        src, dims, _ = entry
        s = store.like(src, dims, t)
        if s is None:
            return None
        self.read(s, t.name, store)
        if not store.holds(s):
            if src in self.pending or not store.given(s):
                return None
            self.read(s, t.name, store)
        return s

    def settle(self, store) -> None:
        """The end of the pass: every contribution no step read, where it belongs."""
        for name in list(self.pending):
            self._settle(name, store)

    def _settle(self, name: str, store) -> None:
        for src, _, dims in list(self.pending.get(name, ())):
            if src in self.pending:
                self._settle(src, store)
            t = store.final(name, src, dims)
            if t is not None:
                self.read(t, None, store)
        self.pending.pop(name, None)

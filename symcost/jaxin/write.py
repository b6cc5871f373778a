"""Writing a :class:`~symcost.jaxin.program.Read` as notation: naming its dimensions (the user's names,
then names given by size, then letters), numbering its tensors, and writing each statement with every
tensor laid out."""
from __future__ import annotations

from ..errors import UsageError
from ..notation import format_axes
from .program import Read, Tensor

LETTERS = "IJKLMNOPQRSVABDEFGHT"
RESERVED = {"C", "U", "W"}   # the compute rate, the unreduced marker, the bandwidths' stem


class Writer:
    def __init__(self, read: Read, dims, mesh: dict, by_size: dict[str, int] | None = None):
        self.read, self.d, self.mesh = read, dims, mesh
        self.by_size = dict(by_size or {})
        self.dim_names: dict[int, str] = {}
        self.defined: set = set()
        self.counts: dict[str, int] = {}

    # ------------------------------------------------------------------------------------------- naming
    def name_dims(self) -> None:
        roots = []          # in order of appearance: the arguments, then each statement's operands and result
        used = [t for st in self.read.statements for t in tuple(st.ins) + (st.out,) if t is not None]
        ids = {id(t.same or t) for t in used}
        for t in [t for t in self.read.inputs if id(t) in ids] + used:
            if t is not None:
                roots += [x for n in t.nodes for x in self.d.leaves(n)]
        roots = list(dict.fromkeys(self.d.find(x) for x in roots))
        taken = set(self.mesh) | RESERVED
        for x in roots:
            n = self.d.names.get(x)
            if n:
                self.dim_names[x] = n
                taken.add(n)
        for name, size in self.by_size.items():
            free = [x for x in roots if x not in self.dim_names and self.d.size(x) == size]
            if name in taken:
                raise UsageError(f"--names {name}={size}: {name} already names a dimension or a mesh axis")
            if len(free) > 1:
                raise UsageError(f"--names {name}={size}: {len(free)} unnamed dimensions have size {size}; name "
                                 "them through the arguments' specs")
            if free:
                self.dim_names[free[0]] = name
                taken.add(name)
        letters = iter([c for c in LETTERS if c not in taken] + [f"{c}{k}" for k in range(2, 99) for c in LETTERS])
        for x in roots:
            if x not in self.dim_names:
                self.dim_names[x] = next(n for n in letters if n not in taken)

    def name_tensors(self) -> None:
        outs = {id(v.tensor) for v in self.read.outputs if v.tensor is not None and not v.tensor.input}
        seen = {t.name for t in self.read.inputs}
        for st in self.read.statements:
            t = st.out
            if t is None or t.name or t.same is not None:
                continue
            base = "Out" if id(t) in outs else t.base
            k = self.counts.get(base, 0) + 1
            self.counts[base] = k
            name = base if base == "Out" and k == 1 else f"{base}{k}"
            while name in seen:
                k += 1
                name = f"{base}{k}"
            t.name = name
            seen.add(name)

    # ------------------------------------------------------------------------------------------ writing
    def leaves(self, t: Tensor):
        """(dimension names, their mesh axes) of ``t``: each axis's finest factors, its split on the first."""
        dims = []
        for node, axes in zip(t.nodes, t.layout):
            lv = self.d.leaves(node)
            for k, x in enumerate(lv):
                dims.append((self.dim_names[self.d.find(x)], tuple(axes) if k == 0 else ()))
        names = [n for n, _ in dims]
        if len(set(names)) != len(names):
            raise UsageError(f"a tensor of the function has dimension {max(names, key=names.count)} twice; "
                             "name its axes apart through the specs")
        return dims

    def ref(self, t: Tensor, define: bool = False) -> str:
        root = t.same or t
        dims = ", ".join(n + format_axes(a) for n, a in self.leaves(t))
        first = (root.input or define) and id(root) not in self.defined
        if first:
            self.defined.add(id(root))
        dt = f":{t.dtype}" if (define or first) and t.dtype != "bf16" else ""
        un = "{U" + format_axes(t.unreduced) + "}" if t.unreduced else ""
        return f"{root.name}{dt}[{dims}]{un}"

    def names_of(self, t: Tensor) -> set:
        return {n for n, _ in self.leaves(t)}

    def contraction(self, ins, out) -> str:
        gone = sorted(set().union(*(self.names_of(t) for t in ins)) - self.names_of(out))
        if not gone:
            return "*"
        return f"*_{gone[0]}" if len(gone) == 1 else "*_{" + ",".join(gone) + "}"

    def statement(self, st) -> str:
        if st.kind == "comment":
            return "# " + st.text
        if st.kind == "collective":
            return f"{st.rule}{format_axes(st.axes)}({self.ref(st.ins[0])}) -> {self.ref(st.out)}"
        ins = [self.ref(t) for t in st.ins]
        out = self.ref(st.out, define=True)
        if st.kind == "einsum" and st.reduce is not None:
            gone = sorted({self.dim_names[self.d.find(x)] for n in st.reduce for x in self.d.leaves(n)})
            ones = "Ones" + "".join(gone)
            dims = ", ".join(gone)
            op = f"*_{gone[0]}" if len(gone) == 1 else "*_{" + ",".join(gone) + "}"
            return f"{out} = {ins[0]} {op} {ones}[{dims}]"
        if st.kind == "einsum" or (st.kind == "binary" and self.names_of(st.ins[0]) != self.names_of(st.ins[1])):
            return f"{out} = {ins[0]} {self.contraction(st.ins, st.out)} {ins[1]}"
        sub = ""
        if st.reduce is not None:       # a rule over one dimension: Softmax_S
            (leaf,) = self.d.leaves(st.reduce)
            sub = "_" + self.dim_names[self.d.find(leaf)]
        return f"{out} = {st.rule}{sub}({', '.join(ins)})"

    def write(self) -> tuple[str, dict]:
        self.name_dims()
        self.name_tensors()
        used = {t.same or t for st in self.read.statements for t in (st.out,) + tuple(st.ins) if t is not None}
        params = [t for t in self.read.inputs if t.param and t in used]
        lines = []
        if params:
            lines.append("param " + ", ".join(self.ref(t, define=True) for t in params))
        lines += [self.statement(st) for st in self.read.statements]
        sizes = {self.dim_names[x]: self.d.size(x) for x in self.dim_names}
        return "\n".join(lines) + "\n", sizes

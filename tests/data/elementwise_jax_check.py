"""Run by tests/docs/test_docs.py in a process of its own (JAX stays out of the test process): each
elementwise rule's JAX lowering (``Rule.jax``, and its gradient: ``Rule.jax_grad`` or ``jax.vjp`` of the
forward) against the simulator's NumPy meaning of it (symcost.arrays), in float64 on whole arrays. Prints
one line a rule and direction, ``ok`` or the largest difference."""
import jax
import jax.numpy as jnp
import numpy as np

from symcost import arrays
from symcost.elementwise import Elementwise
from symcost.export.lowering import elementwise_expr
from symcost.layout import Layout

jax.config.update("jax_enable_x64", True)
rng = np.random.default_rng(0)
SIZES = {"B": 3, "T": 4, "D": 5, "E": 6, "J": 2, "M": 2, "N": 10}
X = Layout.of("X", "BTD")


def shape(lay):
    return tuple(SIZES[d] for d in lay.dims)


def check(label, op, values, want):
    names = [f"a{i}" for i in range(len(values))]
    got = eval(elementwise_expr(op, names, SIZES), {"jax": jax, "jnp": jnp, **dict(zip(names, values))})  # noqa: S307
    err = float(np.max(np.abs(np.asarray(got) - want)))
    print(f"{label}: {'ok' if err < 1e-9 and np.shape(got) == np.shape(want) else f'differs by {err}'}")


CASES = [   # rule, operands, result, reduced dimension
    ("LayerNorm", [X], X.renamed("Y"), "D"), ("RMSNorm", [X], X.renamed("Y"), "D"),
    ("Softmax", [X], X.renamed("Y"), "D"), ("GeLU", [X], X.renamed("Y"), None), ("SiLU", [X], X.renamed("Y"), None),
    ("ReLU", [X], X.renamed("Y"), None), ("Mul", [X, X.renamed("W")], X.renamed("Y"), None),
    ("Add", [X, X.renamed("W")], X.renamed("Y"), None), ("Rotary", [X], X.renamed("Y"), None),
    ("Dropout", [X], X.renamed("Y"), None), ("View", [X], Layout.of("Y", "BTMN"[:2] + "D"), None),
    ("TopK", [Layout.of("X", "BTE")], Layout.of("Y", "BTJ"), "E"),
    ("Dispatch", [X, Layout.of("G", "BTJ")], Layout.of("Y", "BTJD"), "J"),
    ("CrossEntropy", [Layout.of("X", "BTE")], Layout.of("Y", "BT"), "E"),
]


def main() -> None:
    for kind, ins, out, red in CASES:
        op = Elementwise(kind, tuple(ins), out, reduce=red)
        vals = [rng.standard_normal(shape(t)) for t in ins]
        where = out.dims if op.rule.broadcasts else ins[0].dims
        axis = where.index(red) if red else None
        check(f"{kind} forward", op, vals, arrays.forward(kind, vals, axis, shape(out)))
        dres = rng.standard_normal(shape(out))
        saves = op.rule.saves
        for which, x in enumerate(ins):
            if kind == "Dispatch" and which == 1:
                continue                                   # the router's choice steers; it gets no gradient
            saved = {"inputs": list(ins), "output": [out], "mask": [Layout.of("Y_mask", out.dims)], "none": []}[saves]
            grad = Elementwise(kind, (out.renamed("d" + out.name), *saved), x.renamed("d" + x.name), reduce=red,
                               grad=True)
            svals = {"inputs": vals, "output": [arrays.forward(kind, vals, axis, shape(out))],
                     "mask": [rng.integers(0, 2, shape(out)).astype(float)], "none": []}[saves]
            gaxis = (grad.inputs[0] if op.rule.broadcasts else grad.output).dims.index(red) if red else None
            want = arrays.backward(kind, dres, svals, which, gaxis, shape(x))
            check(f"{kind} gradient {which}", grad, [dres, *svals], want)


if __name__ == "__main__":
    main()

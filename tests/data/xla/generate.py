"""Random sharded einsums and reshards for the XLA reference data (``random.jsonl``).

    python tests/data/xla/generate.py --seed 9 --count 96 > tests/data/xla/random.jsonl

Each case is a line in the batch format of the XLA oracle script (name, mesh, einsum, shapes, in, out,
dtype) plus its ``symcost`` notation. Families, drawn in turn: matrix products, batched products,
attention-like products (scores, then scores times values), MLP chains (two products) and reshards, on
meshes of 2 and 3 axes. Sizes are powers of two that divide by every mesh axis, so both sides plan the
same even blocks. The seed is the only input: the same seed writes the same file.
"""
from __future__ import annotations

import argparse
import json
import random

AXES = "XYZ"


def spec(dims: str, axes: dict) -> str:
    """A PartitionSpec in the oracle's syntax: ``'X+Y,None'``."""
    return ",".join("+".join(axes[d]) if axes.get(d) else "None" for d in dims)


def tensor(name: str, dims: str, axes: dict) -> str:
    parts = []
    for d in dims:
        a = axes.get(d, ())
        parts.append(d if not a else d + "_" + (a[0] if len(a) == 1 else "{" + ",".join(a) + "}"))
    return f"{name}[{', '.join(parts)}]"


def shard(rng: random.Random, dims: str, mesh: list) -> dict:
    """A random sharding of ``dims``: each mesh axis on one dimension or none, each used once."""
    out: dict = {}
    for a in rng.sample(mesh, len(mesh)):
        d = rng.choice(dims + "-")
        if d != "-":
            out.setdefault(d, []).append(a)
    return out


def mesh_of(rng: random.Random) -> list:
    n = rng.choice((2, 2, 3))
    return list(AXES[:n])


def sizes_of(rng: random.Random, dims: str) -> dict:
    return {d: rng.choice((128, 256, 512, 1024)) for d in dims}


FAMILIES = {
    "matmul": (["IJ,JK->IK"], "IJ", ["JK"], "IK"),
    "batched": (["BIJ,BJK->BIK"], "BIJ", ["BJK"], "BIK"),
    "attention": (["BQD,BKD->BQK", "BQK,BKD->BQD"], "BQD", ["BKD", "BKD"], "BQD"),
    "mlp": (["BD,DF->BF", "BF,FD->BD"], "BD", ["DF", "FD"], "BD"),
    "reshard": (["IJ->IJ"], "IJ", [], "IJ"),
}


def case(rng: random.Random, family: str, k: int) -> dict:
    einsums, first, rest, out_dims = FAMILIES[family]
    axes = mesh_of(rng)
    mesh = {a: rng.choice((2, 2, 4)) if len(axes) == 2 else 2 for a in axes}
    dims = sorted(set("".join([first, *rest, out_dims])))
    sizes = sizes_of(rng, "".join(dims))
    operands = [first, *rest]
    shards = [shard(rng, t, axes) for t in operands]
    out = shard(rng, out_dims, axes)
    if family == "reshard":
        while out == shards[0]:
            out = shard(rng, out_dims, axes)
    names = ["A", "W", "U"][:len(operands)]
    if family == "reshard":
        text = f"{tensor('A', first, shards[0])} -> {tensor('A', out_dims, out)}"
    elif len(einsums) == 1:
        contract = sorted(set(first) & set(rest[0]) - set(out_dims))
        text = f"{tensor(names[0], first, shards[0])} * {tensor(names[1], rest[0], shards[1])} -> " \
               f"{tensor('C', out_dims, out)}"
        assert contract
    else:
        lhs1, rhs1 = einsums[0].split("->")[0].split(",")
        mid = einsums[0].split("->")[1]
        c1 = "".join(sorted(set(lhs1) & set(rhs1) - set(mid)))
        c2 = "".join(sorted(set(mid) & set(rest[1]) - set(out_dims)))
        text = (f"{tensor(names[0], first, shards[0])} *_{c1} {tensor(names[1], rest[0], shards[1])} "
                f"*_{c2} {tensor(names[2], rest[1], shards[2])} -> {tensor('C', out_dims, out)}")
    return {"name": f"{family}_{k:03d}", "mesh": ",".join(f"{a}={n}" for a, n in mesh.items()),
            "einsum": einsums if len(einsums) > 1 else einsums[0],
            "shapes": ",".join(f"{d}={sizes[d]}" for d in dims),
            "in": [spec(t, s) for t, s in zip(operands, shards)], "out": spec(out_dims, out),
            "dtype": "bfloat16", "symcost": text}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, default=96)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    families = list(FAMILIES)
    for k in range(args.count):
        print(json.dumps(case(rng, families[k % len(families)], k)))


if __name__ == "__main__":
    main()

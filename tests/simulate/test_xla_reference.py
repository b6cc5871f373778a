"""At least as good as XLA: symcost's plan never moves more bytes than the collectives XLA's SPMD
partitioner inserted for the same sharded einsum (tests/data/xla, one ring cost model).

XLA runs its collectives one after another, so the plans are ranked here with collectives summed
(overlap=False). Under the book's overlap policy, where each mesh axis's links work in parallel, the model
may rightly prefer more bytes spread over two axes: for contracting_two_axes (8 devices, latency-bound at
these sizes) two gathers over Y overlapped with an AllReduce over X take 5.8 us against 6.0 us for one
AllReduce over XY, while moving 4x the bytes. That is the model's answer, not a bytes-optimal one."""
import json

import numpy as np
import pytest

import symcost
from symcost.simulate import check_plan
from symcost.xla import ring_link_bytes, spec_to_notation, xla_link_bytes

from conftest import ROOT

pytestmark = pytest.mark.slow   # every case re-derives and compares; CI runs them, make test-fast does not

DATA = ROOT / "tests" / "data" / "xla"
CASES = [json.loads(l) for l in (DATA / "cases.jsonl").read_text().splitlines() if l.strip()]
RECORDS = [json.loads(l) for l in (DATA / "reference.jsonl").read_text().splitlines() if l.strip()]
SUMMARY = {r["case"]: r for r in RECORDS if r.get("summary")}
COLLECTIVES = {c["name"]: [r for r in RECORDS if r.get("case") == c["name"] and not r.get("summary")]
               for c in CASES}


def sizes_of(text):
    return {k: int(v) for k, v in (kv.split("=") for kv in text.split(","))}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_never_more_bytes_than_xla(case):
    plan = symcost.derive(case["symcost"], mesh=case["mesh"], dims=case["shapes"], objective="comms", overlap=False)
    ours = ring_link_bytes(plan)
    theirs = xla_link_bytes(COLLECTIVES[case["name"]])
    assert theirs == SUMMARY[case["name"]]["total_canonical_link_bytes_per_device"]
    assert ours <= theirs
    check_plan(plan, sizes_of(case["shapes"]), np.random.default_rng(0))   # and it is right


def test_strictly_better_where_xla_gathers_a_whole_operand():
    better = {}
    for case in CASES:
        plan = symcost.derive(case["symcost"], mesh=case["mesh"], dims=case["shapes"], objective="comms", overlap=False)
        better[case["name"]] = xla_link_bytes(COLLECTIVES[case["name"]]) / max(1, ring_link_bytes(plan))
    assert better["case4_both_free_same_axis"] == pytest.approx(786432 / 442368)
    assert better["output_resharded"] == pytest.approx(4.0)


def test_reduce_scatter_written_as_allreduce_plus_slice_is_recognised():
    (rec,) = COLLECTIVES["case3_reducescatter"]
    assert rec["kind"] == "all-reduce" and rec["canonical_kind"] == "reduce-scatter"
    plan = symcost.derive("A[I, J_X] * B[J_X, K] -> C[I, K_X]", mesh="X=4", dims="I=256,J=1024,K=512")
    assert [s.kind for s in plan.collectives] == ["ReduceScatter"]
    assert ring_link_bytes(plan) == rec["canonical_link_bytes_per_device"]


def test_case_notation_matches_the_specs():
    """The stored notation says what the PartitionSpecs say."""
    for case in CASES:
        if isinstance(case["einsum"], list):
            continue
        ins, out = case["einsum"].split("->")
        a, b = ins.split(",")
        text = (f"{spec_to_notation('A', a, case['in'][0])} * {spec_to_notation('B', b, case['in'][1])} -> "
                f"{spec_to_notation('C', out, case['out'])}")
        mine = symcost.parse(case["symcost"]).statements[0]
        theirs = symcost.parse(text).statements[0]
        assert [[d.axes for d in t.dims] for t in mine.operands + (mine.output,)] == \
               [[d.axes for d in t.dims] for t in theirs.operands + (theirs.output,)]


# ---------------------------------------------------------------------------- random cases, timed
# tests/data/xla/random.jsonl: `python tests/data/xla/generate.py --seed 9 --count 100` (einsums, batched
# einsums, attention-like and MLP chains, reshards on meshes of 2 and 3 axes); random_reference.jsonl: what
# the XLA oracle script printed for them (see tests/data/xla/README.md).
RANDOM_SEED, RANDOM_COUNT = 9, 100
RANDOM = [json.loads(l) for l in (DATA / "random.jsonl").read_text().splitlines() if l.strip()]
RANDOM_RECORDS = [json.loads(l) for l in (DATA / "random_reference.jsonl").read_text().splitlines() if l.strip()]


def _random_collectives(name):
    return [r for r in RANDOM_RECORDS if r.get("case") == name and "kind" in r]


def test_random_cases_are_the_generators_output():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, str(DATA / "generate.py"), "--seed", str(RANDOM_SEED), "--count",
                          str(RANDOM_COUNT)], capture_output=True, text=True, check=True).stdout
    assert [json.loads(l) for l in out.splitlines()] == RANDOM
    assert len(RANDOM) >= 80
    assert {r["case"] for r in RANDOM_RECORDS if r.get("summary")} == {c["name"] for c in RANDOM}
    families = {c["name"].split("_")[0] for c in RANDOM}
    assert families == {"matmul", "batched", "attention", "mlp", "reshard"}
    assert {len(c["mesh"].split(",")) for c in RANDOM} == {2, 3}


def test_never_slower_than_xla_under_the_book_time_model():
    """Each case derived with collectives summed (XLA runs them one after another) and ranked by
    communication time; both sides priced by the same link model (symcost.xla.record_seconds)."""
    from symcost.xla import book_env, plan_seconds, xla_seconds
    slower, ratios = [], []
    for case in RANDOM:
        plan = symcost.derive(case["symcost"], mesh=case["mesh"], dims=case["shapes"], objective="comms",
                              overlap=False)
        env = book_env(plan)
        ours, theirs = plan_seconds(plan, env), xla_seconds(_random_collectives(case["name"]), env)
        if ours > theirs * (1 + 1e-9):
            slower.append((case["name"], ours, theirs))
        if ours > 0 and theirs > 0:
            ratios.append(ours / theirs)
    geomean = float(np.exp(np.mean(np.log(ratios))))
    print(f"\nXLA reference: {len(RANDOM)} random cases, never slower on {len(RANDOM) - len(slower)}; "
          f"geometric-mean time ratio symcost/XLA {geomean:.3f} over the {len(ratios)} cases where both "
          f"communicate")
    assert slower == []
    # measured when the data was stored: 100 of 100, 0.498 over 97 cases (XLA gathers where an AllToAll
    # or a collective-permute does; attention-like chains gain most). 0.528 since collectives are priced by
    # their busiest link: on these meshes' rings of two a collective-permute sends half of each block
    # either way round (both links), so XLA's permutes cost half what they did and its lead shrinks
    assert geomean == pytest.approx(0.528, abs=0.01)


@pytest.mark.parametrize("case", RANDOM[::10], ids=[c["name"] for c in RANDOM[::10]])
def test_random_plans_are_right(case):
    plan = symcost.derive(case["symcost"], mesh=case["mesh"], dims=case["shapes"], objective="comms", overlap=False)
    check_plan(plan, sizes_of(case["shapes"]), np.random.default_rng(0))


def test_random_notation_matches_the_specs():
    for case in RANDOM:
        if isinstance(case["einsum"], list):
            continue
        ins, out = case["einsum"].split("->")
        names = ["A", "W"]
        text = " * ".join(spec_to_notation(n, d, s) for n, d, s in zip(names, ins.split(","), case["in"]))
        text += f" -> {spec_to_notation('A' if ',' not in ins else 'C', out, case['out'])}"
        mine = symcost.parse(case["symcost"]).statements[0]
        theirs = symcost.parse(text).statements[0]
        assert [[d.axes for d in t.dims] for t in mine.operands + (mine.output,)] == \
               [[d.axes for d in t.dims] for t in theirs.operands + (theirs.output,)]

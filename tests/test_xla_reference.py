"""At least as good as XLA: symcost's plan never moves more bytes than the collectives XLA's SPMD
partitioner inserted for the same sharded einsum (tests/data/xla, one ring cost model).

XLA runs its collectives one after another, so the plans are ranked here with collectives summed
(overlap=False). Under the book's overlap policy, where each mesh axis's links work in parallel, the model
may rightly prefer more bytes spread over two axes: for contracting_two_axes (8 devices, latency-bound at
these sizes) two gathers over Y overlapped with an AllReduce over X take 5.8 us against 6.0 us for one
AllReduce over XY, while moving 4x the bytes. That is the model's answer, not a bytes-optimal one."""
import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow   # every case re-derives and compares; CI runs them, make test-fast does not

import symcost
from symcost.simulate import check_plan
from symcost.xla import ring_link_bytes, spec_to_notation, xla_link_bytes

DATA = Path(__file__).parent / "data" / "xla"
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

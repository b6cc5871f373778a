"""Choosing a training run (``model --train --search``): the space holds the runs people launch, the
search's best is no slower than any of them, and nothing that does not fit is listed."""
import json
from pathlib import Path

import jsonschema
import pytest

from symcost.cli import main
from symcost.hardware import hardware
from symcost.models.config import load_model_config
from symcost.models.execution import Run
from symcost.models.runs import candidates, describe, search_runs

ROOT = Path(__file__).resolve().parent.parent
A100 = hardware("a100")
# Korthikanti et al. 2022, Table 5 (model, GPUs, PP, sequences, microbatch, interleave); TP 8, DP 1
TABLE5 = [("megatron-22b", 8, 1, 4, 4, 1), ("gpt3-175b", 64, 8, 64, 1, 3), ("mt-nlg-530b", 280, 35, 280, 1, 3),
          ("megatron-1t", 512, 64, 512, 1, 1)]


@pytest.mark.parametrize("model, gpus, pp, seqs, mb, v", TABLE5)
def test_published_runs_are_in_the_space_and_the_best_is_no_slower(model, gpus, pp, seqs, mb, v):
    cfg = load_model_config(model)
    published = dict(tp=8, pp=pp, dp=1, cp=1, ep=1, sequences=seqs, microbatch=mb, seq=2048, interleave=v,
                     recompute="selective", seq_parallel=True, zero=0, attention="unfused")
    assert published in list(candidates(cfg, A100, gpus, seqs, 2048))
    res = search_runs(cfg, A100, gpus, seqs, 2048, top=3)
    assert res["runs"][0]["step_time"] <= Run(cfg, A100, **published).iteration()["iteration"]


def test_the_best_is_the_fastest_that_fits():
    """Brute force: every run of the space priced one at a time; the search's list is its fastest fitting
    runs, in order."""
    cfg = load_model_config("megatron-22b")
    res = search_runs(cfg, A100, 8, 8, 2048, top=4)
    timed = []
    for kw in candidates(cfg, A100, 8, 8, 2048):
        run = Run(cfg, A100, **kw)
        if run.memory()["total"] <= A100.hbm_bytes:
            timed.append(run.iteration()["iteration"])
    timed.sort()
    assert res["feasible"] == len(timed) < res["searched"]
    assert [r["step_time"] for r in res["runs"]] == pytest.approx(timed[:4])
    assert all(r["memory_bytes"] <= A100.hbm_bytes for r in res["runs"])
    best = res["runs"][0]
    assert best["mostly"] is None and best["loses_by"] == 0
    for r in res["runs"][1:]:    # what each runner-up loses by: the part that grew the most
        grew = {p: r["breakdown"][p] - best["breakdown"][p] for p in r["breakdown"]}
        assert r["mostly"] == max(grew, key=grew.get)
        assert r["loses_by"] == pytest.approx(r["step_time"] - best["step_time"])


def test_the_space_keeps_to_the_model_and_the_node():
    cfg = load_model_config("gpt3-175b")      # 96 heads, 96 layers; NVLink domain of 8
    space = list(candidates(cfg, A100, 64, 64, 2048))
    assert {c["tp"] for c in space} == {1, 2, 4, 8}
    assert all(c["tp"] * c["pp"] * c["dp"] == 64 for c in space)
    assert all(96 % (c["pp"] * c["interleave"]) == 0 for c in space if c["interleave"] > 1)
    assert {c["pp"] for c in space} == {1, 2, 4, 8, 16, 32, 64}      # uneven stages too (96 over 64)
    assert all(not c["seq_parallel"] for c in space if c["tp"] == 1)
    assert all(c["zero"] == 0 for c in space if c["dp"] == 1)


def test_describe_reads_as_the_flags():
    assert describe(dict(tp=8, pp=8, dp=2, zero=1, microbatch=1, interleave=3, recompute="selective",
                         seq_parallel=True)) == \
        "tp 8, pp 8, dp 2, zero 1, microbatch 1, interleave 3, recompute selective, seq-parallel"


def test_command_line_lists_the_runs_and_json_follows_the_schema(capsys, untimed):
    args = ["model", "megatron-22b", "--train", "--search", "--hw", "a100", "--chips", "8", "--batch", "8192",
            "--seq", "2048", "--top", "3"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "run search on 8 x a100, 4 sequences of 2048: priced 354 runs in ...; 198 fit in 80 GB" in untimed(out)
    assert "    1. tp 4, pp 2, dp 1, microbatch 1, interleave 8, recompute none, seq-parallel:" in out
    assert "mostly" in out
    assert main(args + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, json.loads((ROOT / "symcost" / "schemas" / "model.json").read_text()))
    assert data["train"]["searched"] == 354 and len(data["train"]["runs"]) == 3 and data["fits"]
    # DESIGN's contract: a top-level search object with every run's knobs flat
    top = data["search"]["top"]
    assert data["search"]["candidates"] == 354 and data["search"]["feasible"] == 198 and len(top) == 3
    for run, full in zip(top, data["train"]["runs"]):
        assert {k: run[k] for k in full["config"]} == full["config"]
        assert run["step_time"] == full["step_time"] and run["dominant"] in full["breakdown"]
        parts = full["breakdown"]
        compute = sum(parts[k] for k in ("forward", "backward", "recompute", "head", "optimizer"))
        assert run["compute_bound"] == (compute >= sum(parts.values()) - compute)
        assert parts[run["dominant"]] == max(parts.values())


@pytest.mark.parametrize("extra, says", [
    (["--tp", "8"], "--search chooses the run itself; drop --tp"),
    (["--top", "0"], "--top must be at least 1"),
])
def test_search_errors(capsys, extra, says):
    code = main(["model", "megatron-22b", "--train", "--search", "--hw", "a100", "--chips", "8", "--batch", "8192",
                 "--seq", "2048"] + extra)
    err = capsys.readouterr().err
    assert code == 2 and says in err


def test_search_needs_train(capsys):
    assert main(["model", "megatron-22b", "--search", "--hw", "a100", "--chips", "8"]) == 2
    assert "a training run (--train) or how to serve (--decode or --prefill)" in capsys.readouterr().err


def test_nothing_fits_exits_one(capsys):
    code = main(["model", "gpt3-175b", "--train", "--search", "--hw", "a100", "--chips", "2", "--batch", "4096",
                 "--seq", "2048"])
    out = capsys.readouterr().out
    assert code == 1 and "NONE FITS" in out


def test_llama3_405b_as_meta_ran_it_is_in_the_space():
    """LLaMA 3 405B (Dubey et al. 2024, section 3.3.2): TP 8, PP 16, DP 64 on 8,192 H100s, 16M-token
    batches of 8,192-token sequences; its 126 layers do not split evenly over 16 stages (Meta took one
    layer off the first and the last), which uneven stages express. The search's best is no slower."""
    cfg, h100 = load_model_config("llama3-405b"), hardware("h100")
    meta = dict(tp=8, pp=16, dp=64, cp=1, ep=1, sequences=2048, microbatch=1, seq=8192, interleave=1,
                recompute="full", seq_parallel=True, zero=1, attention="flash")
    assert meta in list(candidates(cfg, h100, 8192, 2048, 8192, attention="flash"))
    interleaved = {**meta, "interleave": 2}       # 2 chunks of at most 4 layers a stage: in the space too
    space = list(candidates(cfg, h100, 8192, 2048, 8192, attention="flash"))
    assert interleaved in space and {**meta, "interleave": 3} not in space    # 3 chunks of 3: 9 a stage
    published = [Run(cfg, h100, **run) for run in (meta, interleaved)]
    assert [r.layers_per_stage for r in published] == [8, 8]
    res = search_runs(cfg, h100, 8192, 2048, 8192, top=1, attention="flash")
    assert all(res["runs"][0]["step_time"] <= r.iteration()["iteration"] for r in published)

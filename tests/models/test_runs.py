"""Choosing a training run (``model --train --search``): the space holds the runs people launch, the
search's best is no slower than any of them, and nothing that does not fit is listed."""
import dataclasses
import json

import jsonschema
import pytest

from symcost.cli import main
from symcost.hardware import hardware
from symcost.models.config import load_model_config
from symcost.models.execution import Run
from symcost.models.runs import candidates, describe, search_runs

from conftest import ROOT

A100 = hardware("a100")
H100 = hardware("h100")
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
    assert res.rows[0].step_time <= Run(cfg, A100, **published).iteration()["iteration"]


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
    assert res.feasible == len(timed) < res.searched
    runs = [r.as_dict() for r in res.rows]
    assert [r["step_time"] for r in runs] == pytest.approx(timed[:4])
    assert all(r["memory_bytes"] <= A100.hbm_bytes for r in runs)
    best = runs[0]
    assert best["mostly"] is None and best["loses_by"] == 0
    for r in runs[1:]:    # what each runner-up loses by: the part that grew the most
        grew = {p: r["breakdown"][p] - best["breakdown"][p] for p in r["breakdown"]}
        assert r["mostly"] == max(grew, key=grew.get)
        assert r["loses_by"] == pytest.approx(r["step_time"] - best["step_time"])


def test_the_space_keeps_to_the_model_and_the_node():
    cfg = load_model_config("gpt3-175b")      # 96 heads, 96 layers; NVLink domain of 8
    space = list(candidates(cfg, A100, 64, 64, 2048))
    assert {c["tp"] for c in space} == {1, 2, 3, 4, 6, 8}            # divisors of the heads within a node
    assert all(c["tp"] * c["pp"] * c["dp"] <= 64 for c in space)
    assert any(c["tp"] * c["pp"] * c["dp"] < 64 for c in space)         # 96 layers over 3 stages: 48 chips
    assert all(96 % (c["pp"] * c["interleave"]) == 0 for c in space if c["interleave"] > 1)
    # the divisors of the layers and of the chips left: uneven stages too (96 over 64)
    assert all(96 % c["pp"] == 0 or (64 // c["tp"]) % c["pp"] == 0 for c in space)
    assert {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64} <= {c["pp"] for c in space}
    assert all(not c["seq_parallel"] for c in space if c["tp"] == 1)
    assert all(c["zero"] == 0 for c in space if c["dp"] == 1)


@pytest.mark.slow    # run searches: the full tier
def test_a_framework_choice_is_every_runs_and_flash_has_no_selective_twin(capsys):
    """``--attention flash`` and ``--dp-overlap`` are the framework's: every run of the space is priced with
    them and the search's header says so. With flash attention selective recomputation is no recomputation
    (the kernel's backward computes the scores again itself): it listed each run twice, ``recompute none``
    and ``recompute selective`` at the same time and memory; it is not tried."""
    cfg = load_model_config("llama3-8b")
    flash = list(candidates(cfg, H100, 64, 128, 8192, attention="flash"))
    unfused = list(candidates(cfg, H100, 64, 128, 8192))
    assert {c["recompute"] for c in flash} == {"none", "full"} and all(c["attention"] == "flash" for c in flash)
    assert len(flash) == len([c for c in unfused if c["recompute"] != "selective"])
    one = Run(cfg, H100, tp=2, pp=2, dp=16, zero=3, sequences=128, microbatch=2, seq=8192, interleave=8,
              attention="flash")
    assert one.iteration() == dataclasses.replace(one, recompute="selective").iteration()
    overlap = list(candidates(cfg, H100, 64, 128, 8192, dp_overlap=True))
    assert len(overlap) == len(unfused) and all(c["dp_overlap"] for c in overlap)
    args = ["train", "llama3-8b", "--hw", "h100", "--chips", "64", "--batch", "1048576", "--seq", "8192", "--search"]
    assert main(args + ["--dp-overlap", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["train"]
    assert data["dp_overlap"] is True and data["attention"] == "unfused"
    best = search_runs(cfg, H100, 64, 128, 8192, top=1).rows[0]
    assert data["runs"][0]["step_time"] <= best.step_time       # the reduction hidden: no slower
    # the figures docs/serving-and-runs.md quotes
    assert (best.step_time, data["runs"][0]["step_time"]) == (pytest.approx(2.70, abs=0.005), pytest.approx(2.53, abs=0.005))
    assert main(args + ["--attention", "flash", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "128 sequences of 8192, flash attention:" in out and "recompute selective" not in out
    assert "    1. tp 2, pp 2, dp 16, zero 3, microbatch 2, interleave 8, recompute none: 1.66 s, MFU 57.6%" in out


def test_a_search_with_the_default_kernel_says_what_flash_would_change(capsys):
    """The run search prices Megatron 2022's unfused attention unless told otherwise; at 8,192 tokens its
    scores crossing HBM are a third of the iteration, which a user would not guess from the ranking. The
    first run is priced again with flash attention, its knobs kept, and the line says so (not when the
    search was told which kernel)."""
    args = ["train", "llama3-8b", "--hw", "h100", "--chips", "64", "--batch", "1048576", "--seq", "8192", "--search",
            "--top", "1"]
    assert main(args + ["--json"]) == 0
    train = json.loads(capsys.readouterr().out)["train"]
    config = {k: v for k, v in train["runs"][0]["config"].items()}
    flash = Run(load_model_config("llama3-8b"), H100, **config, sequences=128, seq=8192, attention="flash")
    assert train["with_flash"]["step_time"] == pytest.approx(flash.iteration()["iteration"], rel=1e-12)
    assert train["with_flash"]["step_time"] < train["runs"][0]["step_time"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "unfused attention:" in out and "    the first with --attention flash: 2.02 s, MFU 47.5%" in out
    assert main(args + ["--attention", "unfused", "--json"]) == 0
    assert "with_flash" not in json.loads(capsys.readouterr().out)["train"]


def test_describe_reads_as_the_flags():
    assert describe(dict(tp=8, pp=8, dp=2, zero=1, microbatch=1, interleave=3, recompute="selective",
                         seq_parallel=True)) == \
        "tp 8, pp 8, dp 2, zero 1, microbatch 1, interleave 3, recompute selective, seq-parallel"


def test_command_line_lists_the_runs_and_json_follows_the_schema(capsys, untimed):
    args = ["model", "megatron-22b", "--train", "--search", "--hw", "a100", "--chips", "8", "--batch", "8192",
            "--seq", "2048", "--top", "3"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert ("run search on at most 8 x a100, 4 sequences of 2048, unfused attention: priced 408 runs in ...; 218 fit "
            "in 80 GB") in untimed(out)
    assert "    1. tp 4, pp 2, dp 1, microbatch 1, interleave 8, recompute none, seq-parallel:" in out
    assert "mostly" in out
    assert main(args + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, json.loads((ROOT / "symcost" / "schemas" / "model.json").read_text()))
    assert data["train"]["searched"] == 408 and len(data["train"]["runs"]) == 3 and data["fits"]
    # DESIGN's contract: a top-level search object with every run's knobs flat
    top = data["search"]["top"]
    assert data["search"]["candidates"] == 408 and data["search"]["feasible"] == 218 and len(top) == 3
    for run, full in zip(top, data["train"]["runs"]):
        assert {k: run[k] for k in full["config"]} == full["config"]
        assert run["chips_used"] == full["chips_used"] == run["tp"] * run["pp"] * run["dp"] * run["cp"]
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


def test_the_search_takes_the_batch_in_sequences_or_tokens(capsys):
    """--sequences is the iteration's batch, as for one run (not a knob the search would choose): the same
    search as --batch in tokens; both given, they must agree."""
    argv = ["model", "megatron-22b", "--train", "--search", "--hw", "a100", "--chips", "8", "--seq", "2048", "--json"]
    assert main(argv + ["--sequences", "8"]) == 0
    by_sequences = json.loads(capsys.readouterr().out)["search"]
    assert main(argv + ["--batch", "16384"]) == 0
    by_tokens = json.loads(capsys.readouterr().out)["search"]
    by_sequences.pop("seconds"), by_tokens.pop("seconds")
    assert by_sequences == by_tokens and by_sequences["top"]
    for extra in (["--search"], []):    # one run says the same
        run = [a for a in argv if a != "--search"] + (["--tp", "8"] if not extra else [])
        assert main(run + extra + ["--sequences", "8", "--batch", "8192"]) == 2
        assert "--batch 8192 tokens is not --sequences 8 of --seq 2048 (16,384 tokens)" in capsys.readouterr().err


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
    assert all(res.rows[0].step_time <= r.iteration()["iteration"] for r in published)


# --------------------------------------------------------------------------- the chip budget
def test_a_run_may_leave_chips_idle_and_says_why(capsys):
    """LLaMA 3-70B, 4M-token batches of 4,096-token sequences on 8,960 v5p chips: no split of all 8,960
    divides the 1,024 sequences without 35 pipeline stages (3.05 s); on 8,192 of them TP 8 and DP 1,024 run
    in 1.15 s. The search uses the 8,192 and says why the other 768 stay idle.

    The step model prices the layer's tensor-parallel collectives as its plan runs them (each AllReduce
    after the einsum that feeds it). Its TP group of 8 v5p chips is the 2x2x2 slice 8 chips make, whose
    AllReduce loads a link with 7/12 of V per pass (links.gather_load), not a line of 8 (7/4): on 8,192 chips
    TP 8 x PP 2 x DP 512 then runs in 0.851 s, MFU 58.9 % (43.7 % when TP 8 was priced as a line)."""
    args = ["model", "llama3-70b", "--train", "--search", "--hw", "tpu-v5p", "--chips", "8960", "--batch", "4194304",
            "--seq", "4096", "--top", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert ("uses 8,192 of 8,960 chips: 560 replicas of tp 8 x pp 2 cannot divide 1,024 sequences, so the other "
            "768 stay idle; the best run on all 8,960 (tp 8, pp 35, dp 32") in out
    assert main(args + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    best = data["search"]["top"][0]
    assert best["chips_used"] == 8192 and best["mfu"] == pytest.approx(0.589, abs=0.005)
    assert data["train"]["chips_used"] == 8192 and data["train"]["budget"].startswith("8,192 of 8,960 chips")
    full = Run(load_model_config("llama3-70b"), hardware("tpu-v5p"), tp=16, pp=35, dp=16, sequences=1024, seq=4096,
               seq_parallel=True, zero=3)
    assert best["step_time"] < full.iteration()["iteration"] / 2


def test_budget_note_names_the_numbers():
    from symcost.models.runs import RunChoice, budget_note
    def choice(**c):
        return RunChoice(tuple({"tp": 1, "pp": 1, "dp": 1, "cp": 1, **c}.items()), 1.0, 0.5, 0.5, 1e9, (), 0.0, None)
    assert budget_note(64, 64, choice(tp=8, dp=8), None) is None
    assert budget_note(10, 8, choice(tp=2, dp=4), None) == ("8 of 10 chips: 5 replicas of tp 2 cannot divide 8 "
                                                            "sequences, so the other 2 stay idle")
    assert budget_note(10, 8, choice(tp=4, dp=2), None).startswith("8 of 10 chips: 10 is not a whole number of "
                                                                   "replicas of tp 4 (4 chips)")


def test_vs_chips_lists_the_best_run_on_each_budget(capsys):
    args = ["train", "megatron-22b", "--search", "--hw", "a100", "--chips", "8", "--batch", "16384", "--seq", "2048",
            "--vs", "chips", "--top", "1", "--json"]
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)["train"]["vs_chips"]
    assert [r["chips"] for r in rows] == [1, 2, 4, 8]
    times = [r["step_time"] for r in rows if r["fits"]]
    assert times == sorted(times, reverse=True) and all(r["chips_used"] <= r["chips"] for r in rows if r["fits"])
    assert rows[-1]["step_time"] == search_runs(load_model_config("megatron-22b"), A100, 8, 8, 2048, top=1).rows[0].step_time
    assert main(["model", "megatron-22b", "--train", "--hw", "a100", "--batch", "8192", "--vs", "chips"]) == 2
    assert "--vs chips compares the best training run on each chip budget" in capsys.readouterr().err


def test_a_model_too_big_for_the_chips_says_so_with_numbers(capsys):
    """LLaMA 3-8B on one H100: bf16 weights, fp32 gradients and fp32 master weights and Adam moments take
    18 bytes a parameter, 145 GB: no microbatch or recomputation helps, more chips do."""
    code = main(["train", "llama3-8b", "--search", "--hw", "h100", "--chips", "1", "--batch", "65536", "--seq", "8192"])
    out = capsys.readouterr().out
    assert code == 1
    assert ("NONE FITS: llama3-8b does not fit on 1 chip: its weights, gradients and optimizer state alone take "
            "145 GB a chip") in out and "a chip has 80 GB; at least 2 chips hold them" in out
    assert "fewer sequences" not in out


def test_train_is_model_with_train(capsys):
    args = ["megatron-22b", "--search", "--hw", "a100", "--chips", "8", "--batch", "8192", "--seq", "2048", "--json"]
    assert main(["train"] + args) == 0
    trained = json.loads(capsys.readouterr().out)
    assert main(["model", "--train"] + args) == 0
    modelled = json.loads(capsys.readouterr().out)
    for d in (trained, modelled):
        d["train"].pop("search_seconds"), d["search"].pop("seconds")
    assert trained == modelled
    assert main(["train", "megatron-22b", "--decode", "--hw", "a100"]) == 2


def test_runs_priced_in_worker_processes_are_the_runs_priced_here():
    """``jobs=2``: each layer's runs priced by the worker that plans that layer, back a layer at a time; the
    same runs ranked in the same order, with the same numbers, as one process finds (ties broken by the
    space's order, not by the order the workers answer in)."""
    cfg = load_model_config("megatron-22b")
    one, two = (search_runs(cfg, A100, 16, 16, 2048, top=8, jobs=j) for j in (1, 2))
    assert (one.searched, one.feasible) == (two.searched, two.feasible)
    assert [r.as_dict() for r in one.rows] == [r.as_dict() for r in two.rows]
    drop = ("search_seconds",)
    assert {k: v for k, v in one.as_dict().items() if k not in drop} == \
        {k: v for k, v in two.as_dict().items() if k not in drop}


@pytest.mark.parametrize("argv, says", [
    (["--tp", "8", "--jobs", "2"], "--jobs is read by --search (--train, --decode or --prefill)"),
    (["--tp", "8", "--max-cp", "4"], "--max-cp is read by --train --search"),      # was dropped without a word
    (["--search", "--jobs", "0"], "--jobs must be at least 1"),
    (["--search", "--jobs", "many"], "--jobs must be a number of processes or 'auto'"),
])
def test_the_run_searchs_own_flags_are_refused_without_it(capsys, argv, says):
    code = main(["train", "megatron-22b", "--hw", "a100", "--chips", "8", "--batch", "8192", "--seq", "2048", *argv])
    err = capsys.readouterr().err
    assert code == 2 and says in err, err

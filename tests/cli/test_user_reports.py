"""What a new user hit on real-hardware questions: wrong answers, crashes and confusing output. Each test
is one reported problem; the crash table holds every command that once ended in an internal error."""
import importlib.util
import json

import pytest

from symcost.cli import main

from conftest import ROOT

FSDP_TP = str(ROOT / "derivations" / "fsdp_tp.sc")
FSDP = str(ROOT / "derivations" / "fsdp.sc")
DP = str(ROOT / "derivations" / "dp.sc")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------- crashes: exit 0, 1 or 2, one sentence

CRASHES = [
    ["optimize", FSDP_TP, "--chips", "256", "--vary", "X,Y", "--hw", "h100"],
    ["optimize", FSDP_TP, "--chips", "256", "--vary", "X,Y", "--hw", "h100", "--dims", "B=1048576,F=32768,D=8192"],
    ["derive", FSDP_TP, "--mesh", "X,Y", "--moves", "none"],
    ["xla-check", "A[I, J_X] * B[J, K] -> C[I, K]", "--mesh", "X=4"],
    ["model", "llama3-70b", "--prefill", "--mfu", "0", "--hw", "h100"],
    ["model", "llama3-70b", "--prefill", "--mfu", "1.5", "--hw", "h100"],
    ["model", "llama3-70b", "--train", "--strategy", FSDP_TP, "--hw", "h100", "--chips", "256", "--batch", "1048576"],
    ["model", "llama3-8b", "--decode", "--batch", "8", "--chips", "3", "--hw", "h100"],
    ["derive", "A[I_{data,model}, J]", "--mesh", "data=2,model=2"],
    ["latex", "A[I_{data}, J_{model}] * B[J_{model}, K] -> C[I_{data}, K]", "--mesh", "data=2,model=2"],
    ["derive", "A[I_X, J] -> A[J, I]", "--mesh", "X=4"],
    ["derive", "A[I_data, J]"],
    ["derive", "A[I, J_X] * B[J, K] -> C[I, K]", "--moves", "bogus"],
    ["derive", "A[I, J_X] * B[J, K] -> C[I, K]", "--dims", "Q=4"],
    ["derive", "A[I, J_X] * B[J, K] -> C[I, K]", "--dims", "I=4,,J=8"],
    ["check", "derivations/no_such_file.sc"],
    ["model"],
    ["model", "--list"],
    ["plot", str(ROOT / "examples" / "mlp.sc"), "--vs", "B", "--hw", "tpu-v5p", "-o", "/tmp/symcost-unsharded.png"],
    ["solve", "A[I, J_X] * B[J, K] -> C[I, K]", "--for", "I", "--mesh", "X=4", "--dims", "J=8192,K=64",
     "--hw", "tpu-v5e"],
]


@pytest.mark.parametrize("argv, says", [
    (["train", "llama3-8b", "--hw", "h100", "--chips", "8", "--batch", "64", "--seq", "0"], "--seq must be positive, not 0"),
    (["serve", "llama3-8b", "--decode", "--hw", "h100", "--chips", "8", "--batch", "8", "--seq", "-3"],
     "--seq must be positive, not -3"),
    (["model", "llama3-8b", "--train", "--hw", "h100", "--chips", "8", "--batch", "65536", "--seq", "8192",
      "--tokens", "-5"], "--tokens must be positive, not -5"),
    (["train", "llama3-70b", "--hw", "tpu-v5p", "--chips", "64", "--batch", "4194304", "--seq", "4096", "--memory",
      "book", "--checkpoints-per-layer", "-1"], "--checkpoints-per-layer is a count of saved tensors, at least 0, not -1"),
    # a count of 0 once divided the chips or the sequences by zero (an internal error), or read as not given
    *[(["train", "llama3-8b", "--hw", "h100", "--chips", "8", "--batch", "65536", f"--{k}", "0"],
       f"--{k} must be at least 1, not 0") for k in ("tp", "pp", "dp", "cp", "ep", "microbatch", "interleave")],
    (["train", "llama3-8b", "--hw", "h100", "--chips", "8", "--batch", "65536", "--cp", "-2"],
     "--cp must be at least 1, not -2"),
    (["train", "llama3-8b", "--hw", "h100", "--chips", "8", "--batch", "65536", "--search", "--tp", "0"],
     "--search chooses the run itself; drop --tp"),
])
def test_model_numbers_out_of_range_are_usage_errors(capsys, argv, says):
    """A context of no tokens once divided by zero in ``train`` (an internal error): every model command
    checks its numbers first and names the flag."""
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.strip() == f"symcost: {says}"


@pytest.mark.parametrize("argv, says", [
    (["model", "llama3-8b", "--mesh", "Y=8"], "--mesh is read by --decode, --prefill and --frontier (the serving "
     "mesh), and --train with --strategy (its mesh): drop --mesh or add one of them"),
    (["model", "llama3-8b", "--batch", "8"], "--batch is read by --train (tokens), --decode, --prefill and --program "
     "(sequences): drop --batch or add one of them"),
    (["model", "llama3-8b", "--hw", "h100", "--chips", "8", "--strategy", "derivations/fsdp.sc"],
     "--strategy is read by --train without --search: drop --strategy or add one of them"),
    (["train", "llama3-8b", "--hw", "h100", "--chips", "8", "--batch", "65536", "--search", "--tokens", "1e12"],
     "--tokens is read by --train without --search, not by --train --search: drop --tokens"),
    (["serve", "llama3-8b", "--decode", "--hw", "h100", "--chips", "8", "--batch", "8", "--tp", "8"],
     "--tp is read by --train, not by --decode: drop --tp"),
    (["serve", "llama3-8b", "--decode", "--hw", "h100", "--chips", "8", "--batch", "8", "--latency", "2ms"],
     "--latency is read by --decode --search and --prefill --search, not by --decode: drop --latency"),
    (["train", "llama3-8b", "--hw", "h100", "--chips", "8", "--batch", "65536", "--mesh", "Y=8"],
     "--mesh is read by --decode, --prefill and --frontier (the serving mesh), and --train with --strategy (its "
     "mesh), not by --train: drop --mesh"),
    (["train", "llama3-8b", "--hw", "h100", "--chips", "8", "--batch", "65536", "--elementwise"],
     "--elementwise is read by --program, not by --train: drop --elementwise"),
])
def test_a_flag_no_asked_mode_reads_is_refused_not_dropped(capsys, argv, says):
    """``model NAME --mesh Y=8`` printed the model's counts and nothing on that mesh, and ``serve --decode
    --tp 8`` the default mesh's step: a flag is read by the modes :data:`model_options.READ_BY` names, and
    given to any other it is an error that says which read it."""
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.strip() == f"symcost: {says}"


@pytest.mark.parametrize("argv, says", [
    (["derive", "examples/mlp.sc", "--mesh", "X=4", "--params", "W_in"],
     "--params is read by the backward pass: add --backward or drop --params"),
    (["latex", "examples/mlp.sc", "--mesh", "X=4", "--reuse", "all"],
     "--reuse is read by the backward pass: add --backward or drop --reuse"),
    (["search", "examples/mlp.sc", "--mesh", "X=4,Y=2", "--hw", "tpu-v5p", "--range", "1:10"],
     "--range is the span --vs sweeps: give --vs too (e.g. --vs B --range 1e4:1e8)"),
    (["search", "examples/mlp.sc", "--mesh", "X=4,Y=2", "--hw", "tpu-v5p", "--exact", "--every"],
     "--exact solves for the best plan and --every prices every candidate: give one of them"),
    (["solve", "derivations/fsdp.sc", "--mesh", "X=4", "--for", "B", "--dims", "B=4096"],
     "--dims binds B, the size --for solves for: drop B from --dims"),
    (["optimize", "derivations/fsdp_tp.sc", "--vary", "X,Y", "--chips", "64", "--dims", "X=4"],
     "--dims binds X, a mesh axis --vary chooses: drop X from --dims"),
    (["optimize", "derivations/fsdp_tp.sc", "--vary", "X,X", "--chips", "64"],
     "--vary takes two different mesh axes, not X twice"),
    (["latex", "examples/mlp.sc", "--mesh", "X=4", "--markdown", "--fragment"],
     "--fragment is the LaTeX body without its preamble; Markdown has none: drop one of them"),
])
def test_a_flag_the_command_would_not_read_is_refused(capsys, argv, says):
    """Each of these once printed an answer without the flag: the forward plan without the parameters asked
    for, the search without the range, the solution for a size bound to a number."""
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.strip() == f"symcost: {says}"


@pytest.mark.parametrize("argv, says", [
    (["plot", "llama3-8b", "--hw", "h100", "--mesh", "X=4", "-o", "/tmp/symcost-frontier.png"],
     "--mesh is not read by a frontier plot (it reads --hw, --chips, --dtype, --seq): drop --mesh"),
    (["plot", "In[B_X, D_Y] *_D W[D_Y, F] -> Out[B_X, F]", "--mesh", "X=4,Y=2", "--dims", "B=1024,D=8192,F=8192",
      "--hw", "tpu-v5p", "--chips", "8", "-o", "/tmp/symcost-roofline.png"],
     "--chips is not read by a roofline plot (it reads --mesh, --dims, --hw): drop --chips"),
    (["plot", "derivations", "--vs", "B", "--hw", "tpu-v5p", "--seq", "4096", "-o", "/tmp/symcost-strategies.png"],
     "--seq is not read by a strategies plot (it reads --vs, --chips, --dims, --hw): drop --seq"),
])
def test_a_plot_refuses_what_its_kind_does_not_read(capsys, argv, says):
    """A strategies plot takes the best split of --chips (not --mesh), a roofline one plan on --mesh, a
    frontier a slice of --chips: each flag went to the kind that reads it or was dropped without a word."""
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.strip() == f"symcost: {says}"


@pytest.mark.parametrize("argv, says", [
    (["measure", "A[I_X, J] * B[J, K] -> C[I, K]", "--mesh", "X=2", "--batch", "8"],
     "--batch is read by a model's layer stack (--decode, --prefill or --train), not a program's plan: drop --batch"),
    (["measure", "llama3-8b", "--decode", "--batch", "8", "--mesh", "X=2"],
     "--mesh is read by a program's plan, not a model's layer stack: drop --mesh"),
    (["measure", "A[I_X, J] * B[J, K] -> C[I, K]", "--mesh", "X=2", "--values", "1,2"],
     "--values are the points of a sweep: name the swept size with --vs (e.g. --vs B)"),
])
def test_measure_refuses_what_it_would_not_read(capsys, argv, says):
    """Checked before any device is asked for (no JAX needed to say so)."""
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.strip() == f"symcost: {says}"


def test_a_model_with_a_chip_alone_says_its_critical_batch(capsys):
    """``model NAME --hw CHIP`` printed the model's counts and dropped the chip: it now says the batch above
    which decode matmuls are compute-bound there, as every mode on a chip does (C / W_hbm, book Part 7)."""
    code, out, _ = run(capsys, "model", "llama3-8b", "--hw", "h100")
    assert code == 0 and out.splitlines()[-1] == "  decode matmuls compute-bound above B = 295 on h100"
    code, out, _ = run(capsys, "model", "llama3-8b", "--hw", "h100", "--json")
    data = json.loads(out)
    assert data["hardware"] == "h100" and data["critical_batch"] == pytest.approx(989e12 / 3.35e12, rel=1e-9)


def test_every_flag_some_mode_reads_is_accepted_there(capsys):
    """The same flags where a mode reads them: the decode step on the mesh given, the run with its knobs."""
    code, out, _ = run(capsys, "serve", "llama3-8b", "--decode", "--hw", "h100", "--chips", "8", "--batch", "8",
                       "--mesh", "Y=8")
    assert code == 0 and "(mesh Y=8, Z=1)" in out
    code, out, _ = run(capsys, "train", "llama3-8b", "--hw", "h100", "--chips", "8", "--batch", "65536", "--tp", "8")
    assert code in (0, 1) and "TP 8" in out


def test_plotting_an_expression_without_parameters_against_a_size_says_why(capsys):
    """``plot EXPR --vs I`` draws the expression as a training strategy (the book's Part 5 figure, forward
    and backward): without a parameter there is nothing to train, and the error says that is why."""
    pytest.importorskip("matplotlib")
    code, _, err = run(capsys, "plot", "A[I_X, J] * B[J, K] -> C[I, K]", "--vs", "I", "--hw", "tpu-v5p",
                       "-o", "/tmp/symcost-no-params.png")
    assert code == 2 and err.strip() == ("symcost: nothing to plot: program: drawn as a training strategy (forward "
                                         "and backward): the program declares no parameters; write e.g. "
                                         "'param W[D_X, F]' or pass --params")


SLOW_CRASHES = (0, 1, 6)    # optimize over every split of 256 chips; a training strategy's backward pass at 256


@pytest.mark.parametrize("argv", [pytest.param(a, marks=pytest.mark.slow) if i in SLOW_CRASHES else a
                                  for i, a in enumerate(CRASHES)],
                         ids=[" ".join(a[:2]) + f" #{i}" for i, a in enumerate(CRASHES)])
def test_no_internal_error(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code in (0, 1, 2), err
    assert "Traceback" not in err and "internal error" not in err
    if code:
        first = err.strip().splitlines()[0]
        assert first.startswith("symcost: ") and first.rstrip().endswith((".", ")", "]", ":")) or len(first) > 20


def test_binary_and_bom_files(capsys, tmp_path):
    binary = tmp_path / "bin.sc"
    binary.write_bytes(b"\xff\xfe\x00\x01binary")
    code, _, err = run(capsys, "check", binary)
    assert code == 2 and "not UTF-8 text" in err
    bom = tmp_path / "bom.sc"
    bom.write_bytes("\ufeffA[I_X, J] * B[J, K] -> C[I_X, K]\n".encode("utf-8"))
    code, out, _ = run(capsys, "check", bom, "--mesh", "X=4")
    assert code == 0 and out.startswith("valid: A[I_X, J]")


def test_program_from_stdin(capsys, monkeypatch):
    import io
    monkeypatch.setattr("sys.stdin", io.StringIO("A[I_X, J] * B[J, K] -> C[I_X, K]\n"))
    code, out, _ = run(capsys, "check", "-", "--mesh", "X=4")
    assert code == 0 and "valid" in out


def test_mistyped_path_is_not_parsed_as_notation(capsys):
    code, _, err = run(capsys, "check", "derivations/no_such_file.sc")
    assert code == 2 and "no such file: derivations/no_such_file.sc" in err
    assert "unexpected character" not in err


def test_version(capsys):
    from symcost import __version__
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"symcost {__version__}"


def test_errors_under_json_are_json(capsys):
    code, out, _ = run(capsys, "check", "A[I_X, J_X]", "--json")
    err = json.loads(out)["error"]
    assert code == 1 and err["kind"] == "ShardingError" and err["exit_code"] == 1
    assert err["line"] == 1 and err["column"] == 8 and "two dimensions of A (I and J)" in err["message"]


def test_dims_must_name_the_programs_sizes(capsys):
    code, _, err = run(capsys, "derive", "A[I, J_X] * B[J, K] -> C[I, K]", "--dims", "Q=4")
    assert code == 2 and "--dims binds Q, which the program does not use" in err
    code, _, err = run(capsys, "search", str(ROOT / "examples" / "mlp.sc"), "--mesh", "X=4", "--hw", "h100", "--dims",
                       "Q=5,B=1024")       # search too, before any candidate is priced
    assert code == 2 and "--dims binds Q, which the program does not use; its sizes are B, D, F, X" in err
    if importlib.util.find_spec("jax") is not None:      # measure too, before anything runs on a device
        code, _, err = run(capsys, "measure", "A[I, J] * B[J, K] -> C[I, K]", "--dims", "I=64,J=64,K=64,Q=2",
                           "--hw", "h100", "--runs", "1")
        assert code == 2 and "--dims binds Q, which the program does not use; its sizes are I, J, K" in err
    code, _, err = run(capsys, "derive", "A[I, J_X] * B[J, K] -> C[I, K]", "--dims", "I=4,,J=8")
    assert code == 2 and "empty item" in err


def test_moves_modes_listed(capsys):
    code, _, err = run(capsys, "derive", "A[I, J_X] * B[J, K] -> C[I, K]", "--moves", "bogus")
    assert code == 2 and "use auto, all, strategy, none" in err


def test_multi_letter_axis_hint(capsys):
    code, _, err = run(capsys, "derive", "A[I_data, J]")
    assert code == 1 and "I_{data}" in err


# ------------------------------------------------------------------------- symbols that clash

def test_link_count_named_like_a_dimension(capsys):
    code, _, err = run(capsys, "derive", "A[B, J_X] * W[J, K] -> C[B, K]", "--mesh", "X:B")
    assert code == 2 and "link count B has the name of dimension B" in err


def test_chips_symbol_named_like_a_dimension(capsys):
    code, _, err = run(capsys, "optimize", FSDP_TP, "--chips", "B", "--vary", "X,Y")
    assert code == 2 and "B" in err and "chips" in err


# ------------------------------------------------------------------------- solving in the symbol's domain

def test_negative_root_is_never_balanced(capsys):
    code, out, _ = run(capsys, "solve", "A[I, J_X] * B[J, K] -> C[I, K]", "--for", "I", "--mesh", "X=4",
                       "--dims", "J=8192,K=64", "--hw", "tpu-v5e")
    assert code == 0
    assert "never balanced for positive I (its root, -83.32, is not positive)" in out
    assert "with the numbers: never" in out
    code, out, _ = run(capsys, "solve", "A[I, J_X] * B[J, K] -> C[I, K]", "--for", "I", "--mesh", "X=4",
                       "--dims", "J=8192,K=64", "--hw", "tpu-v5e", "--json")
    assert code == 0 and "-83" not in json.dumps(json.loads(out).get("critical", {}))


# ------------------------------------------------------------------------- fits

def test_decode_that_does_not_fit_is_not_an_answer(capsys):
    code, out, _ = run(capsys, "model", "llama3-70b", "--decode", "--hw", "tpu-v5e", "--chips", "8", "--batch", "32")
    assert code == 1 and "DOES NOT FIT" in out and "tokens/s" not in out
    code, out, _ = run(capsys, "model", "llama3-70b", "--decode", "--hw", "tpu-v5e", "--chips", "8", "--batch", "32",
                       "--json")
    d = json.loads(out)
    assert code == 1 and d["fits"] is False and d["decode"]["fits"] is False
    # 70.55e9 parameters in bf16 plus 32 caches of 8192 tokens at 327,680 bytes a token
    # (a chip's eighth: the layout splits every weight and the caches over the 8 chips)
    assert 8 * d["decode"]["memory_bytes"] == pytest.approx(2 * d["params"]["total"] + 32 * 8192 * 327_680)


@pytest.mark.parametrize("argv, why", [
    # 405B in bf16 is 102 GB a chip on 8 H100s: the weights alone are over the 80 GB
    (["llama3-405b", "--seq", "4096"], "the weights alone do not fit: more chips or a smaller --dtype"),
    # 70B's 17.6 GB a chip fit; one sequence's cache at a billion tokens (327,680 bytes each) does not
    (["llama3-70b", "--seq", "999999999"], "the weights take 17.6 GB a chip, and one sequence's KV cache at "
     "context 999999999 does not fit beside them: a shorter --seq, more chips or a smaller --kv-dtype"),
    (["llama3-70b", "--seq", "8192", "--batch", "512"], "the largest batch that fits is 185"),
])
def test_decode_that_does_not_fit_says_what_would(capsys, argv, why):
    """It said "the weights alone do not fit" whenever no batch fit, though at a long context it is the
    first sequence's KV cache that does not (the weights held 17.6 of the 80 GB)."""
    code, out, _ = run(capsys, "serve", *argv[:1], "--decode", "--hw", "h100", "--chips", "8",
                       *(argv[1:] if "--batch" in argv else [*argv[1:], "--batch", "8"]))
    assert code == 1 and why in out
    code, out, _ = run(capsys, "serve", *argv[:1], "--decode", "--hw", "h100", "--chips", "8", "--json",
                       *(argv[1:] if "--batch" in argv else [*argv[1:], "--batch", "8"]))
    d = json.loads(out)["decode"]
    held = d["weight_bytes_held"]
    assert (held > 80e9) == ("weights alone" in why) and held <= d["memory_bytes"]


def test_prefill_takes_the_batch_and_fits(capsys):
    code, out, _ = run(capsys, "model", "llama3-8b", "--prefill", "--batch", "4", "--hw", "h100", "--json")
    one = json.loads(out)["prefill"]
    code1, out1, _ = run(capsys, "model", "llama3-8b", "--prefill", "--hw", "h100", "--json")
    single = json.loads(out1)["prefill"]
    assert code == code1 == 0 and one["batch"] == 4
    assert one["flops"] == pytest.approx(4 * single["flops"]) and one["fits"]


def test_training_memory_in_the_weights_dtype(capsys):
    _, out, _ = run(capsys, "model", "llama3-8b", "--train", "--hw", "h100", "--chips", "64", "--batch", "524288",
                    "--dtype", "fp8", "--json")
    t = json.loads(out)
    assert t["train"]["memory_bytes"]["params"] == pytest.approx(t["params"]["total"] * 1)


def test_mfu_is_a_fraction(capsys):
    for bad in ("0", "1.5", "-0.1"):
        code, _, err = run(capsys, "model", "llama3-70b", "--prefill", "--mfu", bad, "--hw", "h100")
        assert code == 2 and "in (0, 1]" in err


def test_backward_plan_that_does_not_fit(capsys):
    code, out, _ = run(capsys, "derive", FSDP, "--backward", "--mesh", "X=8", "--hw", "h100",
                       "--dims", "B=1048576,D=65536,F=262144")
    assert "DOES NOT FIT" in out


@pytest.mark.slow
def test_strategy_check_agrees_with_derive(capsys):
    """model --train --strategy prices the strategy exactly as derive --backward does at the mesh it
    chooses (one pricing path)."""
    from symcost.api import derive
    code, out, _ = run(capsys, "model", "llama3-70b", "--train", "--strategy", FSDP_TP, "--hw", "h100",
                       "--chips", "256", "--tp", "2", "--batch", "1048576", "--json")
    s = json.loads(out)["train"]["strategy"]
    mesh = ",".join(f"{k}={v}" for k, v in s["mesh"].items())
    plan = derive(open(FSDP_TP).read(), mesh=mesh, dims={"B": 1048576, "D": 8192, "F": 28672}, hw="h100",
                  backward=True)
    assert s["t_comms"] == pytest.approx(plan.evaluate(plan.t_comms))
    assert s["t_step"] == pytest.approx(plan.evaluate(plan.t_step))


# ------------------------------------------------------------------------- optimize

@pytest.mark.slow
def test_optimize_agrees_with_derive_and_places_the_split(capsys):
    from symcost.api import derive
    code, out, _ = run(capsys, "optimize", FSDP_TP, "--chips", "256", "--vary", "X,Y", "--hw", "h100",
                       "--dims", "B=1048576,F=32768,D=8192", "--json")
    r = json.loads(out)
    chosen = r["chosen"]
    assert code == 0 and chosen["X"] * chosen["Y"] == 256
    plan = derive(open(FSDP_TP).read(), mesh=f"X={chosen['X']},Y={chosen['Y']}", hw="h100",
                  dims="B=1048576,F=32768,D=8192")
    assert chosen["t_comms"] == pytest.approx(plan.evaluate(plan.t_comms))
    # 256 H100s: the inner axis stays in the 8-GPU NVLink domain, the outer crosses InfiniBand
    assert r["placement"] == {"X": "dcn", "Y": "nvlink"}
    assert r["numeric"]["X"] > 1 and r["numeric"]["Y"] > 1


def test_optimize_says_how_its_best_split_was_placed(capsys):
    """FSDP+TP on 256 v5p chips: the closed form's optimum (one link an axis) is X = 90.5, Y = 2.8, yet the
    best integer split was X=256, Y=1 with no word of why. Each split is derived on the torus it is laid on,
    where X=256 takes three links and a wraparound; the output names that placement (JSON: ``placed``)."""
    args = ["optimize", FSDP_TP, "--chips", "256", "--vary", "X,Y", "--hw", "tpu-v5p", "--dims",
            "B=1048576,D=8192,F=32768"]
    code, out, _ = run(capsys, *args)
    assert code == 0 and "X_opt = 16*sqrt(B)/sqrt(F) = 90.51" in out
    assert "best integer split: X=256, Y=1" in out
    assert "  placed as X=256:3:ici:wrap (--mesh syntax): the closed form above takes one link an axis" in out
    code, out, _ = run(capsys, *args, "--json")
    chosen = json.loads(out)["chosen"]
    assert chosen["placed"] == ["X=256:3:ici:wrap", "Y=1:ici"]
    from symcost.api import derive
    plan = derive(open(FSDP_TP).read(), mesh="X=256:3:ici:wrap,Y=1", hw="tpu-v5p", dims="B=1048576,D=8192,F=32768")
    assert plan.evaluate(plan.t_comms) == pytest.approx(chosen["t_comms"], rel=1e-12)
    code, out, _ = run(capsys, "optimize", FSDP_TP, "--chips", "8", "--vary", "X,Y", "--hw", "h100", "--dims",
                       "B=65536,D=8192,F=32768")          # NVLink: one switch, nothing to say
    assert code == 0 and "placed as" not in out


def test_the_alternatives_of_a_program_are_shown_statement_by_statement(capsys):
    """A program of several statements listed "the 4 cheapest" of all its statements' alternatives, which
    were the first statement's four (each statement's are kept cheapest first), with no plan to compare them
    with. Each statement now shows the plan's own steps and time, then the cheapest other plan weighed for
    it; JSON names each alternative's statement and the plan's steps for it."""
    prog = "T[B_X, F_Y] = In[B_X, D] *_D W1[D, F_Y]\nOut[B_X, D] = T[B_X, F_Y] *_F W2[F_Y, D]"
    args = ["derive", prog, "--mesh", "X=4,Y=2", "--dims", "B=256,D=1024,F=4096", "--hw", "h100"]
    code, out, _ = run(capsys, *args)
    lines = out[out.index("alternatives considered"):].splitlines()
    assert code == 0 and lines[0].startswith("alternatives considered (12 for 2 statements; --json lists them all)")
    assert lines[1] == "  T: einsum -> T[B_X, F_Y]; t_step = 1.37 us (6 others)"
    assert lines[2] == "  - AllGather_X(In); einsum -> T[B, F_Y]"
    assert lines[4].startswith("  Out: einsum -> Out[B_X, D]{U_Y}; AllReduce_Y(Out); t_step = ")
    code, out, _ = run(capsys, *args, "--json")
    alts = json.loads(out)["alternatives"]
    assert [a["statement"] for a in alts] == ["T"] * 6 + ["Out"] * 6
    assert alts[0]["chosen"] == "einsum -> T[B_X, F_Y]" and alts[0]["ranked"]["plan_t_step"] == pytest.approx(1.3694e-6, rel=1e-4)
    code, out, _ = run(capsys, "derive", "A[I, J_X] * B[J_X, K] -> C[I, K]", "--mesh", "X=4")
    assert "alternatives considered (" in out and "statements" not in out      # one statement: as before


# ------------------------------------------------------------------------- notation honesty

def test_major_axis_gather_is_not_silently_a_permute(capsys):
    code, out, _ = run(capsys, "derive", "AllGather_X(A[I_XY, J]) -> A[I_Y, J]", "--mesh", "X=2,Y=2")
    assert code == 0 and "Permute_XY" in out and "not written" in out


def test_transposes_refused(capsys):
    code, _, err = run(capsys, "derive", "A[I_X, J] -> A[J, I]", "--mesh", "X=4")
    assert code == 1 and "transposes are not supported" in err


def test_alternatives_count_and_wording(capsys):
    code, out, _ = run(capsys, "derive", "A[I_X, J_Y] * B[J_Y, K] -> C[I_X, K]", "--mesh", "X=2,Y=4")
    head = next(l for l in out.splitlines() if l.startswith("alternatives considered"))
    considered = int(head.split("(")[1].split(";")[0])
    shown = int(head.split("the ")[1].split(" cheapest")[0]) if "cheapest shown" in head else considered
    listed = sum(1 for l in out.splitlines() if l.startswith("  - "))
    assert listed == shown <= considered
    assert "when always" not in out and "moves less data" not in out


def test_latex_multi_letter_axes_and_plain_bandwidth(capsys):
    code, out, _ = run(capsys, "latex", "A[I_{data}, J_{model}] * B[J_{model}, K] -> C[I_{data}, K]",
                       "--mesh", "data=2,model=2")
    assert code == 0 and "I_{\\mathrm{data}}" in out and "I_{dat}" not in out and "dat}, model" not in out
    assert out.count("{") == out.count("}")
    assert "\\bm" not in out and "\\boldsymbol" not in out


def test_latex_and_export_json(capsys, tmp_path):
    code, out, _ = run(capsys, "latex", "A[I_X, J] * B[J, K] -> C[I_X, K]", "--mesh", "X=4", "--json")
    d = json.loads(out)
    assert code == 0 and d["format"] == "latex" and "\\begin" in d["text"]
    target = tmp_path / "layer.py"
    code, out, _ = run(capsys, "export-jax", "A[I, J_X] * B[J_X, K] -> C[I, K]", "--mesh", "X=4",
                       "--dims", "I=64,J=128,K=32", "-o", target, "--json")
    d = json.loads(out)
    assert code == 0 and d["collectives"] == ["AllReduce_X(C[I, K]{U_X}) -> C[I, K]"]
    text = target.read_text()
    assert "jax.devices('cpu')" in text or 'jax.devices("cpu")' in text


@pytest.mark.slow
def test_bounded_search_says_so():
    import symcost
    plan = symcost.derive("A[I_XY, J_ZV] * B[J_ZV, K_WU] -> C[I_XYZ, K_WU]", mesh="X=2,Y=2,Z=2,V=2,W=2,U=2")
    assert any("the layout search was bounded (6 mesh axes)" in n for n in plan.notes)
    assert [s.kind for s in plan.collectives] == ["ReduceScatter", "AllGather"]


@pytest.mark.slow
def test_four_axes_stay_exact():
    import symcost
    plan = symcost.derive("A[I_XY, J_ZV] * B[J_ZV, K] -> C[I_XY, K]", mesh="X=2,Y=2,Z=2,V=2")
    assert plan.notes == ()
    assert [(s.kind, s.axes) for s in plan.collectives] == [("AllReduce", ("Z", "V"))]


# ------------------------------------------------------------------------- physical meshes

@pytest.mark.parametrize("mesh,hw,says", [
    ("X=4:nvlink", "tpu-v5e", "tpu-v5e has no NVLink"),
    ("X=32,Y=32", "tpu-v5e", "a slice holds at most 256"),
    ("X=8:wrap", "h100", ":wrap means nothing there"),
    ("X=16:nvlink", "h100", "h100's holds 8"),
])
def test_impossible_meshes_are_errors(capsys, mesh, hw, says):
    code, _, err = run(capsys, "derive", "A[I_X, J] * B[J, K] -> C[I_X, K]", "--mesh", mesh, "--hw", hw)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1


def test_axes_laid_on_the_fast_domain_first(capsys):
    code, out, _ = run(capsys, "derive", "A[I_X, J] * B[J, K] -> C[I_X, K]", "--mesh", "X=32,Y=8", "--hw", "h100")
    assert code == 0 and "mesh: X=32:dcn,Y=8:nvlink" in out
    assert "note: Y=8 runs inside the 8-GPU NVLink domain; X=32 crosses nodes over InfiniBand" in out


def test_part5_figure_crossings():
    """The Part 5 figure as plotted: pure FSDP on a full 16x16x16 v5p pod turns compute-bound at 850 tokens
    per chip (the book's number: the pod's axis keeps its three links). Mixed FSDP+TP crosses at 3.27e5
    tokens; the book reads "near 4e5" off 4096 * 2550^2 / (2 * 8192 * 4), which takes 4 links in all and
    the continuous optimum split. symcost derives each integer split on the pod's torus, where X=128,
    Y=32 span two torus dimensions each (2 links apiece), and takes the best at each batch."""
    import numpy as np
    from symcost.export.plot import strategy_curves
    from symcost.hardware import hardware

    def crossing(name, lo, hi):
        text = (ROOT / "derivations" / f"{name}.sc").read_text()
        xs, t_c, t_m = map(np.array, strategy_curves([(name, text)], "B", hardware("tpu-v5p"), 4096, points=400,
                                                     lo=lo, hi=hi)[name])
        return xs[np.argmax(t_m >= t_c)]

    assert crossing("fsdp", 3.3e6, 3.7e6) / 4096 == pytest.approx(850, rel=2e-3)
    assert crossing("fsdp_tp", 2e5, 5e5) == pytest.approx(3.27e5, rel=5e-3)


def test_plot_of_a_model_that_does_not_fit(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "frontier.png"
    code, _, err = run(capsys, "plot", "llama3-405b", "--hw", "tpu-v5e", "--chips", "8", "-o", out)
    assert code == 1 and "does not fit on 8 x tpu-v5e at any batch" in err and not out.exists()


@pytest.mark.parametrize("batch, says", [
    ("64", "--batch 64 tokens is less than one sequence of --seq 4096 (--batch counts tokens; --sequences 64 "
           "gives 64 sequences of 4,096 tokens)"),
    ("6000", "--batch 6000 tokens is not a whole number of sequences of --seq 4096: 4,096 or 8,192 tokens is"),
])
def test_a_batch_of_tokens_that_is_not_whole_sequences_says_what_is(capsys, batch, says):
    """``--batch`` counts tokens (the book's B); a user who meant 64 sequences is told of ``--sequences``."""
    code, _, err = run(capsys, "train", "llama3-8b", "--hw", "h100", "--chips", "8", "--batch", batch, "--seq", "4096")
    assert code == 2 and says in err


@pytest.mark.parametrize("argv", [
    ["calibrate", "--out", "/nonexistent-dir/mine.toml"],
    ["measure", "A[I_X, J] * B[J, K] -> C[I_X, K]", "--mesh", "X=1", "--dims", "I=64,J=64,K=64", "--vs", "I",
     "--plot", "/nonexistent-dir/sweep.png"],
    ["plot", str(ROOT / "derivations" / "tp.sc"), "--hw", "tpu-v5p", "-o", "/nonexistent-dir/tp.png"],
])
def test_an_output_that_cannot_be_written_is_refused_before_the_work(capsys, monkeypatch, argv):
    """``calibrate --out`` into a missing folder measured the devices for minutes, then could not save."""
    from symcost.device import calibrate, runtime

    def ran(*a, **k):
        raise AssertionError("the work ran before the output was checked")
    monkeypatch.setattr(calibrate, "calibrate", ran)
    monkeypatch.setattr(runtime, "device_info", ran)
    code, _, err = run(capsys, *argv)
    assert code == 2 and "no folder /nonexistent-dir" in err and "Traceback" not in err


def test_an_output_that_is_a_folder_is_refused(capsys, tmp_path):
    (tmp_path / "x.toml").mkdir()
    code, _, err = run(capsys, "calibrate", "--out", str(tmp_path / "x.toml"))
    assert code == 2 and f"--out {tmp_path / 'x.toml'} is a folder: name a file in it" in err


def _help(capsys, command: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_train_and_serve_help_list_what_they_read(capsys):
    """`symcost train --help` listed --decode, --prefill, --latency and --program, and `serve --help` every
    pipeline knob under "a training run as launched (with --train)", its own --search among them described
    as choosing a TP x PP x DP split. Each now lists what it reads, --search as it searches; the other's
    flags are still refused with a word on which command reads them."""
    train, serve, model = (_help(capsys, c) for c in ("train", "serve", "model"))
    for flag in ("--decode", "--prefill", "--frontier", "--latency", "--program", "--elementwise", "--mfu"):
        assert flag not in train and flag in model
    for flag in ("--tp", "--pp", "--strategy", "--recompute", "--max-cp", "--train", "--tokens", "--vs"):
        assert flag not in serve and flag in model
    assert "--tp" in train and "--latency" in serve and "--search" in train and "--search" in serve
    assert "choose the mesh and the batch" in serve and "TP x PP x DP" not in serve
    assert "TP x PP x DP" in train and "(with --train" not in train
    code, _, err = run(capsys, "train", "llama3-8b", "--decode", "--hw", "h100")
    assert code == 2 and "serving is `symcost serve`" in err
    code, _, err = run(capsys, "serve", "llama3-8b", "--decode", "--tp", "2", "--hw", "h100", "--batch", "8")
    assert code == 2 and "--tp is read by --train" in err


def test_a_config_json_says_what_reading_it_assumed(capsys, tmp_path):
    """A config.json without model_type, architectures or hidden_act was counted with an ungated MLP (two
    matrices) and untied embeddings without a word: a LLaMA-2 7B config so trimmed came out at 5.3e9
    parameters, not 6.7e9. The text now says what was assumed (the notes reading a config makes, which only
    the JSON carried), and a config naming its model_type is counted as the model it is."""
    cfg = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "intermediate_size": 11008,
           "vocab_size": 32000}
    bare, named = tmp_path / "bare.json", tmp_path / "named.json"
    bare.write_text(json.dumps(cfg))
    named.write_text(json.dumps({**cfg, "model_type": "llama", "hidden_act": "silu"}))
    code, out, _ = run(capsys, "model", bare)
    assert code == 0 and "the MLP taken as ungated" in out and "embeddings taken as two matrices" in out
    assert "5.295e+09 total" in out                       # 32 (2 x 4096 x 11008 + 4 x 4096^2) + 2 x 32000 x 4096
    code, out, _ = run(capsys, "model", named)
    assert code == 0 and "6.738e+09 total" in out and "taken as" not in out
    code, out, _ = run(capsys, "model", "llama3-8b")
    assert "read from" not in out                         # a preset's notes are its documentation, not printed


def test_a_training_run_says_where_its_layer_pads(capsys):
    """A context of 8,191 tokens with sequence parallelism over 8 ranks pads the sequence to 8,192 in the
    layer's plan (its JSON said so under train.layer.plan.padding); the text did not. It does now, once a
    dimension; a run that splits evenly prints no padding line."""
    args = ["train", "llama3-8b", "--hw", "h100", "--chips", "8", "--tp", "8", "--sequences", "8", "--seq-parallel"]
    code, out, _ = run(capsys, *args, "--seq", "8191")
    assert code == 0 and out.count("padding: T = 8,191 over 8 ranks is padded to 8,192 (0.01% of it padding)") == 1
    code, out, _ = run(capsys, *args, "--seq", "8192")
    assert code == 0 and "padding" not in out


def test_a_ragged_decode_batch_says_it_is_padded(capsys):
    """`serve --decode --batch 7` on Y=2,Z=4 priced a step of 8 sequences (the KV cache's batch splits over
    the four Z devices) and printed "batch 7" alone; the text and JSON now say the batch priced."""
    args = ["serve", "llama3-70b", "--decode", "--mesh", "Y=2,Z=4", "--chips", "8", "--hw", "h100"]
    code, out, _ = run(capsys, *args, "--batch", "7")
    assert code == 0 and "padding: batch 7 is priced as 8" in out
    code, out, _ = run(capsys, *args, "--batch", "7", "--json")
    d = json.loads(out)["decode"]
    assert (d["batch"], d["padded_batch"]) == (7, 8)
    code, out, _ = run(capsys, *args, "--batch", "8", "--json")
    assert json.loads(out)["decode"]["padded_batch"] == 8


def test_a_config_folder_says_what_reading_it_assumed(capsys, tmp_path):
    """A folder holding config.json is read as the file is, and says the same."""
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 4096, "num_hidden_layers": 32,
                                                      "num_attention_heads": 32, "intermediate_size": 11008,
                                                      "vocab_size": 32000}))
    code, out, _ = run(capsys, "model", tmp_path)
    assert code == 0 and f"read from {tmp_path / 'config.json'}: no model_type" in out


def test_a_matmul_that_never_turns_compute_bound_is_not_said_to_be_always(capsys):
    """`solve 'A[I_X, J] * B[J, K] -> C[I_X, K]' --for I --dims J=16,K=16 --hw h100` printed "never balanced
    for positive I" and then "compute-bound when ... with the numbers: always": T_math / T_hbm grows with I
    towards J K W_hbm / (C (J + K)) = 0.027 on an h100, never 1. The condition carries that proviso."""
    args = ["solve", "A[I_X, J] * B[J, K] -> C[I_X, K]", "--for", "I", "--mesh", "X=4", "--hw", "h100"]
    code, out, _ = run(capsys, *args, "--dims", "J=16,K=16")
    assert code == 0 and "with the numbers: never" in out
    assert "compute-bound when: (J*K*W_hbm > C*J + C*K) & (I >= -4*C*J*K/(C*J + C*K - J*K*W_hbm))" in out
    code, out, _ = run(capsys, *args, "--dims", "J=4096,K=4096", "--json")
    assert code == 0 and json.loads(out)["compute_bound_when_numeric"].startswith("I >= 1379.79")


def test_a_mesh_the_serving_search_names_is_the_mesh_serve_takes(capsys):
    """The serving search on 7 H100s named its best "mesh Z=7, batch 256: step 18.7 ms" (the KV cache's
    batch over Z), while `serve --mesh Z=7` reads its first axis as the heads' (8 key-value heads over 7
    devices, padded to 2 each): 28.1 ms for the same words. The search now writes `Y=1,Z=7`, which `--mesh`
    reads as the search priced it (here the same step to the last digit: the layout `--batch 259` plans is
    the one the search planned at 64); its batches are those the cache's batch axes divide (256 padded to 259
    costs the same and serves three more), and a chip's memory is its padded block of the cache."""
    args = ["serve", "llama3-8b", "--hw", "h100", "--chips", "7", "--decode"]
    code, out, _ = run(capsys, *args, "--search", "--latency", "20ms", "--json")
    best = json.loads(out)["search"]["top"][0]
    assert code == 0 and (best["mesh"], best["batch"]) == ("Y=1,Z=7", 259)
    code, out, _ = run(capsys, *args, "--mesh", best["mesh"], "--batch", str(best["batch"]), "--json")
    d = json.loads(out)["decode"]
    assert code == 0 and d["step_time"] == pytest.approx(best["step_time"], rel=1e-12)
    assert d["memory_bytes"] == pytest.approx(best["memory_bytes"], rel=1e-12) and d["padded_batch"] == 259
    # a chip holds 37 sequences' caches whole (all eight key-value heads): 37 x 8,192 x 131,072 bytes
    assert d["memory_bytes"] - d["weight_bytes_held"] == 37 * 8192 * 131072
    code, out, _ = run(capsys, *args, "--mesh", "Z=7", "--batch", "7", "--json")
    d = json.loads(out)["decode"]
    # heads over 7 devices: each holds 2 of the 8 key-value heads of every sequence
    assert code == 0 and d["memory_bytes"] - d["weight_bytes_held"] == 7 * 8192 * 131072 * 2 / 8


def test_a_strategy_is_checked_for_a_run_given_in_sequences(capsys):
    """`train ... --sequences 8 --seq 4096 --strategy derivations/fsdp_tp.sc` was an internal error (the
    strategy's batch read from --batch alone): it is the same check as --batch 32768."""
    args = ["train", "llama3-8b", "--hw", "h100", "--chips", "8", "--seq", "4096", "--strategy",
            str(ROOT / "derivations" / "fsdp_tp.sc"), "--mesh", "X=4,Y=2", "--zero", "3", "--json"]
    code, out, err = run(capsys, *args, "--sequences", "8")
    assert code == 0, err
    by_sequences = json.loads(out)["train"]["strategy"]
    code, out, _ = run(capsys, *args, "--batch", "32768")
    assert code == 0 and json.loads(out)["train"]["strategy"] == by_sequences
    assert by_sequences["mesh"] == {"X": 4, "Y": 2} and by_sequences["compute_bound"]


@pytest.mark.slow     # a prefill search deriving its best 60 rows again, then three prefills derived
def test_a_plain_prefill_shows_the_derived_step_the_search_prices(capsys):
    """`serve --prefill --batch 7 --mesh Y=1,Z=7` printed the book's estimate alone (41.6 ms at 80 % MFU)
    where `--prefill --search` ranks the same mesh and batch at its derived step (60.2 ms, the activations'
    collectives over Z included). Both are shown now, the derived step as the search prices it (58.8 ms since
    the prompt's attention is causal by default, 60.2 ms with ``--mask full``)."""
    args = ["serve", "llama3-8b", "--hw", "h100", "--chips", "7", "--prefill", "--seq", "2048", "--json"]
    code, out, _ = run(capsys, *args, "--search", "--latency", "1s", "--top", "20")
    rows = {(r["mesh"], r["batch"]): r for r in json.loads(out)["search"]["top"] if not r["tokens_over"]}
    code, out, _ = run(capsys, *args, "--batch", "7", "--mesh", "Y=1,Z=7")
    p = json.loads(out)["prefill"]
    assert code == 0 and p["derived"]["step_time"] == pytest.approx(rows["Y=1,Z=7", 7]["step_time"], rel=1e-12)
    assert p["derived"]["bound"] == rows["Y=1,Z=7", 7]["dominant"] and p["seconds"] < p["derived"]["step_time"]
    code, out, _ = run(capsys, *args[:-1], "--batch", "2")
    assert code == 0 and "as --prefill --search prices it: first token 58.8 ms" in out and "7 prompts priced" in out
    code, out, _ = run(capsys, *args[:-1], "--batch", "2", "--mask", "full")
    assert code == 0 and "(full attention)" in out and "as --prefill --search prices it: first token 60.2 ms" in out


def test_a_mixture_of_experts_that_does_not_fit_is_pointed_at_expert_parallelism(capsys):
    """Mixtral on 8 H100s with data parallelism alone: its optimizer state is the largest part, and splitting
    the eight experts over EP ranks shrinks it as TP or PP do; the hint named TP and PP alone. A dense model
    is not pointed at --ep (it has no experts to split), nor a run whose experts are split already."""
    args = ["train", "--hw", "h100", "--chips", "8", "--sequences", "8"]
    code, out, _ = run(capsys, *args[:1], "mixtral-8x7b", *args[1:])
    assert code == 1 and "the largest part is the optimizer: --zero 1, more --tp, --pp or --ep" in out
    code, out, _ = run(capsys, *args[:1], "llama3-70b", *args[1:], "--recompute", "full", "--attention", "flash")
    assert code == 1 and "--ep" not in out.split("DOES NOT FIT")[1]


def test_replicas_that_cannot_divide_the_sequences_say_what_sets_them(capsys):
    """Book Part 6's run (LLaMA 3-70B, 1,024 sequences of 4,096 tokens on 8,960 v5p chips) typed as `train`
    without a split: every chip a data-parallel replica, and the error gave the arithmetic alone. It now says
    that DP is the chips TP, PP and CP leave, and what to choose (a --dp the user gave is left as given)."""
    args = ["train", "llama3-70b", "--hw", "tpu-v5p", "--chips", "8960", "--batch", "4194304", "--seq", "4096"]
    code, _, err = run(capsys, *args)
    assert code == 2 and "(1024 / (8960 x 1) = 0.114286); --dp is the chips --tp x --pp x --cp leave (8,960)" in err
    assert "or let --search choose (it may leave chips idle)" in err
    code, _, err = run(capsys, *args, "--dp", "8960")
    assert code == 2 and err.strip().endswith("= 0.114286)")


def test_a_mixture_of_experts_says_how_wide_its_experts_are(capsys, tmp_path):
    """Qwen3-30B-A3B's config.json: 128 experts 768 wide, its F (6,144) the width of a dense MLP no layer has.
    The first line gave F alone; it now gives the experts' width, and DeepSeek-V3's shared expert and dense
    layers, where they differ from the MLP's."""
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
           "intermediate_size": 6144, "moe_intermediate_size": 768, "num_attention_heads": 32,
           "num_hidden_layers": 48, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
           "num_experts": 128, "num_experts_per_tok": 8, "tie_word_embeddings": False, "hidden_act": "silu"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, out, _ = run(capsys, "model", str(tmp_path / "config.json"))
    assert code == 0 and out.splitlines()[0].endswith("E=128 k=8 F_expert=768")
    assert "parameters: 3.053e+10 total, 3.353e+09 active" in out       # 30.5B and 3.3B, as Qwen publishes
    code, out, _ = run(capsys, "model", "deepseek-v3")
    assert "E=256 k=8 F_expert=2048 shared=1 dense_layers=3;" in out.splitlines()[0]
    code, out, _ = run(capsys, "model", "mixtral-8x7b")
    assert out.splitlines()[0].endswith("E=8 k=2")


def test_symcost_alone_lists_its_commands(capsys):
    """`symcost` with nothing after it said "the following arguments are required: COMMAND" and no more; it
    prints the commands, each with what it does (exit 2, as a usage error)."""
    code, out, err = run(capsys)
    assert code == 2 and out == ""
    assert "derive    the plan: steps with collectives" in err and "serve     decode, prefill" in err


def test_the_model_presets_are_listed_with_their_shapes(capsys):
    """`model --list` printed bare names (`hardware` lists each chip with what it is); each preset now says
    its parameters and shape. `--json` stays the list of names."""
    code, out, _ = run(capsys, "model", "--list")
    lines = {ln.split()[0]: ln for ln in out.splitlines()}
    assert code == 0 and lines["llama3-8b"].endswith("8.03 B parameters: 32 layers of width 4096, 32 heads (8 key-value)")
    assert "46.7 B parameters, 12.9 B active" in lines["mixtral-8x7b"] and "8 experts (2 a token)" in lines["mixtral-8x7b"]
    assert lines["megatron-1t"].split()[1:3] == ["1.01", "T"]
    code, out, _ = run(capsys, "model", "--list", "--json")
    assert code == 0 and "llama3-8b" in json.loads(out)
    code, _, err = run(capsys, "model", "--list", "llama3-8b")     # a name beside --list was dropped silently
    assert code == 2 and "--list lists every preset: drop llama3-8b" in err

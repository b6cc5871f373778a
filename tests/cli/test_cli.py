"""The command line end to end: exit codes, JSON shape, errors without tracebacks."""
import json
import subprocess
import sys

import pytest

from symcost.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_derive_json_contract(capsys):
    code, out, err = run(capsys, "derive", "A[I, J_X] * B[J, K] -> C[I, K]", "--mesh", "X=4",
                         "--dims", "I=256,J=8192,K=8192", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["mesh"] == {"X": 4} and d["expression"] == "A[I, J_X] * B[J, K] -> C[I, K]" and d["hardware"] is None
    # Case 2 ranked at TPU v5p's figures: slicing B and reducing the partial sums beats gathering A
    assert [(s["kind"], s["axes"], s["bytes"], s["phase"]) for s in d["steps"]] == [
        ("Slice", ["X"], "0", "forward"), ("Einsum", ["X"], "I*J/2 + 2*I*K + J*K/2", "forward"),
        ("AllReduce", ["X"], "2*I*K", "forward")]
    assert d["totals"]["flops"] == "I*J*K/2" and d["totals"]["t_math"] == "I*J*K/(2*C)"
    assert d["numeric"] == {"flops": 256 * 8192 * 8192 / 2}     # C is not bound without --hw
    assert [(a["summary"], a["wins_when"]) for a in d["alternatives"]][-1] == (
        "AllGather_X(A); einsum -> C[I, K]", "J < 2*K")


def test_derive_json_symbolic_mesh(capsys):
    code, out, _ = run(capsys, "derive", "In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]",
                       "--mesh", "X,Y", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["mesh"] == {"X": "X", "Y": "Y"}
    assert [s["kind"] for s in d["steps"]] == ["AllGather", "Einsum", "Einsum", "ReduceScatter"]
    assert d["steps"][0]["bytes"] == "2*B*D/X"


def test_check_reports_the_axis_and_the_tensor_with_exit_1(capsys):
    code, out, err = run(capsys, "check", "A[I_X, J_X]")
    assert code == 1
    assert "mesh axis 'X' shards two dimensions of A" in err
    assert "^^^" in err and "Traceback" not in err


def test_notation_error_exit_2(capsys):
    code, _, err = run(capsys, "derive", "A[I_X, J")
    assert code == 2
    assert "line 1, column 9" in err and "^" in err


@pytest.mark.parametrize("argv, words", [
    (["derive", "A[I_X]", "--mesh", "X=0"], "positive size"),
    (["derive", "A[I_X]", "--mesh", "X=4:warp"], "unknown link model"),
    (["derive", "A[I_X]", "--dims", "I=abc"], "positive integer"),
    (["derive", "A[I_X]", "--dims", "I=1e30"], "absurdly large"),
    (["derive", "A[I_X]", "--dims", "I=-3"], "positive"),
    (["derive", "A[I_X]", "--mesh", "X=4,X=2"], "given twice"),
    (["derive", "A[I_Y]", "--mesh", "X=4"], "unknown mesh axis 'Y'"),
])
def test_bad_arguments_are_one_sentence(capsys, argv, words):
    code, _, err = run(capsys, *argv)
    assert code in (1, 2)
    assert words in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, words", [
    (["model", "llama3-8b", "--train", "--hw", "h100", "--chips", "8", "--batch", "nan"], "--batch: not a finite number: 'nan'"),
    (["model", "llama3-8b", "--train", "--hw", "h100", "--chips", "8", "--batch", "1e400"], "not a finite number"),
    (["model", "llama3-8b", "--prefill", "--hw", "h100", "--batch", "4", "--mfu", "inf"], "--mfu: not a finite number"),
    (["model", "llama3-8b", "--train", "--batch", "65536", "--tokens", "many"], "--tokens: invalid number: 'many'"),
    (["search", "examples/mlp.sc", "--mesh", "X=2", "--exact", "--time-limit", "-1"], ">= 0, not -1"),
])
def test_float_options_take_finite_numbers(capsys, argv, words):
    """Python's float reads ``nan`` and ``inf``; a batch, a rate or a time limit is neither (before, ``--batch nan``
    reached the run and ended in an internal error)."""
    try:
        code = main(argv)
    except SystemExit as e:      # argparse's own usage error
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and words in err and "Traceback" not in err


def test_program_file(tmp_path, capsys):
    f = tmp_path / "layer.sc"
    f.write_text("# a layer\nTmp[B_X, F_Y] = In[B_X, D_Y] *_D Win[D, F_Y]\n")
    code, out, err = run(capsys, "derive", str(f), "--mesh", "X=2,Y=2")
    assert code == 0, err
    assert "AllGather_Y(In[B_X, D_Y]) -> In[B_X, D]" in out


def test_solve_data_parallel_critical_batch(capsys):
    code, out, err = run(capsys, "solve", "In[B_X, D] * W[D_X, F] -> Out[B_X, F]", "--mesh", "X",
                         "--for", "B", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["symbol"] == "B"
    assert {"condition": "t_math = t_comms", "value": "C*X/W_ici", "numeric": None, "per_device": None} in d["critical"]


def test_solve_reports_per_device_figures_and_roots_outside_the_domain(capsys):
    """A root that is not positive is not a critical value; per-device figures reach --json too."""
    code, out, _ = run(capsys, "solve", "A[I, J_X] * B[J, K] -> C[I, K]", "--for", "I", "--mesh", "X=4", "--dims",
                       "J=8192,K=64", "--hw", "tpu-v5e", "--json")
    d = json.loads(out)
    assert code == 0 and d["critical"] == []
    hbm = next(n for n in d["never_balanced"] if n["condition"] == "t_math = t_hbm")
    assert hbm["root"] == pytest.approx(-83.3, rel=1e-3)
    assert d["compute_bound_when_numeric"] == "False"
    code, out, _ = run(capsys, "solve", "derivations/fsdp.sc", "--for", "B", "--mesh", "X", "--hw", "tpu-v5p", "--json")
    (c,) = [c for c in json.loads(out)["critical"] if c["condition"] == "t_math = t_comms"]
    assert c["numeric"] is None and c["per_device"] == pytest.approx(2550, rel=1e-3)
    code, out, _ = run(capsys, "solve", "derivations/fsdp.sc", "--for", "B", "--mesh", "X=4096", "--hw", "tpu-v5p")
    assert "(850 per device over 4096 devices)" in out     # a full pod as one axis keeps its three links


@pytest.mark.slow
def test_console_script_runs_without_traceback():
    r = subprocess.run([sys.executable, "-m", "symcost.cli", "check", "A[I_X, J_X]"], capture_output=True,
                       text=True)
    assert r.returncode == 1
    assert r.stderr.startswith("symcost: mesh axis 'X' shards two dimensions of A")
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("argv", [
    ["derive", "A[F] -> A[]", "--mesh", "X=2,Y=2,Z=2", "--dims", "F=8"],   # a bare symbol bound to a number
    ["optimize", "derivations/fsdp_tp.sc", "--chips", "N", "--vary", "X,Y", "--dims", "N=64,B=48000,F=32768"],
])
def test_bound_symbols_never_break_the_numbers(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 0, err


@pytest.mark.slow
def test_random_bad_input_never_is_an_internal_error(capsys):
    """Malformed or invalid input gets exit 1 or 2 and a sentence, never exit 3 (a bug) or a traceback."""
    import random
    rng = random.Random(7)
    pieces = list("ABIJKXYZ_[]{},*->=:@ U0123 \n#") + ["_X", "_XY", "{U_X}", "AllGather_X(", ")", "int8", "*_J",
                                                        "param ", "rank B=4", "A[I_X, J]", "B[J, K_Y]"]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 20)))
        for extra in ([], ["--mesh", "X=2,Y=2"], ["--backward"]):
            try:
                code, _, err = run(capsys, "derive", text, *extra)
            except SystemExit as e:   # text that reads as an option: argparse's usage error
                code, err = e.code, capsys.readouterr().err
            assert code in (0, 1, 2), (text, err)
            assert "Traceback" not in err

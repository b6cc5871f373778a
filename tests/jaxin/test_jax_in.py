"""JAX functions in: the small parsers (no JAX needed), tracing into programs (the LLaMA 3 8B layer against
the model's own layer program), the errors, the command line, and the ground truth against XLA on eight
forced CPU host devices (in a subprocess, so that JAX sees them)."""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from symcost.cli import main
from symcost.errors import UsageError
from symcost.jaxin.dims import Dims
from symcost.jaxin.specs import parse_args, parse_names, parse_specs

from conftest import ROOT

HAS_JAX = importlib.util.find_spec("jax") is not None
NEEDS_JAX = pytest.mark.skipif(not HAS_JAX, reason="tracing needs the jax extra: pip install 'symcost[jax]'")
EIGHT = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "PYTHONPATH": str(ROOT)}
LLAMA_SPECS = "x=B_X,T,D;wq=D,N_Y;wk=D,M_Y;wv=D,M_Y;wo=N_Y,D;w1=D,F_Y;w2=D,F_Y;w3=F_Y,D"


# ---------------------------------------------------------------------------------------- the parsers


def test_args_specs_and_names_are_read_by_hand():
    assert parse_args("x=bf16[8,2048,4096], w=float32[4096,14336]") == {
        "x": ("bf16", (8, 2048, 4096)), "w": ("fp32", (4096, 14336))}
    assert parse_specs("x=B_X,T,D;w=D,F_{X,Y}") == {
        "x": (("B", ("X",)), ("T", ()), ("D", ())), "w": (("D", ()), ("F", ("X", "Y")))}
    assert parse_specs("x=B_XY,D")["x"][0] == ("B", ("X", "Y"))
    assert parse_names("K=8,H=128") == {"K": 8, "H": 128}


@pytest.mark.parametrize("text, where", [("x=bf16[8,2048", 3), ("x=bf9[8]", 3), ("x bf16[8]", 1),
                                         ("x=bf16[8],x=bf16[8]", 11), ("x=bf16[8,-1]", 3),
                                         ("__import__('os')=bf16[1]", 1)])
def test_bad_args_say_where(text, where):
    with pytest.raises(UsageError, match=rf"at character {where}\)"):
        parse_args(text)


def test_bad_specs_say_where():
    with pytest.raises(UsageError, match=r"'B_' is not a dimension.*at character 3"):
        parse_specs("x=B_,D")
    with pytest.raises(UsageError, match=r"'w\+' is not a name \(at character 7\)"):
        parse_specs("x=B,D;w+=D")


def test_the_union_find_factors_and_refuses_a_size_mismatch():
    d = Dims()
    a, b = d.new(4096, "F"), d.new(4096)
    parts = [d.new(8), d.new(4), d.new(128)]
    d.factor(b, parts)
    d.union(a, b)
    assert [d.size(x) for x in d.leaves(a)] == [8, 4, 128] and d.name(b) == "F"
    with pytest.raises(UsageError, match="size 8 meets one of size 16"):
        d.union(d.new(8), d.new(16))


def test_importing_symcost_does_not_import_jax():
    code = "import sys, symcost; symcost.derive('A[I, J] * B[J, K] -> C[I, K]'); print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=EIGHT, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------------------------------- tracing


def _llama(batch=8, seq=2048, **kw):
    import jax
    import jax.numpy as jnp
    sys.path.insert(0, str(ROOT / "examples"))
    from llama_layer import layer

    from symcost.jaxin import from_jax
    from symcost.models.config import load_model_config
    cfg = load_model_config("llama3-8b")
    n, m = cfg.K * cfg.G * cfg.H, cfg.K * cfg.H
    shapes = dict(x=(batch, seq, cfg.D), wq=(cfg.D, n), wk=(cfg.D, m), wv=(cfg.D, m), wo=(n, cfg.D),
                  w1=(cfg.D, cfg.F), w2=(cfg.D, cfg.F), w3=(cfg.F, cfg.D))
    args = [jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in shapes.values()]
    specs = dict(part.split("=") for part in LLAMA_SPECS.split(";"))
    return cfg, from_jax(layer, *args, mesh="X=4,Y=2", in_specs=specs,
                         names={"K": cfg.K, "G": cfg.G, "H": cfg.H, "S": seq}, **kw)


@NEEDS_JAX
def test_the_llama3_8b_layer_traces_to_the_model_layer_step_time():
    """The plain-JAX layer, elementwise work fused into the matmuls as `symcost model --program` writes a
    layer, has the model program's step time, FLOPs, HBM time and collectives at full LLaMA 3 8B sizes."""
    from symcost.models.transformer import Sharding, layer_program, sizes
    from symcost.program import derive_program
    cfg, traced = _llama(elementwise=False)
    assert "wq[D, K_Y, G, H]" in traced.text and "wo[K_Y, G, H, D]" in traced.text
    ours = traced.derive("h100").numeric()
    prog = layer_program(cfg, Sharding(batch=("X",), model=("Y",), heads=("Y",)), elementwise=False)
    dims = {k: v for k, v in sizes(cfg, batch=8, seq=2048).items() if k in "BTSDFKGH"}
    theirs = derive_program(prog, "X=4,Y=2", dims, "h100").numeric()
    for key in ("t_step", "flops", "t_math", "t_hbm", "t_comms"):
        assert ours[key] == pytest.approx(theirs[key], rel=1e-12), key
    assert theirs["t_step"] == pytest.approx(9.7277e-4, rel=1e-4)


@NEEDS_JAX
def test_the_full_llama_layer_adds_its_elementwise_work_and_keeps_the_matmuls():
    _, traced = _llama()
    plan = traced.derive("h100")
    text = traced.text
    assert "= SiLU(" in text and "*_D OnesD[D]" in text and "View(" in text
    # jax.nn.softmax's six primitives are the notation's one Softmax over the keys' sequence
    assert text.count("= Softmax_S(") == 1 and "Exp" not in text and "reduce_max" not in text
    _, fused = _llama(elementwise=False)
    matmuls = fused.derive("h100")
    # the einsums of the fused program are the full program's matmul FLOPs; elementwise work only adds
    assert plan.numeric()["flops"] > matmuls.numeric()["flops"]
    assert plan.numeric()["t_step"] > matmuls.numeric()["t_step"]


@NEEDS_JAX
def test_an_unsupported_primitive_names_its_source_line():
    import jax
    import jax.numpy as jnp
    sys.path.insert(0, str(ROOT / "examples"))
    from jax_layers import prefix_sum

    from symcost.jaxin import from_jax
    s = jax.ShapeDtypeStruct
    with pytest.raises(UsageError, match=r"^cumsum at jax_layers\.py:\d+ \(prefix_sum\) has no symcost notation"):
        from_jax(prefix_sum, s((8, 16), jnp.bfloat16), s((16, 16), jnp.bfloat16), mesh="X=2")


@NEEDS_JAX
def test_the_cli_prints_the_program_then_the_plan(capsys):
    argv = ["trace", "examples/mlp_jax.py:mlp", "--args", "x=bf16[64,256],w_in=bf16[256,1024],w_out=bf16[1024,256]",
            "--specs", "x=B_X,D;w_in=D,F_Y;w_out=F_Y,D", "--mesh", "X=4,Y=2", "--hw", "h100", "--json"]
    os.chdir(ROOT)
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(out, json.loads((ROOT / "symcost" / "schemas" / "trace.json").read_text()))
    assert out["dims"] == {"B": 64, "D": 256, "F": 1024}
    assert [(s["before"], s["after"]) for s in out["steps"] if s["kind"] == "AllReduce"] == [
        ("Out[B_X, D]{U_Y}", "Out[B_X, D]")]
    assert out["program"].startswith("param w_in[D, F_Y], w_out[F_Y, D]\n")


@NEEDS_JAX
@pytest.mark.parametrize("bad, message", [
    (["--args", "x=bf16[64,256"], "at character 3"),
    (["--specs", "x=B_,D"], "at character 3"),
    (["--args", "x=bf16[64,256]"], "lacks w_in, w_out"),
])
def test_the_cli_refuses_bad_text_with_exit_2(bad, message, capsys):
    argv = ["trace", "examples/mlp_jax.py:mlp", "--args", "x=bf16[64,256],w_in=bf16[256,1024],w_out=bf16[1024,256]",
            "--mesh", "X=4,Y=2"]
    for flag, value in zip(bad[::2], bad[1::2]):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    os.chdir(ROOT)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


# ------------------------------------------------------------------------------------ against XLA

TRUTH = r"""
import json, sys
sys.path.insert(0, "examples")
import jax, jax.numpy as jnp
from symcost.jaxin import from_jax
from symcost.jaxin.truth import compare, one_device, program_flops, xla_flops
import jax_layers as L, mlp_jax, llama_layer
S = lambda *s: jax.ShapeDtypeStruct(s, jnp.bfloat16)
out = {}
MLP = ["x", "w_in", "w_out"]
cases = {"mlp": (mlp_jax.mlp, [S(256, 1024), S(1024, 4096), S(4096, 1024)], ["B_X,D", "D,F_Y", "F_Y,D"], "X=4,Y=2"),
         "fsdp": (L.fsdp, [S(256, 1024), S(1024, 4096), S(4096, 1024)], ["B_X,D", "D_X,F", "F,D_X"], "X=8"),
         "checkpointed": (L.checkpointed, [S(256, 1024), S(1024, 4096), S(4096, 1024)], ["B_X,D", "D,F_Y", "F_Y,D"],
                          "X=4,Y=2"),
         "stack": (L.stack, [S(256, 1024), S(3, 1024, 4096), S(3, 4096, 1024)], ["B_X,D", "L,D,F_Y", "L,F_Y,D"],
                   "X=4,Y=2"),
         "repeated": (L.repeated, [S(256, 1024), S(1024, 1024)], ["B_X,D", "D,E_Y"], "X=4,Y=2"),
         # LLaMA's proportions at a small size: 2 key/value heads of 4 queries, head width 128
         "llama": (llama_layer.layer, [S(8, 64, 1024), S(1024, 1024), S(1024, 256), S(1024, 256), S(1024, 1024),
                                       S(1024, 2048), S(1024, 2048), S(2048, 1024)],
                   [s.split("=")[1] for s in "LLAMA_SPECS".split(";")], "X=4,Y=2")}
NAMES = {"repeated": ["x", "w"], "llama": "x wq wk wv wo w1 w2 w3".split()}
for name, (fn, args, specs, mesh) in cases.items():
    specs_by = dict(zip(NAMES.get(name, MLP), specs))
    t = from_jax(fn, *args, mesh=mesh, in_specs=specs_by)
    c = compare(t.derive(), fn, args, mesh, specs)
    one = from_jax(fn, *args, mesh=one_device(mesh), in_specs=specs_by).derive()
    out[name] = {"symcost": c["symcost"], "xla": c["xla"], "flops": program_flops(one),
                 "xla_flops": xla_flops(fn, args, mesh), "reuse": t.reuse}
# the command line's --xla-check, on the same eight devices (what `python -m symcost.cli` runs)
import contextlib, io
from symcost.cli import main
printed, said = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(said):
    code = main(XLA_CHECK + ["--json"])
out["xla_check"] = {"code": code, "stdout": printed.getvalue(), "stderr": said.getvalue()}
print(json.dumps(out))
"""


#: ``symcost trace --xla-check`` of the FSDP layer: run in the subprocess above with eight devices, and alone
XLA_CHECK = ["trace", "examples/jax_layers.py:fsdp", "--args", "x=bf16[256,1024],w_in=bf16[1024,4096],w_out=bf16[4096,1024]",
             "--specs", "x=B_X,D;w_in=D_X,F;w_out=F,D_X", "--mesh", "X=8", "--xla-check"]
TRUTH = TRUTH.replace("LLAMA_SPECS", LLAMA_SPECS).replace("XLA_CHECK + ", repr(XLA_CHECK) + " + ")


@pytest.fixture(scope="module")
def truth():
    """XLA's partitioner on eight host devices, in a subprocess that imports JAX (about 5 s): the tests that
    read it are in the slow tier."""
    if not HAS_JAX:
        pytest.skip("the comparison with XLA needs the jax extra: pip install 'symcost[jax]'")
    res = subprocess.run([sys.executable, "-c", TRUTH], capture_output=True, text=True, env=EIGHT, cwd=ROOT,
                         timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@NEEDS_JAX
@pytest.mark.parametrize("case", ["mlp", "fsdp", "checkpointed", "llama"])
def test_the_plan_has_the_collectives_xla_inserts(truth, case):
    assert truth[case]["symcost"] == truth[case]["xla"]
    assert truth[case]["symcost"]       # each example communicates


@pytest.mark.slow
@NEEDS_JAX
@pytest.mark.parametrize("case", ["stack", "repeated"])
def test_a_loop_repeats_the_collectives_xla_runs_in_its_body(truth, case):
    """XLA lists the loop body's collective once (it runs three times); the program writes each iteration
    (the scan over stacked weights and the while loop counting to 3 alike)."""
    expected = {"stack": [["all-reduce", ["Y"]]], "repeated": [["all-gather", ["Y"]]]}[case]
    assert truth[case]["xla"] == expected
    assert truth[case]["symcost"] == expected * 3


@pytest.mark.slow
@NEEDS_JAX
@pytest.mark.parametrize("case", ["mlp", "fsdp", "checkpointed", "stack", "repeated", "llama"])
def test_the_program_flops_are_xlas_within_2_percent(truth, case):
    """XLA's cost analysis counts a loop's body once (the three iterations as one); the program writes
    every iteration, so the loops are held to three times XLA's count."""
    iterations = 3 if case in ("stack", "repeated") else 1
    assert truth[case]["flops"] == pytest.approx(iterations * truth[case]["xla_flops"], rel=0.02)


@pytest.mark.slow
@NEEDS_JAX
def test_a_checkpoint_policy_becomes_the_reuse_policy(truth):
    assert truth["checkpointed"]["reuse"] == "none" and truth["mlp"]["reuse"] is None


# ------------------------------------------------------------------------------------ more of the face


@NEEDS_JAX
def test_a_written_program_derives_as_the_traced_one(tmp_path, capsys):
    """`--to-notation PATH` writes the program; `symcost derive` on it with the sizes its first line names
    gives the traced plan's step time."""
    os.chdir(ROOT)
    path = tmp_path / "fsdp.sc"
    base = ["trace", "examples/jax_layers.py:fsdp", "--args",
            "x=bf16[256,1024],w_in=bf16[1024,4096],w_out=bf16[4096,1024]",
            "--specs", "x=B_X,D;w_in=D_X,F;w_out=F,D_X", "--mesh", "X=8", "--hw", "h100"]
    assert main(base + ["--json", "--to-notation", str(path)]) == 0
    traced = json.loads(capsys.readouterr().out)
    head = path.read_text().splitlines()[0].split()
    assert head[:4] == ["#", "symcost", "derive", "FILE"]
    dims = head[head.index("--dims") + 1]
    assert main(["derive", str(path), "--mesh", "X=8", "--dims", dims, "--hw", "h100", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["numeric"]["t_step"] == traced["numeric"]["t_step"] > 0
    assert [s["kind"] for s in again["steps"]][:2] == ["AllGather", "AllGather"]


@NEEDS_JAX
def test_the_checkpoint_policy_sets_the_backward_reuse(capsys):
    """The block saves nothing, so its backward pass gathers again what the forward pass gathered: with
    the traced policy (reuse none) the FSDP weights are gathered in the backward pass; asking for
    --reuse all keeps them."""
    os.chdir(ROOT)
    argv = ["trace", "examples/jax_layers.py:checkpointed", "--args",
            "x=bf16[256,1024],w_in=bf16[1024,4096],w_out=bf16[4096,1024]",
            "--specs", "x=B_X,D;w_in=D_X,F;w_out=F,D_X", "--mesh", "X=8", "--backward", "--json"]
    assert main(argv) == 0
    traced = json.loads(capsys.readouterr().out)
    assert traced["reuse"] == "none"
    gathers = [s for s in traced["steps"] if s["kind"] == "AllGather" and s["phase"] == "backward"]
    assert main(argv + ["--reuse", "all"]) == 0
    kept = json.loads(capsys.readouterr().out)
    assert len(gathers) > len([s for s in kept["steps"] if s["kind"] == "AllGather" and s["phase"] == "backward"])


@NEEDS_JAX
def test_partition_specs_leave_names_to_inference_and_two_outputs_are_named():
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    from symcost.jaxin import from_jax

    def two(x, w):
        h = x @ w
        return h, h @ w.T
    s = jax.ShapeDtypeStruct
    t = from_jax(two, s((64, 32), jnp.bfloat16), s((32, 16), jnp.bfloat16), mesh="X=4",
                 in_specs=[P("X", None), None])
    assert t.text.splitlines() == ["param w[J, K]", "Out[I_X, K] = x[I_X, J] *_J w[J, K]",
                                   "Out2[I_X, J] = Out[I_X, K] *_K w[J, K]"]
    assert t.dims == {"I": 64, "J": 32, "K": 16}


@NEEDS_JAX
def test_a_name_by_size_must_pick_one_dimension():
    import jax
    import jax.numpy as jnp

    from symcost.jaxin import from_jax
    s = jax.ShapeDtypeStruct
    with pytest.raises(UsageError, match="2 unnamed dimensions have size 16"):
        from_jax(lambda x, w: x @ w, s((16, 8), jnp.bfloat16), s((8, 16), jnp.bfloat16), mesh="X=2",
                 names={"K": 16})


def _doc_examples():
    lines = (ROOT / "docs" / "jax.md").read_text().split("\n")
    for i, line in enumerate(lines):
        if line.startswith("    $ symcost ") and "|" not in line:
            out = []
            for nxt in lines[i + 1:]:
                if nxt.startswith("    $ ") or (nxt and not nxt.startswith("    ")):
                    break
                out.append(nxt[4:])
            yield line[len("    $ symcost "):], "\n".join(out).strip("\n")


@NEEDS_JAX
@pytest.mark.parametrize("command, expected", list(_doc_examples()), ids=lambda v: v[:40])
def test_the_documented_output_is_real(command, expected, capsys):
    import shlex
    os.chdir(ROOT)
    main(shlex.split(command))
    got = capsys.readouterr()
    assert (got.out + got.err).strip("\n") == expected


@NEEDS_JAX
def test_the_unsharded_llama_layer_is_the_model_command_program(capsys):
    """Unsharded, the traced layer (matmuls only) has the step time of the program `symcost model llama3-8b
    --program` prints for the same sizes, derived the same way."""
    import jax
    import jax.numpy as jnp

    from symcost.program import derive_program
    sys.path.insert(0, str(ROOT / "examples"))
    from llama_layer import layer

    from symcost.jaxin import from_jax
    assert main(["model", "llama3-8b", "--program", "--batch", "2", "--seq", "4096"]) == 0
    printed = capsys.readouterr().out
    rank = next(line for line in printed.splitlines() if line.startswith("rank "))
    dims = {k: int(v) for k, v in (p.strip().split("=") for p in rank[5:].split(","))}
    s = jax.ShapeDtypeStruct
    b, t, d, f = dims["B"], dims["T"], dims["D"], dims["F"]
    n, m = dims["K"] * dims["G"] * dims["H"], dims["K"] * dims["H"]
    shapes = [(b, t, d), (d, n), (d, m), (d, m), (n, d), (d, f), (d, f), (f, d)]
    traced = from_jax(layer, *[s(x, jnp.bfloat16) for x in shapes], mesh="X=1",
                      in_specs=dict(part.split("=") for part in LLAMA_SPECS.replace("_X", "").replace("_Y", "").split(";")),
                      names={"K": dims["K"], "G": dims["G"], "H": dims["H"], "S": dims["S"]}, elementwise=False)
    assert traced.dims == dims
    ours = traced.derive("h100").numeric()
    theirs = derive_program(printed, "X=1", dims, "h100").numeric()
    assert ours["t_step"] == pytest.approx(theirs["t_step"], rel=1e-12) and ours["flops"] == theirs["flops"]


@NEEDS_JAX
def test_a_traced_program_is_a_program_like_any_other(tmp_path, capsys):
    """check, solve, latex, search and export-jax take the written program (export-jax lowers einsums and
    collectives only, so the matmuls-only program); the exported JAX runs and agrees with its reference."""
    os.chdir(ROOT)
    base = ["trace", "examples/mlp_jax.py:mlp", "--args", "x=bf16[64,256],w_in=bf16[256,1024],w_out=bf16[1024,256]",
            "--mesh", "X=4,Y=2", "--to-notation"]
    dims = ["--mesh", "X=4,Y=2", "--dims", "B=64,D=256,F=1024"]
    laid, open_, fused = tmp_path / "mlp.sc", tmp_path / "open.sc", tmp_path / "fused.sc"
    for path, extra in ((laid, ["--specs", "x=B_X,D;w_in=D,F_Y;w_out=F_Y,D"]), (open_, ["--specs", "x=B,D;w_in=D,F;w_out=F,D"]),
                        (fused, ["--specs", "x=B_X,D;w_in=D,F_Y;w_out=F_Y,D", "--matmuls-only"])):
        assert main(base + extra) == 0
        path.write_text(capsys.readouterr().out)
    assert main(["check", str(laid)] + dims) == 0
    assert "needs: AllReduce_Y(Out[B_X, D]{U_Y}) -> Out[B_X, D]" in capsys.readouterr().out
    assert main(["solve", str(laid), "--mesh", "X=4,Y=2", "--dims", "D=256,F=1024", "--for", "B", "--hw", "h100"]) == 0
    assert main(["latex", str(laid), "--fragment"] + dims) == 0
    assert main(["search", str(open_), "--hw", "h100", "--json"] + dims) == 0
    capsys.readouterr()
    out = tmp_path / "mlp_jax_out.py"
    assert main(["export-jax", str(fused), "-o", str(out)] + dims) == 0
    res = subprocess.run([sys.executable, str(out)], capture_output=True, text=True, env=EIGHT, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-1000:]
    assert res.stdout.split("\n")[-3:-1] == ["Dot1: matches jnp.einsum", "Out: matches jnp.einsum"]


@NEEDS_JAX
@pytest.mark.parametrize("function, args, message", [
    ("indexed", "x=bf16[8,16],w=bf16[16,16],ids=int8[4]",
     r"^tracing indexed raised TypeError: |^\w+ at jax_layers\.py:\d+ \(indexed\)"),
    ("unbounded", "x=bf16[8,16],w=bf16[16,16]", r"^while at jax_layers\.py:\d+ \(unbounded\) has no symcost notation"),
    ("mlp_missing", "x=bf16[8,16]", r"^examples/jax_layers\.py has no function mlp_missing$"),
])
def test_what_cannot_be_read_is_one_sentence_naming_the_line(function, args, message, capsys):
    os.chdir(ROOT)
    assert main(["trace", f"examples/jax_layers.py:{function}", "--args", args, "--mesh", "X=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("symcost: ") and err.count("\n") == 1
    assert re.search(message, err[len("symcost: "):])


@NEEDS_JAX
def test_a_mesh_axis_is_no_dimension_name():
    import jax
    import jax.numpy as jnp

    from symcost.jaxin import from_jax
    s = jax.ShapeDtypeStruct((8, 8), jnp.bfloat16)
    with pytest.raises(UsageError, match="names a dimension X, which is a mesh axis"):
        from_jax(lambda x: x, s, mesh="X=2", in_specs=["X,D"])


@pytest.mark.slow
@NEEDS_JAX
def test_trace_xla_check_prints_xlas_collectives_beside_the_plans(truth):
    """On eight devices (the ``truth`` subprocess ran the command there) XLA's collectives are the plan's; on
    one, the command says how to get eight."""
    assert truth["xla_check"]["code"] == 0, truth["xla_check"]["stderr"]
    out = json.loads(truth["xla_check"]["stdout"])
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(out, json.loads((ROOT / "symcost" / "schemas" / "trace.json").read_text()))
    xla = out["xla"]
    assert xla["same"] and xla["xla"] == [["all-gather", ["X"]]] * 2
    assert xla["flops"] == pytest.approx(xla["xla_flops"], rel=0.02)
    cmd = [sys.executable, "-m", "symcost.cli"] + XLA_CHECK
    alone = subprocess.run(cmd, capture_output=True, text=True, env={**EIGHT, "XLA_FLAGS": ""}, cwd=ROOT, timeout=300,
                           check=False)
    assert alone.returncode == 1
    assert alone.stderr.strip() == ("symcost: comparing with XLA needs 8 devices; run with "
                                    "XLA_FLAGS=--xla_force_host_platform_device_count=8")


@NEEDS_JAX
def test_a_scanned_stack_of_llama_layers_is_that_many_layers():
    """32 layers in a scan over stacked weights: every iteration names its keys' sequence S alike, and the
    step is 32 times the layer's (matmuls only)."""
    import jax
    import jax.numpy as jnp
    sys.path.insert(0, str(ROOT / "examples"))
    from llama_layer import layer

    from symcost.jaxin import from_jax

    def model(x, wq, wk, wv, wo, w1, w2, w3):
        return jax.lax.scan(lambda h, w: (layer(h, *w), None), x, (wq, wk, wv, wo, w1, w2, w3))[0]
    s = jax.ShapeDtypeStruct
    n, b, t, d, f = 4, 8, 2048, 4096, 14336
    shapes = [(b, t, d), (n, d, d), (n, d, 1024), (n, d, 1024), (n, d, d), (n, d, f), (n, d, f), (n, f, d)]
    specs = {k: ("L," + v if k != "x" else v) for k, v in (p.split("=") for p in LLAMA_SPECS.split(";"))}
    traced = from_jax(model, *[s(x, jnp.bfloat16) for x in shapes], mesh="X=4,Y=2", in_specs=specs,
                      names={"K": 8, "G": 4, "H": 128, "S": t}, elementwise=False)
    assert traced.text.count("# iteration") == n and "S" in traced.dims
    _, one = _llama(elementwise=False)
    assert traced.derive("h100").numeric()["t_step"] == pytest.approx(n * one.derive("h100").numeric()["t_step"],
                                                                      rel=1e-12)


@NEEDS_JAX
def test_the_traced_layer_backward_is_the_model_layer_backward():
    """Forward and backward, the traced layer (matmuls only) has the model program's step time and FLOPs."""
    from symcost.models.transformer import Sharding, layer_program, sizes
    from symcost.program import derive_program
    cfg, traced = _llama(elementwise=False)
    ours = traced.derive("h100", backward=True).numeric()
    prog = layer_program(cfg, Sharding(batch=("X",), model=("Y",), heads=("Y",)), elementwise=False)
    dims = {k: v for k, v in sizes(cfg, batch=8, seq=2048).items() if k in "BTSDFKGH"}
    theirs = derive_program(prog, "X=4,Y=2", dims, "h100", backward=True).numeric()
    assert ours["t_step"] == pytest.approx(theirs["t_step"], rel=1e-12)
    assert ours["flops"] == pytest.approx(theirs["flops"], rel=1e-12)


def _regroup(x):
    return x.reshape(6, 4)


def _constant_weight(x):
    import jax.numpy as jnp
    return x @ jnp.ones((4, 3), x.dtype)


def _sum_of_a_replicated_value(x, w):
    import jax
    from jax.sharding import PartitionSpec as P
    return jax.shard_map(lambda x, w: jax.lax.psum(x @ w, "X"), in_specs=(P("X", None), P()),
                         out_specs=P("X", None))(x, w)


@NEEDS_JAX
@pytest.mark.parametrize("fn, shapes, message", [
    (_regroup, [(4, 6)], r"^reshape at test_jax_in\.py:\d+ \(_regroup\) regroups axes \[4, 6\] as \[6, 4\]"),
    (_constant_weight, [(8, 4)], r"^dot_general at test_jax_in\.py:\d+ \(_constant_weight\) multiplies by a "
                                 r"constant array"),
    (_sum_of_a_replicated_value, [(8, 4), (4, 4)],
     r"^psum\w* at test_jax_in\.py:\d+ \(_sum_of_a_replicated_value.*\) sums over X values that are not partial"),
])
def test_what_the_notation_cannot_say_is_named_at_its_line(fn, shapes, message):
    import jax
    import jax.numpy as jnp
    from symcost.jaxin import from_jax
    with pytest.raises(UsageError, match=message):
        from_jax(fn, *[jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in shapes], mesh="X=2")

"""Derivation documents and executable plans: LaTeX (compiled), Markdown, plots (PNG and SVG, not
blank), the example notebook (executed), JAX export (run and compared with jnp.einsum), xla-check, and
every command's --json against its schema."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

import symcost
from symcost.cli import main

from conftest import ROOT, decode_elementwise_seconds

SCHEMAS = ROOT / "symcost" / "schemas"
HAS_JAX = importlib.util.find_spec("jax") is not None
HAS_MPL = importlib.util.find_spec("matplotlib") is not None


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------------------- LaTeX


@pytest.mark.slow
def test_latex_document_compiles(tmp_path, capsys):
    tex = tmp_path / "fsdp_tp.tex"
    code, out, err = run(capsys, "latex", str(ROOT / "derivations" / "fsdp_tp.sc"), "--backward", "--hw", "tpu-v5p",
                         "--mesh", "X=16,Y=4", "--dims", "B=1048576,D=8192,F=32768", "-o", str(tex))
    assert code == 0, err
    text = tex.read_text()
    for piece in (r"\documentclass", r"\textbf{AllGather}_{X}", r"\textbf{ReduceScatter}_{Y}", "Backward pass",
                  "Roofline", "compute-bound when", "Assumptions", "Part 2 (TPUs)", r"\begin{tabular}"):
        assert piece in text
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex is not installed (apt-get install texlive-latex-base texlive-latex-recommended)")
    r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", tex.name], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:]
    pdf = tmp_path / "fsdp_tp.pdf"
    assert pdf.stat().st_size > 10_000 and pdf.read_bytes()[:4] == b"%PDF"


def test_latex_fragment_and_markdown():
    plan = symcost.derive("A[I, J_X] * B[J_X, K] -> C[I, K]", mesh="X=4", dims="I=4096,J=4096,K=4096", hw="tpu-v5p")
    frag = plan.to_latex(fragment=True)
    assert r"\documentclass" not in frag and r"\textbf{AllReduce}_{X}" in frag
    md = plan.to_markdown()
    assert "| 2 | forward | `AllReduce_X(C[I, K]{U_X}) -> C[I, K]` |" in md
    assert "t_step" in md


def test_markdown_of_a_plan_without_numbers_says_what_would_give_them():
    """A closed form alone (no sizes or no chip): no column of blank values, but the symbols to bind."""
    md = symcost.derive("A[I, J_X] * B[J_X, K] -> C[I, K]", mesh="X=4").to_markdown()
    assert "| total | expression |\n|---|---|\n" in md and "| value |" not in md
    assert md.endswith("No values: C, I, J, K, T_min, W_hbm, W_ici unbound (bind the sizes and the hardware: "
                       "--dims and --hw, or dims= and hw=).")
    md = symcost.derive("A[I, J_X] * B[J_X, K] -> C[I, K]", mesh="X=4", hw="tpu-v5p").to_markdown()
    assert md.endswith("No values: I, J, K unbound (bind the sizes and the hardware: --dims and --hw, or dims= "
                       "and hw=).")


def test_notebook_reprs():
    plan = symcost.derive("A[I, J_X] * B[J, K] -> C[I, K]", mesh="X=4")
    assert plan._repr_latex_().startswith("$$") and r"\textbf{" in plan._repr_latex_()
    assert "<table>" in plan._repr_html_()


def test_latex_to_an_unwritable_path(capsys):
    code, _, err = run(capsys, "latex", "A[I_X] -> A[I]", "-o", "/nonexistent-dir/x.tex")
    assert code == 2 and "cannot write /nonexistent-dir/x.tex" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------------- plots


def _not_blank(path):
    import matplotlib.image as mpimg
    img = mpimg.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 300
    assert img.std() > 0.05   # not a blank canvas


@pytest.mark.slow
@pytest.mark.skipif(not HAS_MPL, reason="plots need matplotlib: pip install 'symcost[plot]'")
def test_plots(tmp_path, capsys):
    cases = [
        ["plot", str(ROOT / "derivations"), "--vs", "B", "--hw", "tpu-v5p", "--chips", "4096",
         "-o", str(tmp_path / "strategies.png")],
        ["plot", "Out[B, F] = In[B, D] *_D W[D, F]", "--dims", "B=64,D=8192,F=28672", "--hw", "tpu-v5e",
         "-o", str(tmp_path / "roofline.png")],
        ["plot", "llama3-70b", "--hw", "tpu-v5e", "--chips", "8", "--dtype", "int8", "-o", str(tmp_path / "frontier.png")],
    ]
    for argv in cases:
        code, out, err = run(capsys, *argv)
        assert code == 0, err
        _not_blank(argv[-1])
    code, _, err = run(capsys, "plot", str(ROOT / "derivations"), "--hw", "tpu-v5p", "-o", str(tmp_path / "s.svg"))
    assert code == 0 and (tmp_path / "s.svg").read_text().lstrip().startswith("<?xml")
    from symcost.export.plot import strategy_curves
    curves = strategy_curves([str(ROOT / "derivations" / f"{n}.sc") for n in ("fsdp", "fsdp_tp")], "B",
                             symcost.hardware("tpu-v5p"), 4096)
    xs, comms, math_ = curves["fsdp_tp"]
    crossing = next(x for x, c, m in zip(xs, comms, math_) if m > c)
    assert 2e5 < crossing < 8e5      # the book's 4e5 crossover on a 16x16x16 v5p


def test_a_plans_plot_draws_its_closed_forms_and_crosses_where_solve_says(tmp_path, capsys):
    """``plot FILE --vs B --mesh X=256``: the plan derive gives on that mesh, its T_math, T_hbm, T_comms and
    step time over B (each its closed form at each point), and where T_comms and T_math cross: FSDP on a
    v5p pod of 256 chips at 850 tokens a chip (solve: B = 256 C / (3 W_ici) = 217,600)."""
    pytest.importorskip("matplotlib")
    import sympy as sp
    from symcost.export.plot import plan_curves
    argv = [str(ROOT / "derivations" / "fsdp.sc"), "--vs", "B", "--mesh", "X=256", "--hw", "tpu-v5p",
            "--dims", "D=8192,F=32768"]
    code, out, err = run(capsys, "plot", *argv, "-o", str(tmp_path / "plan.png"))
    assert code == 0, err
    _not_blank(str(tmp_path / "plan.png"))
    plan = symcost.derive((ROOT / "derivations" / "fsdp.sc").read_text(), mesh="X=256", dims="D=8192,F=32768",
                          hw="tpu-v5p")
    xs, t, at = plan_curves(plan, "B")
    assert at is None and xs[0] == 1 and xs[-1] == pytest.approx(1e8)
    b = sp.Symbol("B", positive=True, integer=True)
    subs = {k: v for k, v in plan.bindings().items() if k.name != "B"}
    for i in (0, 30, 60):
        for name in ("t_math", "t_hbm", "t_comms", "t_step"):
            expr = getattr(plan, name).xreplace(subs)
            expr = expr.xreplace({s: b for s in expr.free_symbols if s.name == "B"})
            assert getattr(t, name)[i] == pytest.approx(float(expr.subs(b, xs[i])), rel=1e-12)
    crossing = float(out.split("cross near B = ")[1].split()[0])
    assert crossing == pytest.approx(217600, rel=0.01)
    # a size the plan does not depend on, and one left unbound, are errors that say so
    code, _, err = run(capsys, "plot", *argv[:1], "--vs", "Q", *argv[3:], "-o", str(tmp_path / "q.png"))
    assert code == 2 and "Q does not appear in this plan's costs" in err
    code, _, err = run(capsys, "plot", *argv[:7], "-o", str(tmp_path / "u.png"))
    assert code == 2 and "bind D, F" in err
    code, _, err = run(capsys, "plot", *argv, "--chips", "8", "-o", str(tmp_path / "c.png"))
    assert code == 2 and "--chips is not read by a plan plot" in err


# ------------------------------------------------------------------------------------- notebook


@pytest.mark.slow
def test_example_notebook_executes():
    nb = json.loads((ROOT / "examples" / "symcost.ipynb").read_text())
    namespace = {}
    last = None
    cwd = os.getcwd()
    os.chdir(ROOT / "examples")      # where a reader opens it
    try:
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            src = "".join(cell["source"])
            *body, tail = src.rstrip().splitlines()
            exec(compile("\n".join(body), "<notebook>", "exec"), namespace)   # the project's own example
            last = eval(compile(tail, "<notebook>", "eval"), namespace)
    finally:
        os.chdir(cwd)
    # the book's Part 8 decode step (LLaMA 3-70B, int8, 8 v5e chips, batch 32, 8,192 tokens): 17.8 ms; the
    # engine's step adds its layers' elementwise work, which the book does not count
    elementwise = decode_elementwise_seconds(namespace["Serving"](namespace["load_model_config"]("llama3-70b"),
                                                                  symcost.hardware("tpu-v5e"), chips=8,
                                                                  dtype="int8"), 32, 8192)
    assert 0 < elementwise < 0.05 * last
    assert last - elementwise == pytest.approx(0.0178, rel=0.02)
    assert namespace["plan"]._repr_latex_()


# -------------------------------------------------------------------------------------- JAX


EXPORTS = [
    ("In[B_X, D_Y] * W[D_Y, F] -> Out[B_X, F]", "X=4,Y=2", "B=16,D=32,F=8"),
    ("A[I, J_X] * B[J, K] -> C[I, K]", "X=4", "I=8,J=16,K=8"),
    ("In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]", "X=2,Y=2", "B=8,D=8,F=8"),
    ("A[I_X, J] -> A[I, J_X]", "X=4", "I=8,J=8"),
    ("AllGather_X(A[I_XY, J]) -> A[I_Y, J]", "X=2,Y=2", "I=8,J=2"),
    ("A[I, J_X] * B[J_X, K] -> C[I, K_X]", "X=4", "I=8,J=8,K=8"),
]


#: an exported program run to compare its numbers: XLA compiles it without most of its optimisation passes
#: (a fifth of these runs' time, the arrays being tiny); what XLA itself inserts is checked with its passes on
#: (xla-check, tests/simulate/test_xla_reference.py)
NUMBERS_ONLY = {**os.environ, "JAX_DISABLE_MOST_OPTIMIZATIONS": "1"}


@pytest.mark.slow
@pytest.mark.skipif(not HAS_JAX, reason="JAX export needs the jax extra: pip install 'symcost[jax]'")
@pytest.mark.parametrize("expr, mesh, dims", EXPORTS)
def test_exported_jax_runs_and_agrees(tmp_path, capsys, expr, mesh, dims):
    out = tmp_path / "layer.py"
    code, _, err = run(capsys, "export-jax", expr, "--mesh", mesh, "--dims", dims, "-o", str(out))
    assert code == 0, err
    text = out.read_text()
    assert "shard_map" in text and "import symcost" not in text
    r = subprocess.run([sys.executable, str(out)], capture_output=True, text=True, timeout=300, env=NUMBERS_ONLY)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "matches jnp.einsum" in r.stdout


@pytest.mark.slow
@pytest.mark.skipif(not HAS_JAX, reason="JAX export needs the jax extra: pip install 'symcost[jax]'")
def test_export_without_dims_picks_divisible_sizes(tmp_path, capsys):
    out = tmp_path / "layer.py"
    code, _, err = run(capsys, "export-jax", "In[B_X, D_Y] * W[D_Y, F] -> Out[B_X, F]", "--mesh", "X=4,Y=2",
                       "-o", str(out))
    assert code == 0, err
    assert "'In': (16, 16)" in out.read_text()
    r = subprocess.run([sys.executable, str(out)], capture_output=True, text=True, timeout=300, env=NUMBERS_ONLY)
    assert r.returncode == 0, r.stdout + r.stderr


def test_export_refuses_what_it_cannot_write(tmp_path, capsys):
    code, _, err = run(capsys, "export-jax", "A[I, J]{U_X} * B[J, K] -> C[I, K]", "--mesh", "X=2",
                       "--dims", "I=4,J=4,K=4", "-o", str(tmp_path / "x.py"))
    assert code == 1 and "input A holds partial sums" in err
    code, _, err = run(capsys, "export-jax", "A[I_X] -> A[I]", "--mesh", "X", "-o", str(tmp_path / "x.py"))
    assert code == 1 and "give every mesh axis a size" in err


def _training_layer(model: str, seq_parallel: bool) -> str:
    """A model's training layer program with TP over Y (as ``model --train`` plans it)."""
    from symcost.models.config import load_model_config
    from symcost.models.transformer import training_program
    return training_program(load_model_config(model), tp_axes=("Y",), seq_parallel=seq_parallel)


#: programs with elementwise work, exported on 4 devices: Megatron's sequence-parallel GPT layer (LayerNorm,
#: dropout, GeLU, softmax, residual adds, its AllGathers and ReduceScatters), a LLaMA layer with TP
#: (RMSNorm, SiLU, the gate's product), a router and dispatch, cross-entropy over a split vocabulary
ELEMENTWISE_EXPORTS = [
    ((ROOT / "examples" / "megatron_sp_layer.sc").read_text(), "Y=4", "B=2,T=8,S=8,D=16,K=4,G=1,H=4,F=32"),
    (_training_layer("llama3-8b", False), "Y=4", "B=2,T=8,S=8,D=16,K=4,G=2,H=4,F=32"),
    ("Gk[B_X, T, J] = TopK_E(Lg[B_X, T, E])\nXk[B_X, T, J, D] = Dispatch_J(X[B_X, T, D], Gk[B_X, T, J])", "X=4",
     "B=8,T=2,E=8,J=2,D=4"),
    ("L[B_X, T] = CrossEntropy_V(Lg[B_X, T, V_Y])", "X=2,Y=2", "B=4,T=2,V=16"),
]


def test_export_lowers_elementwise_work(tmp_path, capsys):
    """Each rule as its ``jax`` form on the blocks, between the plan's collectives; dropout and rotary
    embedding as the identity, which the file says; a rule the notation leaves open is refused. The
    example (docs/commands.md) is the layer ``model --train --seq-parallel`` plans."""
    program, mesh, dims = ELEMENTWISE_EXPORTS[0]
    assert symcost.parse(program).statements == symcost.parse(_training_layer("megatron-22b", True)).statements
    src = tmp_path / "layer.sc"
    src.write_text(program)
    out = tmp_path / "layer.py"
    code, _, err = run(capsys, "export-jax", str(src), "--mesh", mesh, "--dims", dims, "-o", str(out))
    assert code == 0, err
    body = out.read_text().split("def step(", 1)[1].split("def reference(", 1)[0].splitlines()
    ln = ("t_Xn = (t_X - jnp.mean(t_X, axis=2, keepdims=True)) / jnp.sqrt(jnp.var(t_X, axis=2, keepdims=True) "
          "+ 1e-6)")
    assert body[1].strip() == ln                                    # on the sequence's block, D whole
    assert body[2].strip() == "t_Xn = jax.lax.all_gather(t_Xn, 'Y', axis=1, tiled=True)"
    assert "    t_P = jax.nn.softmax(t_A, axis=2)" in body and "    t_Pd = t_P" in body
    assert "    t_Y = jax.lax.psum_scatter(t_Y, 'Y', scatter_dimension=1, tiled=True)" in body
    assert "    t_Ug = jax.nn.gelu(t_U1, approximate=True)" in body and "    t_R = t_X + t_Yd" in body
    assert "# Dropout is lowered as the identity" in out.read_text()
    code, _, err = run(capsys, "export-jax", "Y[B_X] = Pointwise(X[B_X])", "--mesh", "X=2", "--dims", "B=4",
                       "-o", str(tmp_path / "p.py"))
    assert code == 1 and "Pointwise has no JAX lowering" in err
    # the layer's backward: a residual add's operands and a view's take their result's gradient, with no
    # step (the program's own dOut is given); a gradient a step wrote gets it added where it is read
    code, _, err = run(capsys, "export-jax", str(src), "--mesh", mesh, "--dims", dims, "--backward",
                       "-o", str(tmp_path / "b.py"))
    assert code == 0, err
    text = (tmp_path / "b.py").read_text()
    body = text.split("def step(", 1)[1].split("def reference(", 1)[0].splitlines()
    assert body[0].endswith("t_dOut, t_Zd_mask, t_Yd_mask, t_Pd_mask):")
    assert body.index("    t_dZd = t_dOut") + 1 == body.index("    t_dZ = t_dZd * t_Zd_mask")
    assert body.index("    t_dR = t_dR + t_dOut") + 1 == body.index("    t_dYd = t_dR")
    assert "    t_dKn = t_dKs.reshape((2, 8, 1, 4))" in body                  # one device's block of it
    assert "    r['dR'] = r['dR'] + r['dOut']" in text and "    r['dKn'] = r['dKs'].reshape((2, 8, 4, 4))" in text


@pytest.mark.slow
@pytest.mark.skipif(not HAS_JAX, reason="JAX export needs the jax extra: pip install 'symcost[jax]'")
def test_each_rules_jax_lowering_means_what_the_simulator_computes():
    """Every rule's JAX form, forward and each operand's gradient (``jax_grad``, or ``jax.vjp`` of the
    forward for a rule that saves its inputs), against the simulator's NumPy meaning (symcost.arrays), in
    float64 (tests/data/elementwise_jax_check.py, in a process of its own)."""
    from symcost.elementwise import RULES
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "data" / "elementwise_jax_check.py")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines and all(line.endswith(": ok") for line in lines), r.stdout
    lowered = {name for name, rule in RULES.items() if rule.jax}
    assert {line.split()[0] for line in lines if " forward" in line} == lowered == set(RULES) - {"Pointwise"}
    assert sum(" gradient " in line for line in lines) == len(lowered) + 2     # Mul's and Add's two operands


@pytest.mark.slow
@pytest.mark.skipif(not HAS_JAX, reason="JAX export needs the jax extra: pip install 'symcost[jax]'")
@pytest.mark.parametrize("backward", [False, True])
def test_the_sp_layer_in_megatrons_order_costs_what_the_other_order_does(backward):
    """``examples/megatron_sp_layer_sbh.sc`` writes the layer sequence first and the scores heads first, as
    Megatron holds them; the order of a tensor's dimensions is not a cost: the same collectives and the same
    totals as ``megatron_sp_layer.sc`` (the 22B layer at TP 8 on A100s), forward and backward."""
    dims, out = "B=4,T=2048,S=2048,D=6144,K=64,G=1,H=96,F=24576", []
    for name in ("megatron_sp_layer.sc", "megatron_sp_layer_sbh.sc"):
        plan = symcost.derive((ROOT / "examples" / name).read_text(), mesh="Y=8", dims=dims, hw="a100",
                              backward=backward)
        out.append((plan.numeric(), sorted(s.kind for s in plan.collectives)))
    (a, kinds_a), (b, kinds_b) = out
    assert kinds_a == kinds_b and len(kinds_a) >= 4
    assert a == pytest.approx(b, rel=1e-12)


@pytest.mark.slow          # six exported programs run under JAX (12 s); the fast tier checks their text
def test_exported_programs_with_elementwise_work_run_and_agree(tmp_path, capsys):
    """Every output of each exported program, run on 4 host devices, matches the same program on whole
    arrays (one Python process runs them all: JAX starts once). With ``--backward`` too -- the FSDP+TP and
    context-parallel strategies, Megatron's sequence-parallel layer and a Mixtral layer with experts over X
    and TP over Y -- each layout of a tensor its own variable (a parameter sharded beside its gathered copy),
    a gradient's contributions summed, a residual's and a view's gradients passed through, and every
    gradient of an input also checked against ``jax.vjp`` of the forward steps."""
    from symcost.models.config import load_model_config
    from symcost.models.transformer import training_program
    files = []
    mixtral = training_program(load_model_config("mixtral-8x7b"), tp_axes=("Y",), moe=True, ep_axes=("X",))
    backward = [((ROOT / "derivations" / f).read_text(), mesh, dims) for f, mesh, dims in (
        ("fsdp_tp.sc", "X=2,Y=2", "B=16,D=16,F=16"), ("context_parallel.sc", "X=2", "B=4,D=8,H=2,N=2,S=8,T=8"))]
    backward += [ELEMENTWISE_EXPORTS[0], (mixtral, "X=2,Y=2", "B=4,T=4,S=4,D=8,K=2,G=2,H=4,F=8,Er=4,E=4,J=2,M=2,I=4")]
    cases = [(*c, False) for c in ELEMENTWISE_EXPORTS] + [(*c, True) for c in backward]
    for i, (program, mesh, dims, back) in enumerate(cases):
        src, out = tmp_path / f"p{i}.sc", tmp_path / f"p{i}.py"
        src.write_text(program)
        code, _, err = run(capsys, "export-jax", str(src), "--mesh", mesh, "--dims", dims, "-o", str(out),
                           *(["--backward"] if back else []))
        assert code == 0, err
        files.append(str(out))
    driver = ("import runpy, sys\nfor f in sys.argv[1:]:\n    print('==', f)\n    try:\n"
              "        runpy.run_path(f, run_name='__main__')\n    except SystemExit as e:\n"
              "        print('exit', e.code)\n")
    r = subprocess.run([sys.executable, "-c", driver, *files], capture_output=True, text=True, timeout=300,
                       env=NUMBERS_ONLY)
    assert r.returncode == 0, r.stderr
    runs = r.stdout.split("== ")[1:]
    assert len(runs) == len(files)
    for run_out, (program, _, _, back) in zip(runs, cases):
        lines = run_out.splitlines()
        assert lines[-1] == "exit 0", run_out
        assert all(line.endswith((" matches the program on whole arrays", " matches jnp.einsum",
                                  " matches jax.vjp of the forward")) for line in lines[1:-1]), run_out
        statements = symcost.parse(program).statements
        results = {st.result_name for st in statements if getattr(st, "result_name", None)}
        compared = {line.split(":")[0] for line in lines[1:-1] if "jax.vjp" not in line}
        if not back:
            assert compared == results and len(results) >= 1          # every result (19 in the GPT layer)
            continue
        params = {t.name for st in statements if type(st).__name__ == "Declaration" for t in st.tensors}
        by_autodiff = {line.split(":")[0] for line in lines[1:-1] if "jax.vjp" in line}
        assert results | {"d" + p for p in params} <= compared      # and every parameter's gradient,
        assert {"d" + p for p in params} <= by_autodiff             # against JAX's autodiff too


@pytest.mark.skipif(not HAS_JAX, reason="xla-check needs the jax extra: pip install 'symcost[jax]'")
@pytest.mark.slow
def test_xla_check_recognises_reduce_scatter_and_validates():
    import jsonschema
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    r = subprocess.run([sys.executable, "-m", "symcost.cli", "xla-check", "A[I, J_X] * B[J_X, K] -> C[I, K_X]",
                        "--mesh", "X=4", "--dims", "I=256,J=1024,K=512", "--json"], capture_output=True, text=True,
                       env={**os.environ, **env}, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    jsonschema.validate(out, json.loads((SCHEMAS / "xla-check.json").read_text()))
    (c,) = out["xla"]["collectives"]
    assert c["kind"] == "reduce-scatter" and c["hlo"] == "all-reduce" and c["axes"] == ["X"]
    assert out["xla"]["link_bytes"] == out["symcost"]["link_bytes"] == 196_608


@pytest.mark.skipif(not HAS_JAX, reason="xla-check needs the jax extra: pip install 'symcost[jax]'")
@pytest.mark.slow
@pytest.mark.parametrize("target, mesh, dims, kinds", [
    (str(ROOT / "examples" / "megatron_sp_layer.sc"), "Y=4", "B=2,T=64,S=64,D=64,K=4,G=1,H=16,F=256",
     ["all-gather", "reduce-scatter", "all-gather", "reduce-scatter"]),
    ("In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]", "X=2,Y=4", "B=64,D=64,F=256",
     ["all-gather", "reduce-scatter"]),
])
def test_xla_check_compiles_a_whole_program(target, mesh, dims, kinds):
    """A program of several statements, elementwise work included, compiled whole from its inputs' layouts
    to its results': XLA's partitioner inserts the collectives Megatron's sequence parallelism has (an
    AllGather before each TP region, a ReduceScatter after), over the same axis and as many bytes, and so
    it does for the MLP chain."""
    r = subprocess.run([sys.executable, "-m", "symcost.cli", "xla-check", target, "--mesh", mesh, "--dims", dims,
                        "--json"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(out, json.loads((SCHEMAS / "xla-check.json").read_text()))
    xla, ours = out["xla"]["collectives"], out["symcost"]["collectives"]
    assert [c["kind"] for c in xla] == kinds and all(c["axes"] == ["Y"] for c in xla)
    assert [c["link_bytes"] for c in xla] == [c["link_bytes"] for c in ours]
    assert out["xla"]["link_bytes"] == out["symcost"]["link_bytes"] > 0


def test_xla_checks_iota_replica_groups_name_their_axes():
    """XLA writes a collective's groups as ``[groups,size]<=[devices]``, transposed with ``T(...)``: the
    devices of a group differ along the mesh axes it spans."""
    from symcost.export.xla_check import _group_axes
    from symcost.mesh import parse_mesh
    mesh = parse_mesh("X=2,Y=4")
    assert _group_axes("all-reduce(%a), replica_groups=[2,4]<=[8], to_apply=%add", mesh) == (["Y"], 4)
    assert _group_axes("all-gather(%a), replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}", mesh) == (["X"], 2)
    assert _group_axes("all-reduce(%a), replica_groups=[1,8]<=[8]", mesh) == (["X", "Y"], 8)


# ------------------------------------------------------------------------------------ schemas


SCHEMA_CASES = [
    ("derive", ["derive", "In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]", "--mesh", "X=4,Y=4",
                "--dims", "B=1024,D=8192,F=32768", "--hw", "tpu-v5p", "--json"]),
    ("derive", ["derive", str(ROOT / "derivations" / "fsdp.sc"), "--mesh", "X", "--backward", "--json"]),
    ("check", ["check", "A[I_X, J]", "--json"]),
    ("solve", ["solve", str(ROOT / "derivations" / "fsdp.sc"), "--mesh", "X", "--for", "B", "--backward",
               "--hw", "tpu-v5p", "--json"]),
    ("optimize", ["optimize", str(ROOT / "derivations" / "fsdp_tp.sc"), "--chips", "64", "--vary", "X,Y",
                  "--mesh", "X:2,Y", "--dims", "B=48000,F=32768,D=8192", "--json"]),
    ("model", ["model", "llama3-70b", "--decode", "--prefill", "--frontier", "--hw", "tpu-v5e", "--chips", "8",
               "--batch", "32", "--dtype", "int8", "--json"]),
    ("hardware", ["hardware", "tpu-v5p", "--json"]),
    ("model", ["model", "gpt3-175b", "--train", "--hw", "a100", "--chips", "64", "--tp", "8", "--pp", "8",
               "--sequences", "64", "--seq", "2048", "--interleave", "3", "--recompute", "selective",
               "--seq-parallel", "--json"]),
]


@pytest.mark.parametrize("schema, argv", SCHEMA_CASES, ids=[f"{s}-{i}" for i, (s, _) in enumerate(SCHEMA_CASES)])
def test_json_output_matches_its_schema(capsys, schema, argv):
    import jsonschema
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    jsonschema.validate(json.loads(out), json.loads((SCHEMAS / f"{schema}.json").read_text()))

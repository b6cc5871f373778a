"""The notation: spellings that must mean the same thing, round trips, and errors with carets."""
import pytest
from hypothesis import given, settings, strategies as st

import symcost
from symcost.errors import NotationError
from symcost.notation import Collective, Einsum, parse, parse_tensor

from conftest import examples

EQUIVALENT_SPELLINGS = [
    ("In[B_XY, D]", "In[B_{XY}, D]", "In[B_{X,Y}, D]"),
    ("A[I, J_X] * B[J, K] -> C[I, K]", "A[I, J_X] · B[J, K] → C[I, K]", "A[I,J_X]@B[J,K]->C[I,K]"),
    ("W:int8[D_X, F]", "int8:W[D_X, F]"),
    ("C[I, K]{U_XY}", "C[I, K]{U_{XY}}", "C[I, K]{U_{X,Y}}", "C[I, K]{U_X, U_Y}"),
]


@pytest.mark.parametrize("spellings", EQUIVALENT_SPELLINGS)
def test_equivalent_spellings_parse_identically(spellings):
    first = parse(spellings[0])
    for s in spellings[1:]:
        assert parse(s) == first


def test_equivalent_spellings_give_identical_plans():
    plans = [symcost.derive(f"In[{b}, D] * W[D, F] -> Out[B, F]", mesh="X=2,Y=4")
             for b in ("B_XY", "B_{XY}", "B_{X,Y}")]
    assert len({tuple(s.signature() for s in p.steps) for p in plans}) == 1
    assert [s.kind for s in plans[0].collectives] == ["AllGather"]
    assert plans[0].collectives[0].axes == ("X", "Y")


def test_multi_letter_axes_need_braces():
    t = parse_tensor("In[B_{data,model}, D]")
    assert t.dims[0].axes == ("data", "model")
    with pytest.raises(NotationError) as e:
        parse("In[B_da1, D]")
    assert "braces" in str(e.value)


def test_structure_of_chain_assignment_and_collective():
    prog = parse("""
        # the Megatron MLP
        Tmp[B_X, F_Y] = In[B_X, D] *_D Win[D, F_Y]
        Out[B_X, D]{U_Y} = Tmp[B_X, F_Y] *_F Wout[F_Y, D]
        ReduceScatter_Y(Out[B_X, D]{U_Y}) -> Out[B_X, D_Y]
    """)
    a, b, c = prog.statements
    assert isinstance(a, Einsum) and a.assignment and a.contract == (("D",),)
    assert b.output.unreduced == ("Y",)
    assert isinstance(c, Collective) and c.kind == "ReduceScatter" and c.axes == ("Y",)
    assert a.span.line == 3 and c.span.line == 5


def test_contraction_lists_and_literal_dims():
    e = parse("A[I, J, K] *_{J,K} B[J, K, L] -> C[I, L]").statements[0]
    assert e.contract == (("J", "K"),)
    kv = parse_tensor("KV[2, B_Z, S, K_Y, H]")
    assert kv.dims[0].size == 2 and kv.dims[1].axes == ("Z",)


def test_scalar_and_semicolons():
    prog = parse("A[] * B[] -> C[]; D[I_X]")
    assert len(prog.statements) == 2
    assert prog.statements[0].operands[0].dims == ()


@pytest.mark.parametrize("text, line, column, words", [
    ("A[I_X, J", 1, 9, "end of input"),
    ("A[I_X,, J]", 1, 7, "unexpected ','"),
    ("A[I] B[J]", 1, 6, "unexpected 'B'"),
    ("A[I] -> \n", 1, 9, "expected a name"),
    ("A[I$]", 1, 4, "unexpected character '$'"),
    ("ok[I]\nA[I_X, I]", 2, 8, "dimension I appears twice"),
    ("Foo_X(A[I]) -> A[I]", 1, 1, "unknown collective 'Foo'"),
    ("AllGather(A[I_X]) -> A[I]", 1, 1, "names no mesh axis"),
    ("A[I]{V_X}", 1, 6, "U_<axes>"),
    ("W:int9[D]", 1, 3, "is a dtype"),
])
def test_syntax_errors_point_at_the_text(text, line, column, words):
    with pytest.raises(NotationError) as e:
        parse(text)
    err = e.value
    assert (err.line, err.column) == (line, column)
    assert words in str(err)
    assert "^" in str(err)  # the caret snippet
    assert isinstance(err, ValueError) and isinstance(err, symcost.SymcostError)


def test_caret_sits_under_the_offending_text():
    with pytest.raises(NotationError) as e:
        parse("In[B_X, D_Y] * W[D_X,, F_Y]")
    src, caret = str(e.value).splitlines()[1:3]
    assert src.strip() == "In[B_X, D_Y] * W[D_X,, F_Y]"
    assert src[caret.index("^")] == ","


def test_user_text_is_never_evaluated(monkeypatch):
    """No string reaches sympify / parse_expr / eval: SymPy objects are built from the parse tree."""
    import builtins
    import sys

    import sympy
    from sympy.parsing import sympy_parser

    core_sympify = sys.modules["sympy.core.sympify"]

    strings = []
    real = core_sympify.sympify

    def spy(a, *args, **kw):
        if isinstance(a, str):
            strings.append(a)
        return real(a, *args, **kw)

    for mod in (sympy, core_sympify):
        monkeypatch.setattr(mod, "sympify", spy)
    monkeypatch.setattr(sympy_parser, "parse_expr", lambda *a, **k: strings.append(a[0]))
    real_eval = builtins.eval
    monkeypatch.setattr(builtins, "eval", lambda *a, **k: strings.append(a[0]) or real_eval(*a, **k))
    with pytest.raises(NotationError):
        parse("__import__('os').system('echo hacked')[I]")
    plan = symcost.derive("A[I, J_X] * B[J, K] -> C[I, K]", mesh="X=4", dims="I=8,J=8,K=8")
    plan.to_json()
    str(plan)
    assert strings == []


dim_names = st.sampled_from(["B", "D", "F", "I", "J", "K", "S", "H2"])
axis_runs = st.lists(st.sampled_from(["X", "Y", "Z"]), max_size=3, unique=True)


@given(st.lists(st.tuples(dim_names, axis_runs), min_size=0, max_size=4, unique_by=lambda t: t[0]),
       st.sampled_from([None, "int8", "fp32"]), st.sampled_from(["", "{U_W}"]))
@settings(max_examples=examples(200), deadline=None)
def test_parse_of_str_round_trips(dims, dtype, unreduced):
    body = ", ".join(d + ("_" + "".join(a) if a else "") for d, a in dims)
    text = f"T{':' + dtype if dtype else ''}[{body}]{unreduced}"
    t = parse_tensor(text)
    assert parse_tensor(str(t)) == t
    assert str(t) == text


# ---------------------------------------------------------------- a program parsed line by line

def _spans(record, out: list) -> list:
    """Every span a record holds, in order (spans are left out of records' equality)."""
    import dataclasses

    from symcost.notation.records import Span
    if isinstance(record, Span):
        out.append(record)
    elif isinstance(record, tuple):
        for r in record:
            _spans(r, out)
    elif dataclasses.is_dataclass(record):
        for f in dataclasses.fields(record):
            _spans(getattr(record, f.name), out)
    return out


def _programs() -> list[str]:
    import contextlib
    import io

    from symcost.cli import main
    from conftest import ROOT
    texts = [p.read_text() for d in ("examples", "derivations") for p in sorted((ROOT / d).glob("*.sc"))]
    for model in ("llama3-8b", "mixtral-8x7b", "deepseek-v3", "gpt3-175b"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["model", model, "--program"]) == 0
        texts.append(out.getvalue())
    texts += ["A[I, J_X] * B[J, K] -> C[I, K]; AllReduce_X(C[I, K]{U_X}) -> C[I, K]  # two on a line\r\n\r\n"
              "  param W[D, F]\r\nY = X[B, D] *_D W[D, F]\r\n",
              "\n\n# a comment\nSend_{Z,2}(A[B_X, D]) -> A[B_X, D]\nrank B=64\n"]
    return texts


def test_a_program_parsed_line_by_line_is_the_whole_texts_parse_spans_included():
    """No statement spans two lines, so each line is parsed once and kept (the programs a search writes
    share most of their lines), its spans moved down to its line: the same records, the same carets."""
    from symcost.notation import parser
    texts = _programs()
    assert len(texts) > 12
    for text in texts:
        whole, by_line = parser._parsed_whole(text), parser._parse(text)
        assert by_line == whole
        assert _spans(by_line.statements, []) == _spans(whole.statements, []), text
        assert by_line.text == whole.text


@pytest.mark.parametrize("text", ["A[I, J_X] * B[J, K] -> C[I, K]\nB[J, K] *_ -> D[J]",
                                  "A[I, J] -> B[I, J]\n\nFoo_X(A[I, J]) -> A[I, J]"])
def test_an_error_on_a_later_line_points_at_that_line(text):
    with pytest.raises(NotationError) as err:
        parse(text)
    assert err.value.line == len(text.splitlines()) and "^" in str(err.value)

"""The documents' examples are real output: every ``    $ symcost ...`` line of README.md and docs/*.md is
run and its output compared with the lines that follow it (up to the next ``$`` line or the end of the
indented block). When the engine's numbers change, ``python tests/update_examples.py`` rewrites them."""
import pytest

from update_examples import ROOT, all_examples, compared, examples, run, update

EXAMPLES = all_examples()


def test_the_front_page_is_short_and_every_page_has_a_title():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert page.read_text().startswith("# "), page.name


@pytest.mark.slow
def test_the_update_script_rewrites_outputs_in_place(tmp_path):
    """A stale output is replaced by the command's, a head-only one keeps its length and its ``...``, and
    the prose around them is left as it was."""
    cmd = 'symcost check "In[B_X, D_X] * W[D_X, F_Y] -> Out[B_X, F_Y]"'
    doc = tmp_path / "page.md"
    doc.write_text(f"Prose.\n\n    $ {cmd}\n    stale\n\nMore prose.\n\n    $ {cmd}\n    old head\n    ...\n\nEnd.\n")
    assert update([doc], check=True) == 2 and "stale" in doc.read_text()
    assert update([doc]) == 2
    real = run(cmd)
    assert real[0].startswith("symcost: mesh axis 'X' shards two dimensions of In")
    assert doc.read_text() == ("Prose.\n\n" + f"    $ {cmd}\n" + "".join(f"    {l}\n" for l in real)
                               + "\nMore prose.\n\n" + f"    $ {cmd}\n    {real[0]}\n    ...\n\nEnd.\n")
    assert [e.expect for e in examples(doc)] == [tuple(real), (real[0], "...")]


@pytest.mark.slow    # one process per example
@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.where} {e.cmd[8:60]}" for e in EXAMPLES])
def test_example(example):
    want, got = compared(example, run(example.cmd))
    assert got == want, f"{example.where}: run `python tests/update_examples.py` if the change is intended"

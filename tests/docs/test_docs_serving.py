"""docs/serving-and-runs.md shows real output: tests/docs/test_readme.py runs each of its ``$ symcost ...``
lines with every other page's and compares the output (how long a search took aside); here, that the page
keeps its examples."""
from conftest import ROOT
from update_examples import examples

PAGE = ROOT / "docs" / "serving-and-runs.md"


def test_the_page_has_examples():
    cmds = [e.cmd for e in examples(PAGE)]
    assert len(cmds) >= 9
    assert {c.split()[1] for c in cmds} == {"serve", "train"}     # both commands, each shown with its output
    assert all(e.expect for e in examples(PAGE))

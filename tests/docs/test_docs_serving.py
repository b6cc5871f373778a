"""docs/serving-and-runs.md shows real output: every ``$ symcost ...`` line is run and its output compared
with the indented lines that follow it (how long a search took aside)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

PAGE = ROOT / "docs" / "serving-and-runs.md"
pytestmark = pytest.mark.slow    # one process per example


def examples() -> list[tuple[str, list[str]]]:
    out, cmd, expect = [], None, []
    for line in PAGE.read_text().splitlines() + [""]:
        m = re.match(r"^    \$ (symcost .*)$", line)
        if cmd and (m or not line.startswith("    ")):
            out.append((cmd, expect))
            cmd, expect = None, []
        if m:
            cmd = m.group(1)
        elif cmd:
            expect.append(line[4:])
    return out


@pytest.mark.parametrize("cmd,expect", examples(), ids=[c[:70] for c, _ in examples()])
def test_page_example(cmd, expect, untimed):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "100"}
    r = subprocess.run(cmd, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    got = [untimed(l.rstrip()) for l in (r.stdout + r.stderr).rstrip("\n").splitlines()]
    assert got == [untimed(l.rstrip()) for l in expect]


def test_the_page_has_examples():
    assert len(examples()) >= 9

"""The README's examples are real output: every ``$ symcost ...`` line in an indented block is run and its
output compared with the lines that follow it (up to the next ``$`` line or the end of the block)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow    # one process per example


def _block_goes_on(lines, i):
    """A blank line inside an indented block: the next non-blank line is indented output, not a new example."""
    j = i
    while j < len(lines) and not lines[j].strip():
        j += 1
    return j < len(lines) and lines[j].startswith("    ") and not lines[j].startswith("    $ ")


#: the pages whose examples are checked: the README and the docs pages written as real output
PAGES = ("README.md", "docs/links.md")


def examples():
    out = []
    for page in PAGES:
        out += _examples((ROOT / page).read_text().splitlines())
    return out


def _examples(lines):
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^    \$ (symcost .*)$", lines[i])
        if not m:
            i += 1
            continue
        cmd, expect, i = m.group(1), [], i + 1
        while i < len(lines) and not lines[i].startswith("    $ "):
            if lines[i].startswith("    "):
                expect.append(lines[i][4:])
            elif lines[i].strip() or not _block_goes_on(lines, i):
                break
            else:
                expect.append("")
            i += 1
        while expect and not expect[-1].strip():
            expect.pop()
        out.append((cmd, expect))
    return out


@pytest.mark.parametrize("cmd,expect", examples(), ids=[c[:60] for c, _ in examples()])
def test_readme_example(cmd, expect, untimed):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "100"}
    r = subprocess.run(cmd, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    got = (r.stdout + r.stderr).rstrip("\n").splitlines()
    got = [untimed(l.rstrip()) for l in got]      # how long a search took is the one figure let differ
    want = [untimed(l.rstrip()) for l in expect]
    if want and want[-1].strip() == "...":   # an example may show only the head of its output
        want = want[:-1]
        got = got[:len(want)]
    assert got == want

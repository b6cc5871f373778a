"""The documents' examples, read, run and rewritten.

An example is an indented ``    $ symcost ...`` line in README.md or docs/*.md followed by the output it
prints (indented too, up to the next ``$`` line or the end of the indented block; a blank line inside the
block is output). An output that ends in ``...`` shows only the head of what the command prints.
``tests/docs/test_readme.py`` runs every example and compares; when a change to the engine alters the numbers,
this script runs them again and writes their new output in place::

    python tests/update_examples.py                 # every document
    python tests/update_examples.py docs/search.md  # some of them
    python tests/update_examples.py --check         # say which differ, change nothing (exit 1 if any)

It runs ``symcost`` from the interpreter it is run with (put the project first on PYTHONPATH) and writes
only the output lines, so the prose around an example never changes. A plain command runs in this process
(``symcost.cli.main``, what the ``symcost`` script calls: the interpreter and its imports are paid once,
not once an example); one that needs a shell (a pipe, a redirection) or JAX (``trace``) runs in a shell.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = re.compile(r"^    \$ (symcost .*)$")
#: how long a search took, as its "priced ..." line says it: the one figure that changes from run to run
TOOK = re.compile(r"(priced [^;]*?) in \d[\d.e+-]* (?:ns|us|ms|s)\b")


def documents() -> list[Path]:
    """README.md and every page under docs/, in a fixed order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Example:
    path: Path
    line: int                  # the ``$`` line, 0-based
    end: int                   # one past the last line of the shown output
    cmd: str
    expect: tuple[str, ...]    # the shown output, without the 4-space indent

    @property
    def where(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line + 1}"

    @property
    def head_only(self) -> bool:
        return bool(self.expect) and self.expect[-1].strip() == "..."


def _block_goes_on(lines: list[str], i: int) -> bool:
    """A blank line inside an indented block: the next non-blank line is indented output, not a new example."""
    j = i
    while j < len(lines) and not lines[j].strip():
        j += 1
    return j < len(lines) and lines[j].startswith("    ") and not lines[j].startswith("    $ ")


def examples(path: Path) -> list[Example]:
    lines = path.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = COMMAND.match(lines[i])
        if not m:
            i += 1
            continue
        start, expect, i = i, [], i + 1
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
        out.append(Example(path, start, start + 1 + len(expect), m.group(1), tuple(expect)))
    return out


def all_examples(paths=None) -> list[Example]:
    return [e for p in (paths or documents()) for e in examples(p)]


#: commands run in a shell even without shell syntax: they import JAX, which stays out of this process
IN_A_SHELL = {"trace", "export-jax", "xla-check", "calibrate", "measure"}


def run(cmd: str) -> list[str]:
    """What ``cmd`` prints (standard output, then standard error), each line's trailing spaces dropped."""
    argv = in_process(cmd)
    text = _main(argv[1:]) if argv else _shell(cmd)
    return [line.rstrip() for line in text.rstrip("\n").splitlines()]


def in_process(cmd: str) -> list[str] | None:
    """``cmd`` as the words the shell would pass to ``symcost``, where this process can run it as the
    script would: no pipe, redirection or list of commands, and no JAX. None otherwise."""
    lexer = shlex.shlex(cmd, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    operator = any(w and set(w) <= set("();<>|&") for w in words)
    if operator or len(words) < 2 or words[0] != "symcost" or words[1] in IN_A_SHELL:
        return None
    return words


def _main(args: list[str]) -> str:
    from symcost.cli import main
    out, err = io.StringIO(), io.StringIO()
    columns, cwd = os.environ.get("COLUMNS"), os.getcwd()
    os.environ["COLUMNS"] = "100"
    try:
        os.chdir(ROOT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(args)
            except SystemExit:          # a usage error: argparse has printed it
                pass
    finally:
        os.chdir(cwd)
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return out.getvalue() + err.getvalue()


def _shell(cmd: str) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "COLUMNS": "100", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run(cmd, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return r.stdout + r.stderr


def untimed(line: str) -> str:
    return TOOK.sub(r"\1 in ...", line)


def compared(example: Example, got: list[str]) -> tuple[list[str], list[str]]:
    """(what the document shows, what the command printed), as the test compares them."""
    want = [untimed(line.rstrip()) for line in example.expect]
    got = [untimed(line) for line in got]
    if example.head_only:
        want = want[:-1]
        got = got[:len(want)]
    return want, got


def rewritten(example: Example, got: list[str]) -> list[str]:
    """The document's new output lines for ``example`` (indented; a head-only example keeps its length)."""
    if example.head_only:
        got = got[:len(example.expect) - 1] + ["..."]
    return [("    " + line) if line else "" for line in got]


def update(paths=None, check: bool = False) -> int:
    """Run every example of ``paths``; rewrite the ones whose output changed (or, with ``check``, list them).
    Returns how many differ."""
    changed = 0
    for path in (paths or documents()):
        lines = path.read_text().splitlines()
        # from the last example up, so that earlier examples' line numbers stay valid
        for ex in reversed(examples(path)):
            got = run(ex.cmd)
            want, have = compared(ex, got)
            if want == have:
                continue
            changed += 1
            print(f"{ex.where}: {ex.cmd[:80]}", file=sys.stderr)
            if not check:
                lines[ex.line + 1:ex.end] = rewritten(ex, got)
        if not check:
            path.write_text("\n".join(lines) + "\n")
    return changed


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [Path(a).resolve() for a in argv if a != "--check"] or None
    n = update(paths, check)
    print(f"{n} example(s) {'differ' if check else 'rewritten'}", file=sys.stderr)
    return 1 if check and n else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

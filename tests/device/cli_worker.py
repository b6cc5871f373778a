"""symcost's command line run in this process, one command after another, for the device tests.

Each line of stdin is a JSON list of arguments; each answer, one line on the channel the parent reads, is
``{"code", "stdout", "stderr"}``: what the command exited with and printed, as ``python -m symcost.cli``
would in a process of its own (an argparse usage error exits 2 with its message; an exception that escaped
``main`` is printed with its traceback and exits 1, as Python does). The device tests start one of these
per test module, with the eight host devices XLA is told to make, so that JAX is imported and its devices
made once rather than once a command (about 1.6 s each); every command still runs from ``main``.

Anything written straight to file descriptor 1 (not through ``sys.stdout``) goes to this process's stderr,
so that it cannot break the answers.
"""
import contextlib
import io
import json
import os
import sys
import traceback


def run(cli, argv: list) -> dict:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli(argv)
        except SystemExit as e:          # argparse's usage errors and --help, as the interpreter exits
            code = e.code
            if not isinstance(code, int):
                if code is not None:
                    print(code, file=sys.stderr)
                code = 0 if code is None else 1
        except BaseException:            # noqa: B036 -- what escaped main, shown as Python would
            traceback.print_exc()
            code = 1
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def main() -> None:
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8", line_buffering=True)
    from symcost.cli import main as cli
    for line in sys.stdin:
        answers.write(json.dumps(run(cli, json.loads(line))) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()

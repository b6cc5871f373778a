"""The ``symcost`` command line: the Python API plus renderers.

    symcost derive "A[I, J_X] * B[J, K] -> C[I, K]" --mesh X=4 --dims I=256,J=8192,K=8192 --hw tpu-v5e
    symcost check  "A[I_X, J_X]"
    symcost hardware tpu-v5p

Exit status: 0 success, 1 well-formed but invalid input (a sharding, a collective, a plan that cannot be
simulated or exported, a configuration that does not fit in memory), 2 a usage or notation error, 3 an internal
error (a bug). Errors are one sentence on stderr with the caret snippet; never a traceback.
"""
from __future__ import annotations

import json
import os
import sys

from .. import progress
from ..errors import (DoesNotFit, ExportError, NotationError, ShardingError, SimulationError, SymcostError, UsageError)
from . import device, documents, models, plans, search, serve, trace, training
from .options import Parser

#: which exit status each error gives (the first class that matches, in order)
EXIT_CODES = ((ShardingError, 1), (DoesNotFit, 1), (SimulationError, 1), (ExportError, 1), (NotationError, 2),
              (UsageError, 2), (SymcostError, 2))
INTERNAL = 3


def exit_code(error: SymcostError) -> int:
    return next(code for cls, code in EXIT_CODES if isinstance(error, cls))


def build_parser() -> Parser:
    from .. import __version__
    p = Parser(prog="symcost", description="Symbolic cost derivation for sharded tensor programs "
                                           "(the notation of 'How to Scale Your Model').")
    p.add_argument("--version", action="version", version=f"symcost {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for module in (plans, models, training, serve, documents, device, search, trace):
        module.register(sub)
    return p


#: the parser ``main`` reads with, built at its first call: parsing leaves a parser as it was, so a process that
#: calls ``main`` many times (a notebook, a test suite) builds its hundreds of options once
_PARSER: list[Parser] = []


def main(argv=None) -> int:
    if not _PARSER:
        _PARSER.append(build_parser())
    if not (sys.argv[1:] if argv is None else argv):    # no command: the commands, not a one-line complaint
        _PARSER[0].print_help(sys.stderr)
        return 2
    args = _PARSER[0].parse_args(argv)
    try:
        with progress.showing(sys.stderr.isatty()):
            return args.handler(args)
    except SymcostError as e:
        sys.stderr.write(f"symcost: {e}\n")
        if getattr(args, "json", False):   # --json asked for machine-readable output: the error is an object too
            print(json.dumps({"error": {"kind": type(e).__name__, "message": e.message, "line": e.line,
                                        "column": e.column, "hint": e.hint, "exit_code": exit_code(e)}}, indent=2))
        return exit_code(e)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except RecursionError:
        sys.stderr.write("symcost: the input is too deeply nested\n")
        return 2
    except Exception as e:  # a bug, not the user's fault: still no traceback unless asked for
        if os.environ.get("SYMCOST_DEBUG"):
            raise
        sys.stderr.write(f"symcost: internal error ({type(e).__name__}: {e}); set SYMCOST_DEBUG=1 for details\n")
        return INTERNAL


__all__ = ["main", "build_parser", "exit_code", "EXIT_CODES"]

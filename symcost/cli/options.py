"""Options and helpers every command shares (declared once)."""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import UsageError


class Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors: exit 2, one line, no traceback
        self.print_usage(sys.stderr)
        sys.stderr.write(f"symcost: {message}\n")
        raise SystemExit(2)


def number(text: str) -> float:
    """A float option's value: a finite number (``nan`` and ``inf`` are words Python's float reads, not
    sizes, rates or counts)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def target(p, metavar: str = "EXPR|FILE", dest: str = "program", help_: str = "notation, or a file of it"):
    p.add_argument(dest, metavar=metavar, help=help_)


def mesh_dims_hw(p):
    p.add_argument("--mesh", help="axes: X=4,Y=8; X (symbolic); X=16:2 (2 links); X=4:dcn; X=8:nvlink; X:M_X")
    p.add_argument("--dims", help="bindings: B=1024,D=8192")
    p.add_argument("--hw", help="hardware preset (see 'symcost hardware')")


def json_flag(p):
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")


def common(p, program: bool = True):
    """The program and the options every derivation command takes."""
    if program:
        target(p)
    mesh_dims_hw(p)
    json_flag(p)


def planning(p):
    p.add_argument("--backward", action="store_true", help="also derive the backward pass")
    p.add_argument("--no-overlap", action="store_true", help="sum compute and communication times")
    p.add_argument("--params", help="the parameters (default: 'param' declarations, else inputs named W...)")
    p.add_argument("--reuse", choices=("none", "activations", "all"),
                   help="forward gathers the backward pass may reuse (default: activations)")
    p.add_argument("--efficiency", action="store_true",
                   help="price with the preset's achieved efficiency (costs keep eta_math, eta_hbm, eta_net_* as "
                        "symbols); default: the book's ideal machine")
    p.add_argument("--moves", default="auto",
                   help="moves the engine may insert: auto (strategy for programs that declare parameters, else "
                        "all), all, strategy (gathers, slices, reductions), none, or a list of kinds")


def given(args, name: str) -> bool:
    """Whether the user gave a flag: set, a count of 0 included (argparse leaves the flags not given at
    None, or False for a switch)."""
    value = getattr(args, name, None)
    return value is not None and value is not False


def refuse_unread(args, names, read, why) -> None:
    """The one rule for a flag the command was not asked to read: each of ``names`` :func:`given` where
    ``read(name)`` is false is a usage error, ``why(flag, name)`` its message (a flag is read or refused,
    never dropped)."""
    for name in names:
        if given(args, name) and not read(name):
            raise UsageError(why("--" + name.replace("_", "-"), name))


def read_program(arg: str) -> str:
    """A program given on the command line: ``-`` (standard input), a file's contents, or the notation
    itself. Text that cannot be notation (a path: it has a '.' or a '/' and no brackets) must be a file."""
    if arg == "-":
        return sys.stdin.read().removeprefix("\ufeff")
    if "[" in arg:
        return arg
    if os.path.isdir(arg):
        raise UsageError(f"{arg} is a folder, not a program file")
    if os.path.exists(arg):
        try:
            with open(arg, encoding="utf-8") as f:
                return f.read().removeprefix("\ufeff")
        except UnicodeDecodeError:
            raise UsageError(f"cannot read {arg}: it is not UTF-8 text (a program file holds notation)") from None
        except OSError as e:
            raise UsageError(f"cannot read {arg}: {e.strerror}") from None
    if any(c in arg for c in "./\\"):
        raise UsageError(f"no such file: {arg} (notation has brackets, e.g. A[I_X, J])")
    return arg


def derive_from(args, **extra):
    """The plan the arguments ask for: one way for every command (symcost.derive)."""
    from ..api import derive
    kw = dict(overlap=not getattr(args, "no_overlap", False), moves=getattr(args, "moves", "auto"))
    if getattr(args, "objective", None):
        kw["objective"] = args.objective
    if getattr(args, "efficiency", False):
        kw["efficiency"] = True
    if getattr(args, "backward", False):
        kw.update(backward=True, reuse=args.reuse or "activations", params=args.params)
    else:           # what only the backward pass reads
        refuse_unread(args, ("params", "reuse"), lambda name: False,
                      lambda flag, name: f"{flag} is read by the backward pass: add --backward or drop {flag}")
    mesh = extra.pop("mesh", args.mesh)
    names = extra.pop("names", ())      # sizes the command reads itself (optimize's --chips N), not the program
    kw.update(extra)
    plan = derive(read_program(args.program), mesh, args.dims, args.hw, **kw)
    refuse_unused_dims(args.dims, plan.size_names, names)
    return plan


def refuse_unused_dims(dims, known, extra=()) -> None:
    """Every name ``--dims`` binds must be a size the program uses (``known``: its dimensions, mesh axes and
    link counts) or one the command reads itself (``extra``): a misspelt dimension is an error on the command
    line (the Python API takes a dictionary of sizes shared by several programs)."""
    from ..binding import parse_dims
    unknown = sorted(set(parse_dims(dims)) - set(known) - set(extra))
    if unknown:
        raise UsageError(f"--dims binds {unknown[0]}, which the program does not use; its sizes are "
                         f"{', '.join(sorted(known))}")


def writable(path: str, flag: str) -> None:
    """Refuse before any work an output that cannot be written (its folder missing or read-only, a folder
    in its place): a calibration or a measurement must not run for minutes and then fail to save."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path} is a folder: name a file in it")
    if not os.path.isdir(folder):
        raise UsageError(f"cannot write {path}: no folder {folder}")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"cannot write {path}: permission denied")


def write_output(path: str, text: str, quiet: bool = False) -> None:
    """Write a generated file; an unwritable path is a usage error, not a traceback."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror}") from None
    if not quiet:
        print(f"wrote {path}")

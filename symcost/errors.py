"""Errors symcost raises for bad input.

Every error derives from :class:`SymcostError`, which is also a :class:`ValueError`, so callers may
catch either. Errors about the user's text carry the position and render a caret snippet::

    >>> from symcost import parse
    >>> parse("A[I_X, J")
    Traceback (most recent call last):
    ...
    symcost.errors.NotationError: unexpected end of input; expected ',' or ']' (line 1, column 9)
      A[I_X, J
              ^

Which exit status each error gives is the command line's business (``symcost.cli``), not the classes'.
"""
from __future__ import annotations


class SymcostError(ValueError):
    """Root of every error symcost raises for bad input."""

    def __init__(self, message: str, *, text: str | None = None, line: int | None = None,
                 column: int | None = None, width: int = 1, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.text = text
        self.line = line
        self.column = column
        self.width = max(1, width)
        self.hint = hint

    def snippet(self) -> str:
        """The offending line with a caret under the offending text (empty when there is no position)."""
        if self.text is None or self.line is None or self.column is None:
            return ""
        lines = self.text.splitlines() or [""]
        if not 1 <= self.line <= len(lines):
            return ""
        src = lines[self.line - 1]
        return f"  {src}\n  {' ' * (self.column - 1)}{'^' * self.width}"

    def __str__(self) -> str:
        where = f" (line {self.line}, column {self.column})" if self.line is not None else ""
        out = self.message + where
        snip = self.snippet()
        if snip:
            out += "\n" + snip
        if self.hint:
            out += "\n  " + self.hint
        return out


class NotationError(SymcostError):
    """The text is not valid symcost notation (a syntax error)."""


class ShardingError(SymcostError):
    """Well-formed input that describes an invalid sharding, shape or collective."""


class UsageError(SymcostError):
    """A bad command-line or API argument (unknown hardware, malformed --mesh or --dims, ...)."""


class DoesNotFit(SymcostError):
    """A configuration whose weights, caches or activations do not fit in the devices' memory, asked for
    an answer that only a running configuration has (a plot of its throughput, say)."""


class SimulationError(SymcostError):
    """A plan that does not compute what it claims (found by the multi-device simulator)."""


class ExportError(SymcostError):
    """A plan that cannot be written as a JAX program."""

"""The notation: text -> syntax tree with source positions (book Part 3).

    >>> stmt = parse("In[B_X, D_Y] * W[D_X, F_Y] -> Out[B_X, F_Y]").statements[0]
    >>> [str(t) for t in stmt.operands], str(stmt.output)
    (['In[B_X, D_Y]', 'W[D_X, F_Y]'], 'Out[B_X, F_Y]')

:mod:`.records` holds the immutable records (their ``span`` points back at the text); :mod:`.parser`
builds them with the grammar ``symcost/grammar/symcost.lark``. Nothing here knows of meshes or costs.
"""
from .parser import GRAMMAR_PATH, parse, parse_tensor
from .records import (COLLECTIVE_KINDS, HOST_KINDS, NO_SPAN, Apply, Collective, Declaration, DimRef, Einsum,
                      Program, Ranking, Span, Statement, TensorRef, format_axes, format_tensor)

__all__ = ["parse", "parse_tensor", "GRAMMAR_PATH", "COLLECTIVE_KINDS", "HOST_KINDS", "NO_SPAN", "Apply", "Collective",
           "Declaration", "DimRef", "Einsum", "Program", "Ranking", "Span", "Statement", "TensorRef", "format_axes",
           "format_tensor"]

"""The public face: :func:`derive`, :func:`check` and :func:`clear_caches`.

    >>> import symcost
    >>> plan = symcost.derive("In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]",
    ...                       mesh="X=4,Y=4")
    >>> [s.signature() for s in plan.collectives]
    ['AllGather_Y(In[B_X, D_Y]) -> In[B_X, D]', 'ReduceScatter_Y(Out[B_X, D]{U_Y}) -> Out[B_X, D_Y]']

Everything here delegates: one way plans a program (:func:`symcost.program.derive_program`), and the
command line, plots and exports go through it too.
"""
from __future__ import annotations

from . import caching
from .binding import parse_dims
from .plan import Plan
from .program import derive_program


def derive(text, mesh=None, dims=None, hw=None, *, backward: bool = False, reuse: str = "activations",
           params=None, overlap=True, objective: str = "time", moves=None, strict: bool = False,
           efficiency: bool = False) -> Plan:
    """Derive the plan of a program: the collectives it needs, in order, with their costs.

    ``mesh``: a ``--mesh`` string, a dict or a :class:`~symcost.mesh.Mesh` (default: a symbolic one-link
    ICI axis for every axis the notation names); ``dims``: sizes to bind (``"B=1024,D=8192"`` or a dict; it
    may name sizes the program does not use, as a dictionary of a model's sizes shared by several programs
    does: ``plan.size_names`` lists those it does, and the command line's ``--dims`` refuses the others);
    ``hw``: a hardware preset name. ``backward``: also derive the gradients (``reuse``, ``params`` as in
    :func:`~symcost.program.derive_program`). ``overlap``: True (the book's policy), False, or a policy
    name of :mod:`symcost.pricing`. ``objective``: rank plans by step ``time`` (default) or by ``comms``.
    ``moves``: which moves the engine may insert: ``all``, ``strategy`` (gathers, slices and reductions
    only, as the book's algorithms), ``none`` (take the program literally: every collective is written)
    or ``auto`` (default: ``strategy`` for a program that declares parameters, ``all`` otherwise).
    ``strict``: refuse a dimension that does not divide by its axes (by default its blocks are padded, as
    GSPMD pads, and the plan says so in ``plan.padding``).
    ``efficiency``: price with achieved efficiency instead of the book's ideal machine (the costs keep
    ``eta_math``, ``eta_hbm``, ``eta_vec``, ``eta_net_<kind>`` and ``T_net_<kind>`` as symbols; the preset's
    ``[efficiency]`` table gives their numbers), and choose the plan at the preset's achieved figures and
    per-kernel floor.
    """
    return derive_program(text, mesh, dims, hw, backward=backward, reuse=reuse, params=params, overlap=overlap,
                          objective=objective, moves=moves, strict=strict, efficiency=efficiency,
                          choose_achieved=efficiency)


def check(text, mesh=None, dims=None, hw=None, *, strict: bool = False) -> Plan:
    """Is this sharding (or program) valid? Raises :class:`~symcost.errors.ShardingError` saying which axis
    and which tensor when it is not; otherwise returns its plan. ``strict`` also refuses padded blocks."""
    return derive(text, mesh, dims, hw, strict=strict)


def search(text, mesh, dims=None, hw=None, *, backward: bool = False, objective: str = "time", overlap=True,
           moves=None, vs=None, range=None, progress=None, jobs=1, exact: bool = False, efficiency: bool = False,
           time_limit=None, top=None):
    """Every sharding of the program's parameters and open activations, priced by the engine, filtered by
    memory, ranked: a :class:`~symcost.searching.SearchResult` (see :func:`symcost.searching.search`; the
    arguments are the command line's: ``mesh`` a string or a dict, ``jobs`` a number or ``"auto"``, ``exact``
    the best plan solved for, with a proven lower bound: ``bound`` and ``gap``; ``time_limit`` its seconds
    to close the gap; ``top`` the best that many proven, a large space bounded rather than priced whole,
    as ``--top`` does: ``bounded`` counts the candidates left out)."""
    from .searching import search as run
    return run(text, mesh, dims, hw, backward=backward, objective=objective, overlap=overlap, moves=moves, vs=vs,
               range=range, progress=progress, jobs=jobs, exact=exact, efficiency=efficiency, time_limit=time_limit,
               top=top)


def clear_caches() -> None:
    """Forget parsed programs, plan searches and built steps that the current planning context keeps (they
    are kept because a question asked twice -- a sweep, a notebook re-run -- is answered from them; see
    :func:`symcost.caching.context` for a context of one's own)."""
    caching.clear()


__all__ = ["derive", "check", "search", "clear_caches", "parse_dims"]

"""The rewriter: from input layouts to the cheapest plan of collectives and local einsums.

:mod:`.ranking` prices candidates with floats (the bound numbers, or the ranking defaults for what is
unbound); :mod:`.routes` finds the cheapest moves between layouts; :mod:`.products` enumerates every
assignment of mesh axes to an einsum's dimensions and the cheapest route to each result; :mod:`.chains`
plans chains as a whole. The plan's closed forms are
built afterwards, from the operations chosen here.
"""
from .chains import ANY, Candidate, plan_chain, product_dims
from .products import sigmas
from .ranking import OBJECTIVES, Ranker
from .routes import Entry, reshard, search

__all__ = ["ANY", "Candidate", "Entry", "OBJECTIVES", "Ranker", "plan_chain", "product_dims", "reshard", "search",
           "sigmas"]

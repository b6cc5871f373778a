"""Training derivations for `make bench`: the FSDP+TP layer forward + backward, solve and optimize."""
from symcost.optimize import optimize_plan
from symcost.program import derive_program

TEXT = open("derivations/fsdp_tp.sc").read()


def layer():
    return derive_program(TEXT, mesh="X,Y", backward=True)


def solve():
    return derive_program(open("derivations/fsdp.sc").read(), mesh="X", backward=True).solve("B")


def optimize():
    return optimize_plan(derive_program(TEXT, mesh="X:M_X,Y:M_Y"), ("X", "Y"), "N")


CASES = [("warm FSDP+TP layer, forward + backward (symbolic)", layer, 10),
         ("warm solve: FSDP critical batch", solve, 10),
         ("warm optimize: FSDP+TP X_opt", optimize, 5)]

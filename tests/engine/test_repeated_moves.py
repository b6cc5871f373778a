"""A tensor two statements read in the same moved layout is moved for each (the forward pass does not keep
the copy one statement made for the next); the plan says so, and how to write it moved once."""
import symcost

TWICE = "param W1[D, F_X], W2[D, F_X]\nU[B, F_X] = X[B, D_X] *_D W1[D, F]\nV[B, F_X] = X[B, D_X] *_D W2[D, F]"
ONCE = ("param W1[D, F_X], W2[D, F_X]\nX[B, D] = X[B, D_X]\nU[B, F_X] = X[B, D] *_D W1[D, F]\n"
        "V[B, F_X] = X[B, D] *_D W2[D, F]")
DIMS = "B=8192,D=4096,F=4096"


def test_a_move_made_twice_is_noted_with_the_statement_that_makes_it_once():
    twice = symcost.derive(TWICE, mesh="X=4", dims=DIMS, hw="h100")
    gathers = [str(s.op) for s in twice.steps if s.is_collective]
    assert gathers == ["AllGather_X(X[B, D_X]) -> X[B, D]"] * 2
    assert ("X is moved from X[B, D_X] to X[B, D] more than once (AllGather_X); `X[B, D] = X[B, D_X]` written "
            "once before its uses would move it once") in twice.notes
    once = symcost.derive(ONCE, mesh="X=4", dims=DIMS, hw="h100")
    assert [str(s.op) for s in once.steps if s.is_collective] == gathers[:1]
    assert not any("more than once" in n for n in once.notes)
    assert once.numeric()["t_comms"] == twice.numeric()["t_comms"] / 2


def test_the_backward_pass_reusing_its_forward_moves_is_not_noted():
    """The backward pass may gather again what the forward gathered (``--reuse none``): a step of its own
    phase, not the forward's repetition."""
    from conftest import ROOT
    plan = symcost.derive((ROOT / "derivations" / "fsdp.sc").read_text(), mesh="X=4", dims="B=1024,D=4096,F=4096",
                          hw="h100", backward=True, reuse="none")
    again = [s.phase for s in plan.steps if str(s.op) == "AllGather_X(In[B_X, D]) -> In[B, D]"]
    assert again == ["forward", "backward"]
    assert not any("more than once" in n for n in plan.notes)

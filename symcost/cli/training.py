"""``symcost train NAME ...`` = ``symcost model NAME --train ...``: a training run of a model, priced as
launched by the one step model (the run knobs, with stated defaults for those left unset:
:mod:`symcost.cli.train`) or chosen on a chip budget (``--search``: :mod:`symcost.cli.run_search`)."""
from __future__ import annotations

from ..errors import UsageError
from . import model_options, serve


def register(sub):
    t = sub.add_parser("train", help="a training run of a model: its step, memory and MFU, or the run chosen "
                                     "(= model NAME --train)")
    model_options.add_arguments(t, name_required=True, command="train")
    t.set_defaults(handler=cmd_train)


def cmd_train(args) -> int:
    from .models import cmd_model
    if serve.wanted(args):
        raise UsageError("`symcost train` prices a training run; serving is `symcost serve`")
    args.train = True
    return cmd_model(args)


__all__ = ["register", "cmd_train"]

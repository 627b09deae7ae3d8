"""`tritongen tune`: the command line of tritongen.tune (its flags are in tritongen.cli.parser)."""

from __future__ import annotations

import argparse

from tritongen.tune import TuneOptions, tune


def cmd_tune(args: argparse.Namespace) -> int:
    return tune(TuneOptions(spec=args.spec, inventory=args.inventory, budget=args.budget, time=args.time,
                            resume=args.resume, out=args.out, knobs=args.knob or [], rounds=args.rounds,
                            top=args.top, seed=args.seed, confirm=args.confirm, early_stop=args.early_stop))

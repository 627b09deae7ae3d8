"""`tritongen tune`: the command line of tritongen.tune."""

from __future__ import annotations

import argparse


def _cmd_tune(args: argparse.Namespace) -> int:
    from tritongen.tune import TuneOptions, tune

    return tune(TuneOptions(spec=args.spec, inventory=args.inventory, budget=args.budget, time=args.time,
                            resume=args.resume, out=args.out, knobs=args.knob or [], rounds=args.rounds,
                            top=args.top, seed=args.seed))


def add_commands(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("tune", help="search the runtime's settings for the most goodput under validation.slo, "
                       "measuring each trial with a real serve and load test (docs/tune.md)")
    s.add_argument("spec", help="the spec to tune; the winner is written next to it as <name>.tuned.yaml")
    s.add_argument("--inventory", help="GPU inventory to plan for (placement; goodput is per GPU or MIG slice)")
    s.add_argument("--budget", type=int, help="trials to run, the input spec's own settings first (default 16; "
                   "with --resume: the total, finished trials included)")
    s.add_argument("--time", help="stop starting trials after this long (600, 600s, 15m, 2h)")
    s.add_argument("--resume", metavar="DIR", help="continue the tune stored in DIR (its study.db); finished "
                   "trials are not run again")
    s.add_argument("--out", metavar="DIR", help="where the trials, the table, the plot and the store go "
                   "(default: tune-<name> next to the spec)")
    s.add_argument("--knob", action="append", metavar="PATH=LOW:HIGH", help="narrow one knob's range, or fix it "
                   "(PATH=VALUE); repeatable. The runtime's knobs and ranges: docs/tune.md")
    s.add_argument("--rounds", type=int, default=2, help="load-test rounds per trial; a round that misses the SLO "
                   "stops the trial (default 2)")
    s.add_argument("--top", type=int, default=5, help="configurations listed in top.json (default 5)")
    s.add_argument("--seed", type=int, default=0, help="the sampler's seed (default 0)")
    s.set_defaults(func=_cmd_tune)

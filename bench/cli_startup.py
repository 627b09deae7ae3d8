"""Start-up time of the CLI: wall and CPU seconds (user + system, the child's own) per call of `tritongen --help`
and of a few `tritongen COMMAND --help`, through the installed entry point (the .venv's `tritongen` script).

    .venv/bin/python bench/cli_startup.py                      # 10 calls per command line, 3 rounds
    .venv/bin/python bench/cli_startup.py --calls 20 --rounds 5 --json bench/results/cli_startup.json

Wall time moves with the machine's load (printed with every round); CPU time much less. tests/cli/test_cli_startup.py
checks the cause (what `--help` imports), not the time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND_LINES = (("--help",), ("loadtest", "--help"), ("deploy", "--help"), ("serve", "--help"))


def entry_point() -> str:
    """The `tritongen` script next to this interpreter (the .venv's), else the one on PATH."""
    here = Path(sys.executable).parent / "tritongen"
    found = str(here) if here.is_file() else shutil.which("tritongen")
    if found is None:
        sys.exit("bench/cli_startup.py: no `tritongen` script next to this python or on PATH; run `make install`")
    return found


def measure(argv: list[str], calls: int) -> dict:
    """Wall and CPU (user + sys of the children) seconds per call, over `calls` sequential calls."""
    before, start = os.times(), time.perf_counter()
    for _ in range(calls):
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
    wall, after = time.perf_counter() - start, os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"wall_s": round(wall / calls, 3), "cpu_s": round(cpu / calls, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10, help="calls per command line and round (default 10)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    script = entry_point()
    rounds = []
    for r in range(args.rounds):
        load = os.getloadavg()[0]
        row = {"round": r + 1, "load_average_1m": round(load, 2), "cpus": os.cpu_count(), "results": {}}
        for command in COMMAND_LINES:
            result = measure([script, *command], args.calls)
            row["results"]["tritongen " + " ".join(command)] = result
            print(f"round {r + 1}  load {load:5.2f}  {'tritongen ' + ' '.join(command):28} "
                  f"wall {result['wall_s']:.3f} s  cpu {result['cpu_s']:.3f} s  per call", flush=True)
        rounds.append(row)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"script": script, "calls": args.calls, "rounds": rounds}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`tritongen tune` on the hf runtime: the winner's goodput against the input spec's, measured by the same load test in
the same run.

1. tune the spec (a small budget, `--rounds` load tests per trial), as `tritongen tune` does;
2. re-measure the input spec and the winner `--repeats` times each, alternating (input, winner, input, ...), on the
   same server (models reloaded between them), so a lucky trial does not make the gain;
3. write bench/results/tune_hf-<target>.json: every trial, the re-measured goodput of both, the gain.

    python bench/tune_hf.py                           # CPU: examples/tiny-cpu.yaml on the tiny demo model
    python bench/tune_hf.py --target h200             # H200: the Llama-3.2-1B-shaped random checkpoint, bf16 (~7 min)
    bash bench/device_tune_hf.sh                      # the same on the device machine (after device_setup.sh)

The CPU target needs build/tiny-llama (`tritongen demo-model build/tiny-llama`); the h200 target builds its
checkpoint (bench/served.py's make_checkpoint, the same model as docs/benchmarks.md's hf figures).
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "generator"))
sys.path.insert(0, str(ROOT / "bench"))

from tritongen.errors import CheckFailed  # noqa: E402
from tritongen.spec import parse_spec  # noqa: E402
from tritongen.core.source import read_yaml  # noqa: E402
from tritongen.tune import TuneOptions, tune  # noqa: E402
from tritongen.tune.served import ServedEvaluator  # noqa: E402
from tritongen.tune.space import apply  # noqa: E402

# The H200 spec: the default spec (serving's defaults: max_batch_size 8, the runtime's KV budget) for the 1B shape,
# one level of 64 users long enough for several waves of requests, an SLO that binds there.
H200_SPEC = {
    "version": 1, "name": "tune-hf-1b", "runtime": "hf", "model": {"checkpoint": "checkpoint", "dtype": "bfloat16"},
    "serving": {"streaming": True, "exclude_input_in_output": True},
    "placement": {"device": "gpu"},
    "validation": {"load": {"users": 64, "spawn_rate": 64, "duration_s": 20, "warmup_s": 4, "protocol": "grpc",
                            "input_tokens": {"mean": 128, "stddev": 0}, "output_tokens": {"mean": 64, "stddev": 0}},
                   "slo": {"ttft_p95_ms": 1000, "itl_p95_ms": 50, "max_error_rate": 0.0}},
}


def cpu_spec(work: Path) -> Path:
    data = read_yaml(ROOT / "examples" / "tiny-cpu.yaml")
    data["model"]["checkpoint"] = str(ROOT / "build" / "tiny-llama")
    path = work / "tiny-cpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def h200_spec(work: Path) -> Path:
    from served import make_checkpoint

    make_checkpoint(work / "checkpoint", tiny=False, dtype="bfloat16")
    path = work / "tune-hf-1b.yaml"
    path.write_text(yaml.safe_dump(H200_SPEC, sort_keys=False))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=("cpu", "h200"), default="cpu")
    ap.add_argument("--budget", type=int, default=None, help="trials (default: cpu 6, h200 5)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2, help="re-measurements of the input spec and of the winner")
    ap.add_argument("--knob", action="append", default=[], help="as tritongen tune --knob")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep", default=None, help="copy the tune's trials.csv, top.json, changes.md, pareto.png and "
                                                 "winning spec into this folder")
    args = ap.parse_args()
    began = time.monotonic()
    budget = args.budget or (6 if args.target == "cpu" else 5)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        spec_path = cpu_spec(work) if args.target == "cpu" else h200_spec(work)
        out = work / "tune"
        try:
            code = tune(TuneOptions(spec=str(spec_path), budget=budget, rounds=args.rounds, out=str(out),
                                    knobs=args.knob, seed=args.seed))
        except CheckFailed as err:  # no trial met the SLO: the table is still written
            print(err)
            code = 1
        if args.keep:
            keep = Path(args.keep)
            keep.mkdir(parents=True, exist_ok=True)
            for f in [*(out / n for n in ("trials.csv", "top.json", "changes.md", "pareto.png", "tritonserver.log")),
                      *work.glob("*.tuned*.yaml")]:
                if f.exists():
                    shutil.copy2(f, keep / f.name)
            for f in out.glob("trials/*/tritonserver.log"):  # the server's log where a trial was not served
                shutil.copy2(f, keep / f"trial-{f.parent.name}-tritonserver.log")
        top = json.loads((out / "top.json").read_text()) if (out / "top.json").exists() else []
        with open(out / "trials.csv") as f:
            trials = list(csv.DictReader(f))
        data = read_yaml(spec_path)
        result = {"target": args.target, "spec": data, "budget": budget, "rounds": args.rounds,
                  "trials": trials, "exit_code": code}
        if top:
            win = top[0]
            values = {k: v for k, v in win.items() if "." in k}
            evaluator = ServedEvaluator(spec_dir=spec_path.parent, out=work / "remeasure", rounds=1)
            measured: dict[str, list] = {"input": [], "winner": []}
            try:
                for i in range(args.repeats):
                    for name, spec in (("input", parse_spec(data)), ("winner", parse_spec(apply(data, values)))):
                        r = evaluator.evaluate(spec, values if name == "winner" else {}, lambda *_: False,
                                               work / "remeasure" / f"{name}-{i}")
                        measured[name].append({"goodput": r.goodput, "output_tokens_per_s": r.output_tokens_per_s,
                                               "ttft_p95_ms": r.ttft_p95_ms,
                                               "itl_p95_ms": r.itl_p95_ms, "feasible": r.feasible})
                        print(f"re-measure {name} {i + 1}: goodput {r.goodput:.3f} req/s, p95 TTFT "
                              f"{r.ttft_p95_ms} ms, ITL {r.itl_p95_ms} ms, SLO {'met' if r.feasible else 'missed'}",
                              flush=True)
            finally:
                evaluator.stop()
            mean = {k: sum(x["goodput"] for x in v) / len(v) for k, v in measured.items()}
            result.update({"winner": values, "remeasured": measured, "input_goodput": mean["input"],
                           "winner_goodput": mean["winner"],
                           "gain": mean["winner"] / mean["input"] if mean["input"] else None})
            gain = f"x{result['gain']:.2f}" if result["gain"] else "the input spec has no goodput (it misses the SLO)"
            print(f"input spec {mean['input']:.3f} req/s, winner {mean['winner']:.3f} req/s ({values}): {gain}")
    result["seconds"] = round(time.monotonic() - began)
    dest = Path(args.out) if args.out else ROOT / "bench" / "results" / f"tune_hf-{args.target}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())

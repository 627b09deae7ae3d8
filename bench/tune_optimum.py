"""How close `tritongen tune` gets to the best goodput there is, on the synthetic engine model whose optimum is known.

For each of three SLOs (tight TTFT, tight ITL, loose) the optimum is computed from the engine model's own formula
(tritongen.served.engine_model): with every request of one length, serving.max_batch_size and the KV budget
act through one number, the requests running at once, so enumerating 1..users finds it. Then tune searches
(max_batch_size, kv_cache.max_tokens) with a budget of 16 trials:
- `--mode analytic` (default, CPU, about a minute): trials evaluated on the formula, seeds 0..4;
- `--mode served`: real trials (render, embedded tritonserver with the native token source, Locust with the token
  check), one SLO per call (`--slo`); the winner's goodput is reported both as measured and on the formula.

    python bench/tune_optimum.py                                  # analytic, every SLO, seeds 0-4
    python bench/tune_optimum.py --mode served --slo tight_itl    # served, one SLO (~5 min on 16 cores)

Writes bench/results/tune_optimum-<mode>[-<slo>].json.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "generator"))

from tritongen.spec import parse_spec  # noqa: E402
from tritongen.tune import TuneOptions, tune  # noqa: E402
from tritongen.tune.measure import EngineModelEvaluator  # noqa: E402

# The engine model at a quarter of the hf-on-H200 calibration's step times (docs/tune.md), so a served trial is
# short; the shape of the trade-off (step time vs batch, prefill) is the same.
SPEC = {
    "version": 1, "name": "tune-optimum", "runtime": "synthetic",
    "model": {"checkpoint": str(ROOT / "build" / "tiny-llama")},
    "synthetic": {"engine": {"enabled": True, "step_base_ms": 6.1, "per_sequence_ms": 0.038,
                             "per_prefill_token_ms": 0.001}},
    "serving": {"max_batch_size": 4, "streaming": True, "kv_cache": {"max_tokens": 2048}},
    "placement": {"device": "cpu"},
    "validation": {"load": {"users": 48, "spawn_rate": 1000, "duration_s": 12, "warmup_s": 3, "protocol": "grpc",
                            "input_tokens": {"mean": 64, "stddev": 0}, "output_tokens": {"mean": 32, "stddev": 0}},
                   "slo": {}},
}
SLOS = {"tight_ttft": {"ttft_p95_ms": 60}, "tight_itl": {"itl_p95_ms": 7.5},
        "loose": {"ttft_p95_ms": 2000, "itl_p95_ms": 50}}


def spec_data(slo: dict) -> dict:
    data = copy.deepcopy(SPEC)
    data["validation"]["slo"] = slo
    return data


def formula_goodput(data: dict, max_batch: int, kv_tokens: int | None) -> tuple[float, bool]:
    d = copy.deepcopy(data)
    d["serving"]["max_batch_size"] = max_batch
    d["serving"]["kv_cache"]["max_tokens"] = kv_tokens
    r = EngineModelEvaluator(rounds=1).evaluate(parse_spec(d), {}, lambda i, r: False)
    return r.goodput, r.feasible


def optimum(data: dict) -> tuple[float, int]:
    best = (0.0, 0)
    for running in range(1, data["validation"]["load"]["users"] + 1):
        good, ok = formula_goodput(data, running, 10**7)
        if ok and good > best[0]:
            best = (good, running)
    return best


def one(name: str, mode: str, seed: int, work: Path) -> dict:
    data = spec_data(SLOS[name])
    best, running = optimum(data)
    spec = work / f"{name}-{seed}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    out = work / f"{name}-{seed}-out"
    evaluator = EngineModelEvaluator(rounds=2) if mode == "analytic" else None
    began = time.monotonic()
    code = tune(TuneOptions(spec=str(spec), budget=16, out=str(out), seed=seed, rounds=1 if mode == "served" else 2,
                            knobs=["serving.stream_interval=1"]), evaluator=evaluator,
                say=print if mode == "served" else (lambda _: None))
    top = json.loads((out / "top.json").read_text())
    win = top[0] if top else None
    on_formula = formula_goodput(data, win["serving.max_batch_size"], win["serving.kv_cache.max_tokens"])[0] \
        if win else 0.0
    return {"slo": name, "limits": SLOS[name], "seed": seed, "exit_code": code, "optimum_goodput": best,
            "optimum_running": running, "winner": win, "winner_goodput_measured": win["goodput"] if win else 0.0,
            "winner_goodput_on_formula": on_formula, "fraction_of_optimum": on_formula / best if best else None,
            "seconds": round(time.monotonic() - began, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("analytic", "served"), default="analytic")
    ap.add_argument("--slo", choices=tuple(SLOS), action="append", help="default: all (analytic), tight_itl (served)")
    ap.add_argument("--seeds", type=int, default=5, help="analytic: seeds 0..N-1 (served: seed 0)")
    args = ap.parse_args()
    names = args.slo or (list(SLOS) if args.mode == "analytic" else ["tight_itl"])
    seeds = range(args.seeds) if args.mode == "analytic" else [0]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for seed in seeds:
                r = one(name, args.mode, seed, Path(tmp))
                runs.append(r)
                print(f"{name} seed {seed}: winner {r['winner_goodput_on_formula']:.3f} req/s on the formula "
                      f"(measured {r['winner_goodput_measured']:.3f}), optimum {r['optimum_goodput']:.3f} "
                      f"(running {r['optimum_running']}): {r['fraction_of_optimum']:.3f}", flush=True)
    result = {"mode": args.mode, "budget": 16, "engine": SPEC["synthetic"]["engine"], "load": SPEC["validation"]["load"],
              "runs": runs, "min_fraction": min(r["fraction_of_optimum"] or 0 for r in runs)}
    dest = ROOT / "bench" / "results" / f"tune_optimum-{args.mode}{'-' + '-'.join(names) if args.slo else ''}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(result, indent=2) + "\n")
    print(f"min fraction of the optimum: {result['min_fraction']:.3f}; {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Plots and the comparison table for docs/benchmarks.md, from bench/results/*.json (no device needed).

    .venv/bin/python bench/plots.py     # writes docs/img/*.png and bench/results/comparison.json, prints tables
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import RESULTS, ROOT, table, write_json  # noqa: E402

IMG = ROOT / "docs" / "img"


def load(name):
    return json.loads((RESULTS / name).read_text())


def main() -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {"in-process run 1": load("inprocess_cb.json"), "in-process run 3": load("inprocess_cb_run3.json")}
    served = load("served.json")
    by = {k: {lv["concurrency"]: lv for lv in v["levels"]} for k, v in runs.items()}
    rows = []
    for lv in served["levels"]:
        c = lv["concurrency"]
        ip = [by[k][c] for k in by if c in by[k]]
        ip_tps = statistics.mean(x["output_tok_per_s"] for x in ip)
        ip_ttft = statistics.mean(x["ttft_ms_p50"] for x in ip)
        ip_itl = statistics.mean(x["itl_ms_p50"] for x in ip)
        rows.append({"concurrency": c,
                     "inproc_runs_tok_s": " / ".join(str(x["output_tok_per_s"]) for x in ip),
                     "inproc_mean_tok_s": round(ip_tps, 1), "served_tok_s": lv["output_tok_per_s"],
                     "ratio": round(lv["output_tok_per_s"] / ip_tps, 2),
                     "inproc_ttft_p50": round(ip_ttft, 1), "served_ttft_p50": lv["ttft_ms_p50"],
                     "added_ttft_p50": round(lv["ttft_ms_p50"] - ip_ttft, 1),
                     "inproc_itl_p50": round(ip_itl, 1), "served_itl_p50": lv["itl_ms_p50"],
                     "added_itl_p50": round(lv["itl_ms_p50"] - ip_itl, 1)})
    write_json(RESULTS / "comparison.json", {"note": "in-process = mean of runs 1 and 3 (run 2 shared the GPU with "
                                             "a leftover tritonserver stub and is excluded)", "rows": rows})
    print(table(rows, [(k, k) for k in rows[0]]))

    IMG.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for name, data in by.items():
        cs = sorted(data)
        for ax, key in zip(axes, ("output_tok_per_s", "ttft_ms_p50", "itl_ms_p50")):
            ax.plot(cs, [data[c][key] for c in cs], "o--", alpha=0.7, label=name)
    cs = [lv["concurrency"] for lv in served["levels"]]
    for ax, key, title in zip(axes, ("output_tok_per_s", "ttft_ms_p50", "itl_ms_p50"),
                              ("output tokens/s", "TTFT p50 (ms)", "ITL p50 (ms)")):
        ax.plot(cs, [lv[key] for lv in served["levels"]], "s-", lw=2, label="served (tritonserver ensemble)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent requests (closed loop)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("Llama-3.2-1B shape, bf16, H200, 128 in / 256 out, transformers continuous batching")
    fig.tight_layout()
    fig.savefig(IMG / "bench_served_vs_inprocess.png", dpi=110)

    ladder = load("ladder.json")
    rungs = [r for r in ladder["rungs"] if "error" not in r]
    fig, ax = plt.subplots(figsize=(10, 4.2))
    labels = [r["rung"].split(" {")[0] for r in rungs] + ["CB 256 defaults (run 1)"]
    vals = [r["output_tok_per_s"] for r in rungs] + [by["in-process run 1"][256]["output_tok_per_s"]]
    ax.barh(labels, vals)
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v:,.0f}", va="center")
    ax.set_xlabel("output tokens/s")
    ax.set_title("Optimisation ladder (H200, measured)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(IMG / "bench_ladder.png", dpi=110)

    roof = ladder["roofline"]["decode_upper_bound"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot([r["batch"] for r in roof], [r["max_tok_per_s"] for r in roof], "k-", label="HBM roofline (measured copy BW)")
    ax.plot(cs, [lv["output_tok_per_s"] for lv in served["levels"]], "s-", label="served")
    cs1 = sorted(by["in-process run 1"])
    ax.plot(cs1, [by["in-process run 1"][c]["output_tok_per_s"] for c in cs1], "o--", label="in-process run 1")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequences per decode step")
    ax.set_ylabel("output tokens/s")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    ax.set_title("Decode: measured vs memory-bandwidth bound")
    fig.tight_layout()
    fig.savefig(IMG / "bench_roofline.png", dpi=110)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

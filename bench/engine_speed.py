"""Can the serving path carry an engine's token rate? Each layout's delivered tok/s next to the token source's own.

One embedded tritonserver serves the synthetic runtime (examples/synthetic-cpu.yaml with the tiny demo tokenizer;
`synthetic.source: native`, the C++ token source, unless --set says otherwise). Per concurrency level, the lean
client bench/streamclient.py (N processes x M gRPC streams, all started at once, exact text checked on every
completed request) drives, one after the other:
- `tensorrt_llm`: the source called directly: what the closed loop offers, as the paced source delivers it (not
  the source's ceiling: bench/serving_path.py --itl-ms 2 offers more to find that), and the ids path (ids streamed, decoded by the client);
- `tensorrt_llm_bls`: the BLS called directly;
- `ensemble`: the default text path (gRPC -> ensemble -> BLS -> tensorrt_llm);
- `openai-text` / `openai-ids` (only when asked for in --layouts): the OpenAI-compatible frontend
  (tritongen.frontend.server.FrontendWorkers: `--openai-workers` uvicorn workers sharing one port, as
  `tritongen serve --openai --openai-workers W --openai-path text|ids`) against the same tritonserver, driven with
  streamed /v1/completions by the same client (`--target openai`); text: frontend -> ensemble -> BLS ->
  tensorrt_llm; ids: frontend (tokenize, detokenize) -> tensorrt_llm.
A path is measured only where the source alone delivers more than the path at that level; the table puts the two side by side.

Server CPU: user + system seconds of tritonserver and every python backend stub (psutil), read at the start and the
end of the client's window (the window is timed from the first sent request: start + warmup .. + duration), so
server and client figures cover the same seconds. For
the openai layouts the frontend's processes (uvicorn supervisor and workers) are sampled at the same instants and
included in server CPU, under `openai-frontend` in server_cpu_s_by_process and as frontend_cpu_cores. The source's counter tritongen_llm_output_tokens_total over the
whole run is checked against the tokens the client received.

    .venv/bin/python bench/engine_speed.py --levels 64,256 --duration 10 --warmup 3 --processes 8 \
        [--itl-ms 5] [--ttft-ms 20] [--output-tokens 128] [--input-tokens 128] [--layouts tensorrt_llm,ensemble] \
        [--set serving.stream_interval=4] [--name engine_speed]
    .venv/bin/python bench/engine_speed.py --levels 64,256 --processes 8 --layouts tensorrt_llm,openai-text,openai-ids \
        [--openai-workers 4]

With --repeat R each level runs R rounds of every layout, interleaved; the table shows each layout's median round
(a path above the source alone means the machine was busier during the source-alone run: repeat, or use a quiet
machine). Writes bench/results/<name>.json (every round) and bench/results/<name>.md (the table it prints); when a run has errors, requests
that never ended or client != server token counts, also the server's log as bench/results/<name>-tritonserver.log.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import yaml


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import streamclient  # noqa: E402
from serving_path import _process_name  # noqa: E402  (server processes named by model, one definition)

RESULTS = ROOT / "bench" / "results"
LAYOUTS = {"tensorrt_llm": "source alone / ids path (tensorrt_llm direct)", "tensorrt_llm_bls": "BLS direct",
           "ensemble": "default: ensemble -> BLS"}
# Not in the default --layouts (each starts a frontend): the OpenAI-compatible frontend with the path it names.
OPENAI_LAYOUTS = {"openai-text": "OpenAI frontend, text path (-> ensemble)",
                  "openai-ids": "OpenAI frontend, ids path (-> tensorrt_llm)"}
ALL_LAYOUTS = {**LAYOUTS, **OPENAI_LAYOUTS}


def layout_of(r: dict) -> str:
    return r.get("layout") or r["config"]["target"]


def server_cpu(root_pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of tritonserver and each python backend stub, summed by model."""
    root = psutil.Process(root_pid)
    out: dict[str, float] = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            name = _process_name(proc)
            out[name] = out.get(name, 0.0) + t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return out


def tree_cpu(root_pid: int) -> float:
    """CPU seconds (user + system) of a process and its descendants (the frontend's supervisor and workers)."""
    total = 0.0
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return total
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return total


def source_counters(metrics_url: str) -> tuple[float, float]:
    """(tokens sent, requests active) of the tensorrt_llm model's source."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
              if s.name.startswith("tritongen_llm_") and s.labels.get("model") == "tensorrt_llm"}
    return values.get("tritongen_llm_output_tokens_total", 0.0), values.get("tritongen_llm_active_requests", 0.0)


def _settled_counter(metrics_url: str, timeout: float = 30.0) -> float:
    deadline = time.monotonic() + timeout
    while True:
        tokens, active = source_counters(metrics_url)
        if active == 0 or time.monotonic() > deadline:
            return tokens
        time.sleep(0.1)


def measure(server, cfg: streamclient.Config, prepared, frontend=None) -> dict:
    """One layout at one level: the client's figures, server CPU over the same window, counter vs client.
    `frontend`: the OpenAI frontend's process (FrontendWorkers), whose CPU is server CPU too."""
    samples: list[dict[str, float]] = []
    active: list[float] = []

    def sample_window(start: float, window: tuple[float, float]) -> None:
        def sampler() -> None:
            for at in window:
                time.sleep(max(0.0, at - time.monotonic()))
                sample = server_cpu(server.process.pid)
                if frontend is not None:
                    sample["openai-frontend"] = tree_cpu(frontend.process.pid)
                samples.append(sample)
            # Where a stalled run stopped: requests still active in the source means the source (or what it sends
            # into) is stuck; none means the path never reached it.
            active.append(source_counters(server.metrics_url)[1])
        threading.Thread(target=sampler, daemon=True).start()

    before = _settled_counter(server.metrics_url)
    result = streamclient.run(cfg, *prepared, on_start=sample_window)
    after = _settled_counter(server.metrics_url)
    if len(samples) == 2:
        cpu = {k: round(samples[1].get(k, 0.0) - samples[0].get(k, 0.0), 3) for k in samples[1]}
        total = sum(cpu.values())
        result["server_cpu_s_by_process"] = cpu
        result["server_cpu_cores"] = round(total / cfg.duration_s, 2)
        result["server_cpu_us_per_token"] = round(total * 1e6 / result["tokens_in_window"], 1) \
            if result["tokens_in_window"] else None
        if frontend is not None:
            result["frontend_cpu_cores"] = round(cpu["openai-frontend"] / cfg.duration_s, 2)
    result["source_active_at_window_end"] = active[0] if active else None
    result["server_tokens"] = after - before
    result["client_equals_server_tokens"] = result["tokens_total"] == after - before
    return result


def render_and_start(args, workdir: Path):
    from specs import apply_overrides, render_spec
    from streaming_text import start_server

    data = yaml.safe_load((ROOT / "examples" / "synthetic-cpu.yaml").read_text())
    data["model"]["checkpoint"] = str(Path(args.checkpoint).resolve())
    overrides = {"synthetic.ttft_ms": args.ttft_ms, "synthetic.itl_ms": args.itl_ms,
                 "serving.max_batch_size": max(64, max(args.levels))}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = yaml.safe_load(value)
    apply_overrides(data, overrides)
    spec = workdir / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    render_spec(spec, workdir / "model_repository")
    return start_server(workdir / "model_repository", workdir / "tritonserver.log"), overrides


def start_frontend(args, workdir: Path, server, layout: str):
    """The OpenAI frontend for one openai layout, as `tritongen serve REPO --openai 0 --triton-url URL
    --openai-workers W --openai-path P` starts it (FrontendWorkers), on a free port."""
    from tritongen.frontend.server import FrontendWorkers  # the openai layouts only (fastapi, uvicorn)
    from tritongen.plan.frontend import FrontendPlan

    repo = workdir / "model_repository"
    if args.openai_workers is None:  # what `tritongen serve --openai` starts: the Plan's count, capped by the host
        args.openai_workers, why = FrontendPlan.read(repo).workers_on_host()
        print(f"openai frontend: {args.openai_workers} workers ({why})", flush=True)
    frontend = FrontendWorkers(repo, server.grpc_url, workers=args.openai_workers, port=0,
                               path=layout.removeprefix("openai-"), log_path=workdir / f"frontend-{layout}.log")
    frontend.start()
    frontend.api_key = FrontendPlan.read(repo).api_key()
    return frontend


# Every column is measured in the row's own run except `offered` (computed from the source's settings) and
# `source alone` (the tensorrt_llm row of the same level: another run). The source paces its tokens, so called
# alone it delivers what the closed loop offers: `source alone` is the offered rate as measured, not a ceiling of
# the source. ITL is per request (its mean gap); `token gap` is every gap between two responses, whose tail a
# per-request mean hides. Client CPU is on the same host: the cores a run leaves free are the host's less server
# and client CPU.
ROW_COLS = [("level", "concurrency"), ("layout", "layout"), ("received tok/s (client, window)", "tok_per_s"),
            ("offered tok/s", "offered_tok_per_s"), ("source alone tok/s (other run)", "source_alone"),
            ("% of source alone", "pct_of_source_alone"),
            ("TTFT p50/p99 ms", "ttft"), ("ITL p50/p99 ms (per request)", "itl"),
            ("token gap p50/p99 ms", "gap"), ("errors (refused)", "errors_refused"),
            ("unfinished at end", "unfinished_at_end"), ("server CPU cores (this run)", "server_cpu_cores"),
            ("server CPU µs/token (this run)", "server_cpu_us_per_token"),
            ("of which frontend CPU cores", "frontend_cpu_cores"), ("client CPU cores (same host)", "client_cpu_cores"),
            ("host cores used (server + client)", "host_cores_used"),
            ("exact text", "exact"), ("client = server tokens", "client_equals_server_tokens")]


def offered_tok_per_s(concurrency: int, output_tokens: int, ttft_ms: float, itl_ms: float) -> float:
    """What a closed loop of `concurrency` streams asks of a source that paces TTFT then ITL per token:
    each stream gets output_tokens tokens every TTFT + (output_tokens - 1) x ITL."""
    return concurrency * output_tokens / ((ttft_ms + (output_tokens - 1) * itl_ms) / 1000.0)


def _refused(r: dict) -> str:
    """Errors of a run that are refusals (Triton's queue limit, the frontend's 429): streamclient counts them; a
    result written before it did has only its first error samples, so the count is marked as a lower bound."""
    if "refused" in r:
        return str(r["refused"])
    return f">={sum(1 for e in r.get('error_samples', []) if 'queue size' in str(e) or '429' in str(e))}"


def medians(results: list[dict]) -> list[dict]:
    """Per level and layout, the round with the median received tok/s (the only one without --repeat)."""
    groups: dict[tuple[int, str], list[dict]] = {}
    for r in results:
        groups.setdefault((r["concurrency"], layout_of(r)), []).append(r)
    return [sorted(g, key=lambda r: r["tok_per_s"])[(len(g) - 1) // 2] for g in groups.values()]


def table(results: list[dict], ttft_ms: float | None = None, itl_ms: float | None = None) -> str:
    """The markdown table of a run; `ttft_ms`/`itl_ms` give the offered rate of results written before they
    carried it."""
    results = medians(results)
    if ttft_ms is not None and itl_ms is not None:
        results = [{"offered_tok_per_s": round(offered_tok_per_s(r["concurrency"], r["config"]["output_tokens"],
                                                                 ttft_ms, itl_ms), 1), **r} for r in results]
    alone = {r["concurrency"]: r["tok_per_s"] for r in results if r["config"]["target"] == "tensorrt_llm"}
    rows = []
    for r in results:
        source = alone.get(r["concurrency"])
        exact = f"{r['text_exact']}/{r['text_checked']}" if r["text_checked"] else "not checked"
        used = (r.get("server_cpu_cores") or 0) + (r.get("client_cpu_cores") or 0)
        rows.append({**r, "layout": ALL_LAYOUTS[layout_of(r)], "source_alone": source,
                     "pct_of_source_alone": round(100 * r["tok_per_s"] / source) if source else None,
                     "ttft": f"{r['ttft_ms_p50']} / {r['ttft_ms_p99']}", "itl": f"{r['itl_ms_p50']} / {r['itl_ms_p99']}",
                     "gap": f"{r.get('gap_ms_p50')} / {r.get('gap_ms_p99')}",
                     "errors_refused": f"{r['errors']} ({_refused(r)})",
                     "host_cores_used": round(used, 2), "exact": exact})
    head = "| " + " | ".join(h for h, _ in ROW_COLS) + " |"
    sep = "|" + "|".join("---" if k == "layout" else "---:" for _, k in ROW_COLS) + "|"
    body = ["| " + " | ".join("-" if row.get(k) is None else (f"{row[k]:,.0f}" if isinstance(row[k], float) and
                                                                k in ("tok_per_s", "source_alone", "offered_tok_per_s")
                                                                else str(row[k]))
                              for _, k in ROW_COLS) + " |" for row in rows]
    return "\n".join([head, sep, *body])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="16,64", help="total concurrent streams per level, comma separated")
    ap.add_argument("--processes", type=int, default=2, help="client processes (streams are spread over them)")
    ap.add_argument("--duration", type=float, default=5.0, help="measured window per run, seconds")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds from the first sent request to the window")
    ap.add_argument("--layouts", default=",".join(LAYOUTS),
                    help=f"targets, in order; tensorrt_llm is the source alone; also {', '.join(OPENAI_LAYOUTS)}")
    ap.add_argument("--openai-workers", type=int, default=None,
                    help="openai layouts: uvicorn worker processes of the frontend (tritongen serve --openai-workers); "
                    "default: the Plan's planned count capped at half the host's cores, as `serve` starts it")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds per level (layouts interleaved); the table shows each layout's median round")
    ap.add_argument("--itl-ms", type=float, default=5.0)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--checkpoint", default=str(ROOT / "build" / "tiny-llama"),
                    help="tokenizer/checkpoint folder (`tritongen demo-model build/tiny-llama` makes one)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="spec override, e.g. synthetic.source=python or serving.stream_interval=4")
    ap.add_argument("--name", default="engine_speed", help="results file name under bench/results/")
    args = ap.parse_args(argv)
    args.levels = [int(x) for x in args.levels.split(",")]
    layouts = [x for x in args.layouts.split(",") if x]
    unknown = [x for x in layouts if x not in ALL_LAYOUTS]
    if unknown:
        ap.error(f"--layouts: unknown {', '.join(unknown)}; choose from {', '.join(ALL_LAYOUTS)}")

    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="engine-speed-") as tmp:
        server, overrides = render_and_start(args, Path(tmp))
        frontends: dict = {}
        try:
            for level in args.levels:
                processes = min(args.processes, level)
                streams = math.ceil(level / processes)
                # Rounds interleave the layouts, so a busy spell of a shared machine does not land on one of them.
                for round_ in range(args.repeat):
                    for target in layouts:
                        frontend = None
                        if target in OPENAI_LAYOUTS:
                            frontend = frontends.get(target) or start_frontend(args, Path(tmp), server, target)
                            frontends[target] = frontend
                            cfg = streamclient.Config(server.grpc_url, "openai", processes, streams, args.duration,
                                                      args.warmup, args.output_tokens, args.input_tokens,
                                                      openai_url=frontend.url, api_key=frontend.api_key)
                        else:
                            cfg = streamclient.Config(server.grpc_url, target, processes, streams, args.duration,
                                                      args.warmup, args.output_tokens, args.input_tokens)
                        r = measure(server, cfg, streamclient.prepare(cfg), frontend)
                        r["round"] = round_
                        r["layout"] = target
                        r["offered_tok_per_s"] = round(offered_tok_per_s(level, args.output_tokens, args.ttft_ms,
                                                                         args.itl_ms), 1)
                        if frontend is not None:
                            r["openai_workers"] = args.openai_workers
                        print(f"{target:>12} " + streamclient.summary_line(r) + f"  server CPU {r.get('server_cpu_cores')} cores, "
                              f"{r.get('server_cpu_us_per_token')} µs/token", flush=True)
                        results.append(r)
        finally:
            for frontend in frontends.values():
                frontend.stop()
            server.stop()
            if any(r["errors"] or r["unfinished_at_end"] or not r["client_equals_server_tokens"] for r in results):
                RESULTS.mkdir(parents=True, exist_ok=True)
                shutil.copy(Path(tmp) / "tritonserver.log", RESULTS / f"{args.name}-tritonserver.log")
                for target in frontends:
                    log = Path(tmp) / f"frontend-{target}.log"
                    if log.exists():
                        shutil.copy(log, RESULTS / f"{args.name}-{target}.log")

    text = table(results)
    print("\n" + text)
    meta = {"command": " ".join(["bench/engine_speed.py", *(argv if argv is not None else sys.argv[1:])]),
            "host": platform.node(), "cpus": psutil.cpu_count(), "load_avg_at_end": list(psutil.getloadavg()),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "spec_overrides": overrides}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    (RESULTS / f"{args.name}.md").write_text(f"`{meta['command']}` ({meta['cpus']} CPUs, {meta['time']})\n\n{text}\n")
    bad = [r for r in results if r["errors"] or r["text_exact"] != r["text_checked"]
           or not r["client_equals_server_tokens"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

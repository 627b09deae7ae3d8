"""The Locust runner behind `tritongen loadtest` and `tritongen up`: Locust against a deployment, the SLO gate, the report.

`loadtest` runs Locust headless in a subprocess (`python -m locust -f loadtests/locustfile.py ...`) with the run's
settings in a JSON file named by TRITONGEN_LOADTEST_CONFIG (`tritongen.loadtests.users.LoadConfig`), scrapes Triton's
/metrics before, during and after the run, and writes into OUT: `loadtest.json`, `loadtest.html`, Locust's CSVs
(`locust_*.csv`) and HTML page (`locust.html`), its log (`locust.log`), the raw samples (`samples/*.jsonl`) and,
with --sweep, `sweep.csv` and `sweep.png`. The exit code is the SLO verdict: 0 every objective holds, 1 one fails.

"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tritongen.errors import CheckFailed, EnvironmentMissing, SpecError, problem
from tritongen.resources import data_dir

LOCUSTFILE = data_dir("loadtests") / "locustfile.py"
PROTOCOLS = ("grpc", "http", "http_stream", "openai")
# Seconds a user may take to finish its request after the run time ends; past it Locust kills the user and
# the request goes unrecorded (while the server still counts it).
STOP_TIMEOUT_S = 120


@dataclass(frozen=True)
class Endpoint:
    grpc_url: str | None
    http_url: str | None
    metrics_url: str | None
    openai_url: str | None = None
    """host:port of the OpenAI frontend (protocol openai)."""

    def url_for(self, protocol: str) -> str:
        url = {"grpc": self.grpc_url, "openai": self.openai_url}.get(protocol, self.http_url)
        if not url:
            raise SpecError(problem("--url", f"no endpoint for protocol {protocol}", "pass --url host:port"))
        return url


@dataclass(frozen=True)
class RunSettings:
    protocol: str
    users: int
    spawn_rate: float
    duration_s: float
    processes: int
    sweep: tuple[int, ...] = ()


def say(line: str) -> None:
    print(line, flush=True)


def parse_sweep(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        levels = ()
    if not levels or any(c < 1 for c in levels):
        raise SpecError(problem("--sweep", f"{text!r} is not a comma-separated list of user counts >= 1",
                                "pass e.g. --sweep 1,2,4,8"))
    return tuple(sorted(set(levels)))


def settings_from_args(args: argparse.Namespace, plan) -> RunSettings:
    load = plan.load

    def pick(flag: object, default: object) -> object:
        return default if flag is None else flag

    settings = RunSettings(
        protocol=pick(args.protocol, load.protocol), users=pick(args.users, load.users),
        spawn_rate=pick(args.spawn_rate, load.spawn_rate), duration_s=pick(args.duration, load.duration_s),
        processes=pick(args.processes, load.processes), sweep=parse_sweep(getattr(args, "sweep", None)))
    for flag, value in (("-u", settings.users), ("-t", settings.duration_s), ("-r", settings.spawn_rate),
                        ("--processes", settings.processes)):
        if value <= 0:
            raise SpecError(problem(flag, f"must be > 0 (got {value})", "pass a positive number"))
    return settings


def _locust_command(out: Path, users: int, spawn_rate: float, duration_s: float, processes: int,
                    stem: str) -> list[str]:
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", str(users),
           "-r", f"{spawn_rate:g}", "-t", f"{max(1, round(duration_s))}s", "--csv", str(out / stem),
           "--html", str(out / f"{stem}.html"), "--only-summary", "--stop-timeout", str(STOP_TIMEOUT_S)]
    if processes > 1:
        cmd += ["--processes", str(processes)]
    return cmd


def _run_locust(cmd: list[str], config_path: Path, log_path: Path, timeout_s: float) -> int:
    env = dict(os.environ)
    env["TRITONGEN_LOADTEST_CONFIG"] = str(config_path)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    with open(log_path, "ab") as log:
        try:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout_s, check=False)
        except FileNotFoundError:
            raise EnvironmentMissing("locust: the Python interpreter was not found; reinstall tritongen") from None
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"locust did not finish within {timeout_s:.0f}s; see {log_path}") from None
    # Locust exits 1 when any request failed: that is for the SLO gate to judge, not a crash.
    if proc.returncode not in (0, 1):
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
        raise CheckFailed(f"locust exited with code {proc.returncode}:\n{tail}")
    return proc.returncode


def resolve_prompts_file(plan) -> str | None:
    """validation.load.prompts_file as an absolute path (relative paths are the spec folder's)."""
    prompts_file = plan.load.prompts_file
    if not prompts_file:
        return None
    path = Path(prompts_file).expanduser()
    path = path if path.is_absolute() else Path(plan.spec_dir) / path
    if not path.is_file():
        raise SpecError(problem("validation.load.prompts_file", f"{path} does not exist",
                                "point it at a JSONL file of {\"text_input\": ..., \"max_tokens\": ...} lines"))
    return str(path)


def locust_config(plan, url: str, protocol: str, samples_dir: Path, users: int, prompts_file: str | None) -> dict:
    """The locustfile's configuration (`tritongen.loadtests.users.LoadConfig` keys) for one run."""
    return {
        "url": url, "protocol": protocol, "samples_dir": str(samples_dir),
        "tokenizer_dir": plan.tokenizer.dir, "concurrency": users,
        "input_tokens": plan.load.input_tokens.model_dump(),
        "output_tokens": plan.load.output_tokens.model_dump(), "prompts_file": prompts_file,
        "add_special_tokens": plan.tokenizer.add_special_tokens, "timeout_s": float(STOP_TIMEOUT_S),
        # The trtllm runtime serves NVIDIA's llmapi model alone, with its own tensor names.
        **({"dialect": "llmapi", "model": "tensorrt_llm"} if plan.runtime == "trtllm" else {}),
    }


def run_loadtest(plan, endpoint: Endpoint, settings: RunSettings, out: Path, distribution=None) -> int:
    """Run Locust (once, or once per sweep level), write the report into `out`, print the verdict; SLO exit code.

    `distribution` (tritongen.loadtests.distributed.Distribution) runs each level on Locust's master/worker mode.
    """
    from tritongen.loadtests.prom import PromPoller, scrape, server_view
    from tritongen.loadtests.report import write_report
    from tritongen.loadtests.samples import read_samples, sample_files

    out.mkdir(parents=True, exist_ok=True)
    samples_dir = out / "samples"
    for stale in sample_files(samples_dir):  # a report must never mix in samples of an earlier run
        stale.unlink()
    url = endpoint.url_for(settings.protocol)
    prompts_file = resolve_prompts_file(plan)

    before, poller = None, None
    if endpoint.metrics_url:
        try:
            before = scrape(endpoint.metrics_url)
            poller = PromPoller(endpoint.metrics_url, interval_s=1.0).start()
        except CheckFailed as err:
            say(f"warning: no server view: {err}")

    levels = settings.sweep or (settings.users,)
    log_path = out / "locust.log"
    log_path.write_text("")
    csv_files: list[Path] = []
    try:
        for users in levels:
            stem = f"locust_u{users}" if settings.sweep else "locust"
            config = locust_config(plan, url, settings.protocol, samples_dir, users, prompts_file)
            if settings.protocol == "openai" and plan.frontend is not None:
                config["model"] = plan.frontend.models[0].name
                config["api_key_env"] = plan.frontend.api_key_env
            config_path = out / "locust_config.json"
            config_path.write_text(json.dumps(config, indent=2) + "\n")
            spawn_rate = users if settings.sweep else settings.spawn_rate
            cmd = _locust_command(out, users, spawn_rate, settings.duration_s, settings.processes, stem)
            say(f"locust: {users} users, {settings.protocol} -> {url}, {max(1, round(settings.duration_s))} s"
                 + (f", {settings.processes} processes" if settings.processes > 1 else ""))
            timeout_s = settings.duration_s + STOP_TIMEOUT_S + 120
            if distribution is None:
                _run_locust(cmd, config_path, log_path, timeout_s=timeout_s)
            else:  # Locust master here, workers here (--workers) or on other hosts (--master)
                from tritongen.loadtests.distributed import run_master

                run_master(cmd, config, out, distribution, lambda argv, t: _run_locust(argv, config_path, log_path, t),
                           timeout_s=timeout_s)
            csv_files += sorted(out.glob(f"{stem}_*.csv"))
    finally:
        during = poller.stop() if poller else []

    view = None
    if before is not None:
        try:
            view = server_view(before, scrape(endpoint.metrics_url), during)
        except CheckFailed as err:
            say(f"warning: no server view: {err}")

    files = sample_files(samples_dir)
    samples = read_samples(files)
    if not samples:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
        raise CheckFailed(f"locust recorded no requests; its log ({log_path}) ends:\n{tail}")
    report = write_report(out, samples, plan.slo, deployment=plan.name, server=view, sample_files=files,
                          locust_csv=csv_files)
    _print_summary(report.summary)
    if settings.sweep:
        _write_sweep(report.summary["sweep"], out)
    for result in report.summary["slo"]["results"]:
        say(result["line"])
    say(f"verdict: {'PASS' if report.exit_code == 0 else 'FAIL'}")
    say(f"report: {report.html_path}")
    say(f"summary: {report.json_path}")
    return report.exit_code


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _stat(stats: dict | None, key: str) -> float | None:
    return None if stats is None else stats[key]


def _print_summary(summary: dict) -> None:
    m = summary["overall"]
    say(f"requests: {m['request_count']} ({m['error_count']} failed) in {m['duration_s']:.1f} s; "
         f"{_fmt(m['request_throughput'], 2)} req/s, {_fmt(m['output_token_throughput'])} output tok/s")
    say(f"latency ms: TTFT p50 {_fmt(_stat(m['ttft_ms'], 'p50'))} p95 {_fmt(_stat(m['ttft_ms'], 'p95'))} | "
         f"ITL p50 {_fmt(_stat(m['itl_ms'], 'p50'))} p95 {_fmt(_stat(m['itl_ms'], 'p95'))} | "
         f"e2e p50 {_fmt(_stat(m['e2e_ms'], 'p50'))} p99 {_fmt(_stat(m['e2e_ms'], 'p99'))}")
    for error in m["errors"][:3]:
        say(f"error x{error['count']}: {error['message']}")
    server = summary.get("server")
    if not server:
        return
    for model in server["models"]:
        if model["model"] == "ensemble":
            say(f"server: ensemble {model['request_success']:.0f} requests ok, avg queue "
                 f"{_fmt(model['avg_queue_us'] and model['avg_queue_us'] / 1e3, 2)} ms, avg compute "
                 f"{_fmt(model['avg_compute_us'] and model['avg_compute_us'] / 1e3, 2)} ms")
    step_max = [s for s in server["other"] if s["name"] == "tritongen_llm_step_requests_max"]
    if step_max:
        say(f"server: in-flight batching: up to {max(s['max'] for s in step_max):.0f} requests in one step")


def _write_sweep(sweep: list[dict], out: Path) -> None:
    """sweep.csv (one row per level) and sweep.png (latency against output token throughput)."""
    from matplotlib.figure import Figure

    header = ["concurrency", "requests", "errors", "req_per_s", "output_tok_per_s", "ttft_p50_ms",
              "ttft_p95_ms", "itl_p50_ms", "itl_p95_ms", "e2e_p50_ms", "e2e_p99_ms"]
    rows = []
    for level in sweep:
        m = level["metrics"]
        rows.append([level["concurrency"], m["request_count"], m["error_count"], m["request_throughput"],
                     m["output_token_throughput"], _stat(m["ttft_ms"], "p50"), _stat(m["ttft_ms"], "p95"),
                     _stat(m["itl_ms"], "p50"), _stat(m["itl_ms"], "p95"), _stat(m["e2e_ms"], "p50"),
                     _stat(m["e2e_ms"], "p99")])
    with open(out / "sweep.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows([["" if v is None else (f"{v:.3f}" if isinstance(v, float) else v) for v in row]
                          for row in rows])
    say(f"{'users':>5} {'req/s':>8} {'tok/s':>9} {'TTFT p50':>9} {'TTFT p95':>9} {'ITL p50':>8} {'e2e p99':>9}")
    for row in rows:
        say(f"{row[0]:>5} {_fmt(row[3], 2):>8} {_fmt(row[4]):>9} {_fmt(row[5]):>9} {_fmt(row[6]):>9} "
             f"{_fmt(row[7]):>8} {_fmt(row[10]):>9}")

    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for col, label in ((5, "TTFT p50"), (6, "TTFT p95"), (9, "e2e p50")):
        points = [(r[4], r[col], r[0]) for r in rows if r[4] is not None and r[col] is not None]
        if not points:
            continue
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
        for x, y, c in points:
            ax.annotate(f"u={c}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize="small")
    ax.set(title="Latency against throughput (one point per concurrency level)",
           xlabel="output tokens / s", ylabel="ms")
    ax.legend(fontsize="small")
    fig.savefig(out / "sweep.png", dpi=100, bbox_inches="tight")
    say(f"sweep: {out / 'sweep.csv'}, {out / 'sweep.png'}")



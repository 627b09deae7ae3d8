"""The Locust runner behind `tritongen loadtest` and `tritongen up`: check the target, run Locust once per load
level, read the samples, write the report, print the verdicts and the capacity line.

Per level, Locust runs headless in a subprocess (`python -m locust -f loadtests/locustfile.py ...`) with the
level's settings in a JSON file named by TRITONGEN_LOADTEST_CONFIG (`tritongen.loadtests.workload.LoadConfig`);
Triton's /metrics is scraped before, every second during, and after it (once the server is idle again). Each
Locust process writes its own sample file into the level's folder `samples/level-<L>/`; a level's results are
whatever sample files that folder holds, so a distributed mode only has to bring its workers' files there.

OUT receives `loadtest.json`, `loadtest.html`, Locust's CSVs (`locust_*.csv`) and HTML pages, its log
(`locust.log`), the raw samples and, with several levels, `sweep.csv` and `sweep.png`. The exit code is the SLO
gate (tritongen.loadtests.slo): 0 when it passes, 1 when it fails; 3 when the target is not ready.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tritongen.errors import CheckFailed, EnvironmentMissing, SpecError, problem
from tritongen.loadtests.distributed import LOCUSTFILE, STOP_TIMEOUT_S
from tritongen.runtimes import runtime_of

PROTOCOLS = ("grpc", "http", "http_stream", "openai")
STREAMING = ("grpc", "http_stream", "openai")
DEFAULT_MAX_CONCURRENCY = 64
BLS_MODEL = "tensorrt_llm_bls"


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
    sweep: tuple[float, ...] = ()
    warmup_s: float = 0.0
    request_rate: float | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None
    trace_file: str | None = None
    cancel_rate: float = 0.0
    cancel_after_ms: float = 100.0
    model: str | None = None
    """The Triton model the users call (`--model`); None: the ensemble, or tensorrt_llm_bls when streams are
    cancelled (the ensemble cannot stop a running step)."""
    path: str = "text"
    """`ids`: the users send token ids to tensorrt_llm and detokenize themselves (tritongen.token_ids)."""

    @property
    def mode(self) -> str:
        return "trace" if self.trace_file else ("open" if self.request_rate is not None else "closed")

    @property
    def level_unit(self) -> str:
        return "users" if self.mode == "closed" else "requests/s"

    def levels(self) -> tuple[float, ...]:
        if self.mode == "trace":
            return (0.0,)  # replaced by the trace's mean rate once it is read
        return self.sweep or ((self.request_rate,) if self.mode == "open" else (self.users,))  # type: ignore[return-value]


def say(line: str) -> None:
    print(line, flush=True)


def parse_sweep(text: str | None) -> tuple[float, ...]:
    if not text:
        return ()
    try:
        levels = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        levels = ()
    if not levels or any(c <= 0 for c in levels):
        raise SpecError(problem("--sweep", f"{text!r} is not a comma-separated list of levels > 0",
                                "pass e.g. --sweep 1,2,4,8 (users) or --sweep 0.5,1,2 (requests/s)"))
    return tuple(sorted(set(levels)))


def _resolve(plan, value: str | None, field_name: str) -> str | None:
    if not value:
        return None
    path = Path(value).expanduser()
    path = path if path.is_absolute() else Path(plan.spec_dir) / path
    if not path.is_file():
        raise SpecError(problem(field_name, f"{path} does not exist", "point it at an existing JSONL file"))
    return str(path)


def settings_from_args(args: argparse.Namespace, plan) -> RunSettings:
    """Flags over the plan's `validation.load`; every combination checked here, before any load."""
    load = plan.load

    def pick(name: str, default: object) -> object:
        value = getattr(args, name, None)
        return default if value is None else value

    # An explicit load on the command line (-u or --request-rate) is one level, unless --sweep is given too.
    # A trace on the command line is the load itself: the spec's sweep and processes do not apply to it.
    traced = getattr(args, "trace", None) is not None
    explicit = getattr(args, "users", None) is not None or getattr(args, "request_rate", None) is not None or traced
    sweep = parse_sweep(getattr(args, "sweep", None)) or (() if explicit else tuple(float(x) for x in load.sweep))
    settings = RunSettings(
        protocol=pick("protocol", load.protocol), users=pick("users", load.users),
        spawn_rate=pick("spawn_rate", load.spawn_rate), duration_s=pick("duration", load.duration_s),
        processes=pick("processes", 1 if traced else load.processes), sweep=sweep, warmup_s=pick("warmup", load.warmup_s),
        request_rate=pick("request_rate", load.request_rate), arrival=pick("arrival", load.arrival),
        burstiness=pick("burstiness", load.burstiness), max_concurrency=pick("max_concurrency", load.max_concurrency),
        trace_file=_resolve(plan, pick("trace", load.trace_file), "--trace / validation.load.trace_file"),
        cancel_rate=pick("cancel_rate", load.cancel_rate), cancel_after_ms=pick("cancel_after_ms", load.cancel_after_ms),
        model=getattr(args, "model", None), path=getattr(args, "path", None) or "text")
    for flag, value in (("-u", settings.users), ("-t", settings.duration_s), ("-r", settings.spawn_rate),
                        ("--processes", settings.processes), ("--burstiness", settings.burstiness),
                        ("--cancel-after-ms", settings.cancel_after_ms)):
        if value <= 0:
            raise SpecError(problem(flag, f"must be > 0 (got {value})", "pass a positive number"))
    if settings.request_rate is not None and settings.request_rate <= 0:
        raise SpecError(problem("--request-rate", f"must be > 0 (got {settings.request_rate})", "pass requests/s"))
    if not 0 <= settings.warmup_s < settings.duration_s:
        raise SpecError(problem("--warmup", f"must be >= 0 and below the run time {settings.duration_s:g}s "
                                f"(got {settings.warmup_s:g})", "shorten the warm-up or lengthen -t"))
    if not 0 <= settings.cancel_rate <= 1:
        raise SpecError(problem("--cancel-rate", f"must be within [0, 1] (got {settings.cancel_rate})",
                                "pass a fraction, e.g. 0.2"))
    if settings.cancel_rate > 0 and settings.protocol not in STREAMING:
        raise SpecError(problem("--cancel-rate", f"needs a streaming protocol (got {settings.protocol})",
                                "use --protocol grpc or http_stream"))
    target = runtime_of(plan).dialect()
    if settings.model is not None and (settings.protocol == "openai" or target is not None):
        what = "the OpenAI protocol calls the frontend's public model" if settings.protocol == "openai" else \
            target.why
        raise SpecError(problem("--model", f"does not apply here: {what}", "drop --model"))
    if settings.path == "ids" and (settings.protocol != "grpc" or not runtime_of(plan).ensemble or settings.model):
        why = "drop --model (the ids path calls tensorrt_llm)" if settings.model else \
            "use --protocol grpc" if settings.protocol != "grpc" else f"use the text path for the {plan.runtime} runtime"
        raise SpecError(problem("--path", "ids streams token ids from tensorrt_llm over gRPC, with the C++ "
                                "backend's tensors (not NVIDIA's LLM-API model, not HTTP or OpenAI)", why))
    if settings.cancel_rate > 0 and settings.model == "ensemble":
        say("warning: --cancel-rate through `ensemble`: Triton's ensemble scheduler checks cancellation only between "
            "steps, so cancelled streams keep generating to their end (drop --model to cancel through "
            "tensorrt_llm_bls, the ensemble's only step)")
    if settings.mode == "closed" and any(x != int(x) for x in settings.sweep):
        raise SpecError(problem("--sweep", "closed-loop levels are user counts", "pass whole numbers, or "
                                "--request-rate to sweep request rates"))
    if settings.mode == "trace" and (settings.sweep or settings.processes > 1):
        raise SpecError(problem("--trace", "a trace is replayed once, in one Locust process",
                                "drop --sweep and --processes"))
    return settings


def _locust_command(out: Path, users: int, spawn_rate: float, duration_s: float, processes: int,
                    stem: str) -> list[str]:
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", str(users),
           "-r", f"{spawn_rate:g}", "-t", f"{max(1, math.ceil(duration_s))}s", "--csv", str(out / stem),
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


@dataclass
class LevelRun:
    """One level as run: where its samples are and what /metrics showed around it."""

    level: float
    samples_dir: Path
    csv_files: list[Path]
    snapshots: list = field(default_factory=list)
    """before, during..., after (Prometheus snapshots, wall-clock ordered); empty without metrics."""
    active_after: float | None = None


def locust_config(plan, settings: RunSettings, url: str, samples_dir: Path, level: float) -> dict:
    """The locustfile's configuration (`tritongen.loadtests.workload.LoadConfig` keys) for one level."""
    from tritongen.loadtests.workload import LoadConfig, TokenDist

    load = plan.load
    return LoadConfig(
        url=url, protocol=settings.protocol, samples_dir=str(samples_dir), tokenizer_dir=plan.tokenizer.dir,
        level=level, input_tokens=TokenDist(**load.input_tokens.model_dump()),
        output_tokens=TokenDist(**load.output_tokens.model_dump()),
        prompts_file=plan.paths.prompts_file,
        add_special_tokens=plan.tokenizer.add_special_tokens,
        skip_special_tokens=plan.tokenizer.skip_special_tokens, path=settings.path, timeout_s=float(STOP_TIMEOUT_S),
        request_rate=level if settings.mode == "open" else None, arrival=settings.arrival,
        burstiness=settings.burstiness, trace_file=settings.trace_file, processes=settings.processes,
        cancel_rate=settings.cancel_rate, cancel_after_ms=settings.cancel_after_ms, duration_s=settings.duration_s,
        **_target_model(plan, settings)).to_dict()


def _target_model(plan, settings: RunSettings) -> dict:
    """The LoadConfig keys that name what the users call: the OpenAI frontend's public model name (and its API
    key's variable), a runtime's own model in its request dialect (its own tensor names), else `--model`,
    else the ensemble -- or, when streams are cancelled, tensorrt_llm_bls: the same tensors as the ensemble (its
    only step), and the one a cancellation reaches (Triton's ensemble scheduler checks cancellation only between
    steps, so a cancelled ensemble request keeps generating)."""
    if settings.protocol == "openai" and plan.frontend is not None:
        # The users read usage the way the route's dialect counts (the frontend counts for a model that has none).
        return {"model": plan.frontend.models[0].name, "api_key_env": plan.frontend.api_key_env,
                "dialect": plan.frontend.models[0].dialect}
    target = runtime_of(plan).dialect()
    if target is not None:
        return {"dialect": target.key, "model": target.model}
    if settings.path == "ids":
        from tritongen.token_ids import LLM_MODEL

        return {"model": LLM_MODEL}
    if settings.model is not None:
        return {"model": settings.model}
    return {"model": BLS_MODEL if settings.cancel_rate > 0 else "ensemble"}


def _run_level(plan, endpoint: Endpoint, settings: RunSettings, out: Path, level: float, url: str,
               distribution=None) -> LevelRun:
    import json

    from tritongen.loadtests.prom import PromPoller, scrape
    from tritongen.loadtests.target import wait_until_idle

    stem = f"locust_L{level:g}" if len(settings.levels()) > 1 else "locust"
    samples_dir = out / "samples" / f"level-{level:g}"
    samples_dir.mkdir(parents=True)
    config = locust_config(plan, settings, url, samples_dir, level)
    if distribution is not None:
        config["processes"] = distribution.workers  # each worker sends its share of an open-loop rate
    config_path = out / f"{stem}_config.json"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    if settings.mode == "closed":
        users, spawn_rate = int(level), (level if len(settings.levels()) > 1 else settings.spawn_rate)
    else:
        # Open loop: users are concurrency slots, started at once; the schedule decides when requests go.
        users = settings.max_concurrency or DEFAULT_MAX_CONCURRENCY
        spawn_rate = users
    run = LevelRun(level, samples_dir, [])
    poller = None
    if endpoint.metrics_url:
        try:
            run.snapshots.append(scrape(endpoint.metrics_url))
            poller = PromPoller(endpoint.metrics_url, interval_s=1.0).start()
        except CheckFailed as err:
            say(f"warning: no server view: {err}")
    what = {"closed": f"{users} users", "open": f"{level:g} requests/s ({settings.arrival}) with at most "
            f"{users} in flight", "trace": f"trace {settings.trace_file} with at most {users} in flight"}
    say(f"locust: {what[settings.mode]}, {settings.protocol} -> {url}, {max(1, math.ceil(settings.duration_s))} s"
        + (f" ({settings.warmup_s:g} s warm-up)" if settings.warmup_s else "")
        + (f", {settings.processes} processes" if settings.processes > 1 else ""))
    cmd = _locust_command(out, users, spawn_rate, settings.duration_s, settings.processes, stem)
    timeout_s = settings.duration_s + STOP_TIMEOUT_S + 120
    try:
        if distribution is None:
            _run_locust(cmd, config_path, out / "locust.log", timeout_s=timeout_s)
        else:  # Locust master here, workers here (--workers) or on other hosts (--master)
            from tritongen.loadtests.distributed import run_master

            run_master(cmd, config, out, distribution,
                       lambda argv, t: _run_locust(argv, config_path, out / "locust.log", t), timeout_s=timeout_s)
    finally:
        if poller is not None:
            run.snapshots += poller.stop()
    if endpoint.metrics_url and run.snapshots:
        try:
            run.active_after, _ = wait_until_idle(endpoint.metrics_url)
            run.snapshots.append(scrape(endpoint.metrics_url))
        except CheckFailed as err:
            say(f"warning: no server view after the level: {err}")
            run.snapshots = []
    run.csv_files = sorted(out.glob(f"{stem}_*.csv"))
    return run


def _views(run: LevelRun, start_wall: float, window_start_s: float, window_end_s: float):
    """(server view over the window, over the whole level): differences of the scrapes nearest the edges."""
    from tritongen.loadtests.prom import server_view

    snaps = sorted(run.snapshots, key=lambda s: s.taken_at)
    if len(snaps) < 2:
        return None, None
    ws, we = start_wall + window_start_s, start_wall + window_end_s
    before = max((s for s in snaps if s.taken_at <= ws), key=lambda s: s.taken_at, default=snaps[0])
    after = min((s for s in snaps if s.taken_at >= we), key=lambda s: s.taken_at, default=snaps[-1])
    inside = [s for s in snaps if before.taken_at < s.taken_at < after.taken_at]
    return server_view(before, after, inside), server_view(snaps[0], snaps[-1], snaps[1:-1])


def run_loadtest(plan, endpoint: Endpoint, settings: RunSettings, out: Path, *, spec_path: str | None = None,
                 distribution=None) -> int:
    """Check the target, run every level, write the report into `out`, print the verdicts; the gate's exit code.

    `distribution` (tritongen.loadtests.distributed.Distribution) runs each level on Locust's master/worker mode;
    the workers' samples arrive in the level's samples folder like a single process's.
    """
    from tritongen.loadtests import console
    from tritongen.loadtests.arrivals import read_trace
    from tritongen.loadtests.metadata import load_generator_cpu, run_metadata
    from tritongen.loadtests.metrics import measurement_window
    from tritongen.loadtests.report import LevelServer, LoadInfo, RunInputs, write_report
    from tritongen.loadtests.samples import read_samples, sample_files
    from tritongen.loadtests.target import preflight

    url = endpoint.url_for(settings.protocol)
    target = _target_model(plan, settings)
    # exit 3 before any load when not ready
    server_info = preflight(url, settings.protocol, target.get("model", "ensemble"),
                            api_key_env=target.get("api_key_env"))
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "samples", ignore_errors=True)  # a report must never mix in samples of an earlier run
    (out / "locust.log").write_text("")
    levels = settings.levels()
    if settings.mode == "trace":
        rows = read_trace(settings.trace_file)
        span = rows[-1].offset_s
        levels = (round(len(rows) / span, 3) if span > 0 else float(len(rows)),)
        settings = RunSettings(**{**asdict(settings), "duration_s": max(settings.duration_s, span + 1)})

    runs = []
    for i, level in enumerate(levels, 1):
        if len(levels) > 1:
            say(f"level {i}/{len(levels)}: {level:g} {'users' if settings.mode == 'closed' else 'requests/s'}")
        runs.append(_run_level(plan, endpoint, settings, out, level, url, distribution))

    files = [f for run in runs for f in sample_files(run.samples_dir)]
    samples = read_samples(files)
    if not samples:
        tail = "\n".join((out / "locust.log").read_text(errors="replace").splitlines()[-30:])
        raise CheckFailed(f"locust recorded no requests; its log ({out / 'locust.log'}) ends:\n{tail}")
    servers, cpu = {}, {}
    for run in runs:
        mine = [s for s in samples if s.level == run.level]
        if mine:
            start, window = measurement_window(mine, settings.warmup_s, settings.duration_s)
            view, view_run = _views(run, start, window.start_s, window.end_s)
            servers[run.level] = LevelServer(window=view, run=view_run, active_after=run.active_after)
        cpu[run.level] = load_generator_cpu(run.samples_dir)
    workload = {k: v for k, v in locust_config(plan, settings, url, Path("."), levels[0]).items()
                if k not in ("samples_dir", "level")}
    inputs = RunInputs(
        load=LoadInfo(mode=settings.mode, level_unit=settings.level_unit, warmup_s=settings.warmup_s,
                      duration_s=settings.duration_s),
        deployment=plan.name, metadata=run_metadata(plan, server_info, workload, spec_path), servers=servers,
        load_generator=cpu, sample_files=files, locust_csv=[f for run in runs for f in run.csv_files])
    report = write_report(out, samples, plan.slo, inputs)
    console.print_report(report.summary, out, report.html_path, report.json_path)
    return report.exit_code

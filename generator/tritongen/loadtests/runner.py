"""The Locust runner behind `tritongen loadtest` and `tritongen up`: check the target, run Locust once per load
level, read the samples, write the report, print the verdicts and the capacity line.

The load is the Plan's load profile (`Plan.load`, tritongen.plan.load.LoadProfile); flags such as -u or -t give a
copy of it with those fields replaced (`load_from_args`), and nothing here reads the spec or resolves its paths.
Per level, Locust runs headless in a subprocess (`python -m locust -f loadtests/locustfile.py ...`) with the
profile and the level's facts in a JSON file named by TRITONGEN_LOADTEST_CONFIG
(`tritongen.loadtests.workload.LocustConfig`);
Triton's /metrics is scraped before, every second during, and after it (once the server is idle again). Each
Locust process writes its own sample file into the level's folder `samples/level-<L>/`; a level's results are
whatever sample files that folder holds, so a distributed mode only has to bring its workers' files there.

OUT receives `loadtest.json`, `loadtest.html`, Locust's CSVs (`locust_*.csv`) and HTML pages, its log
(`locust.log`), the raw samples and, with several levels, `sweep.csv` and `sweep.png`. The exit code is the SLO
gate (tritongen.loadtests.slo): 0 when it passes, 1 when it fails; 3 when the target is not ready.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from pydantic import ValidationError

from tritongen.errors import CheckFailed, EnvironmentMissing, SpecError, problem
from tritongen.loadtests import console
from tritongen.loadtests.arrivals import read_trace
from tritongen.loadtests.interrupt import EXIT, on_interrupt
from tritongen.loadtests.host import HostWatch, ports as host_ports
from tritongen.loadtests.distributed import LOCUSTFILE, STOP_TIMEOUT_S, run_master
from tritongen.loadtests.metadata import load_generator_cpu, run_metadata
from tritongen.loadtests.metrics import measurement_window
from tritongen.loadtests.model_stats import StatsSource
from tritongen.loadtests.progress import Progress
from tritongen.loadtests.prom import PromPoller, scrape, server_view
from tritongen.loadtests.report import LevelServer, LoadInfo, RunInputs, write_report
from tritongen.loadtests.samples import read_samples, sample_files
from tritongen.loadtests.target import preflight, wait_until_idle
from tritongen.loadtests.workload import CONFIG_ENV, LocustConfig
from tritongen.plan import resolve_path
from tritongen.plan.load import LoadProfile, Protocol
from tritongen.runtimes import clients
from tritongen.token_ids import LLM_MODEL

PROTOCOLS = get_args(Protocol)
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
    triton_grpc_url: str | None = None
    """Triton's gRPC host:port behind the OpenAI frontend, for its statistics (protocol openai); None: unknown."""

    def stats_source(self):
        """Where Triton's statistics extension answers (model_stats.StatsSource), or None."""
        if self.http_url:
            return StatsSource(self.http_url, "http")
        url = self.grpc_url or self.triton_grpc_url
        return StatsSource(url, "grpc") if url else None

    def url_for(self, protocol: str) -> str:
        url = {"grpc": self.grpc_url, "openai": self.openai_url}.get(protocol, self.http_url)
        if not url:
            raise SpecError(problem("--url", f"no endpoint for protocol {protocol}", "pass --url host:port"))
        return url


@dataclass(frozen=True)
class LoadTest:
    """What `tritongen loadtest` runs: the Plan's load profile with the command line's flags applied, and whom the
    users call."""

    profile: LoadProfile
    model: str | None = None
    """The Triton model the users call (`--model`); None: the ensemble, or tensorrt_llm_bls when streams are
    cancelled (the ensemble cannot stop a running step)."""
    path: Literal["text", "ids"] = "text"
    """`ids`: the users send token ids to tensorrt_llm and detokenize themselves (tritongen.token_ids)."""


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


# Flag (argparse dest) -> the LoadProfile field it overrides; --sweep is parsed on its own (parse_sweep).
OVERRIDES = {"protocol": "protocol", "users": "users", "spawn_rate": "spawn_rate", "duration": "duration_s",
             "processes": "processes", "warmup": "warmup_s", "request_rate": "request_rate", "arrival": "arrival",
             "burstiness": "burstiness", "max_concurrency": "max_concurrency", "trace": "trace_file",
             "cancel_rate": "cancel_rate", "cancel_after_ms": "cancel_after_ms"}


def _flag(field_name: str) -> str:
    """The flag that sets a profile field (`validation.load.<field>` where no flag does)."""
    dest = next((d for d, f in OVERRIDES.items() if f == field_name), None)
    if dest is None:
        return f"validation.load.{field_name}"
    return {"users": "-u", "duration": "-t", "spawn_rate": "-r"}.get(dest, "--" + dest.replace("_", "-"))


def _existing_file(path: str | None, field_name: str) -> None:
    if path and not Path(path).is_file():
        raise SpecError(problem(field_name, f"{path} does not exist", "point it at an existing JSONL file"))


def load_from_args(args: argparse.Namespace, plan) -> LoadTest:
    """The plan's load profile with the flags over it; every combination checked here, before any load."""
    given = {field_name: getattr(args, dest) for dest, field_name in OVERRIDES.items()
             if getattr(args, dest, None) is not None}
    # An explicit load on the command line (-u or --request-rate) is one level, unless --sweep is given too.
    # A trace on the command line is the load itself: the plan's sweep and processes do not apply to it.
    traced = "trace_file" in given
    if traced:
        given["trace_file"] = str(resolve_path(Path.cwd(), given["trace_file"]))  # a flag's path: from here
        given.setdefault("processes", 1)
    explicit = "users" in given or "request_rate" in given or traced
    sweep = parse_sweep(getattr(args, "sweep", None)) or (() if explicit else plan.load.sweep)
    profile = plan.load.model_copy(update={**given, "sweep": sweep})
    load = LoadTest(profile, model=getattr(args, "model", None), path=getattr(args, "path", None) or "text")
    _existing_file(profile.trace_file, "--trace / validation.load.trace_file")
    for flag, value in (("-u", profile.users), ("-t", profile.duration_s), ("-r", profile.spawn_rate),
                        ("--processes", profile.processes), ("--burstiness", profile.burstiness),
                        ("--cancel-after-ms", profile.cancel_after_ms)):
        if value <= 0:
            raise SpecError(problem(flag, f"must be > 0 (got {value})", "pass a positive number"))
    if profile.request_rate is not None and profile.request_rate <= 0:
        raise SpecError(problem("--request-rate", f"must be > 0 (got {profile.request_rate})", "pass requests/s"))
    if not 0 <= profile.warmup_s < profile.duration_s:
        raise SpecError(problem("--warmup", f"must be >= 0 and below the run time {profile.duration_s:g}s "
                                f"(got {profile.warmup_s:g})", "shorten the warm-up or lengthen -t"))
    if not 0 <= profile.cancel_rate <= 1:
        raise SpecError(problem("--cancel-rate", f"must be within [0, 1] (got {profile.cancel_rate})",
                                "pass a fraction, e.g. 0.2"))
    if profile.cancel_rate > 0 and profile.protocol not in STREAMING:
        raise SpecError(problem("--cancel-rate", f"needs a streaming protocol (got {profile.protocol})",
                                "use --protocol grpc or http_stream"))
    target = clients(plan).dialect()
    if load.model is not None and (profile.protocol == "openai" or target is not None):
        what = "the OpenAI protocol calls the frontend's public model" if profile.protocol == "openai" else \
            target.why
        raise SpecError(problem("--model", f"does not apply here: {what}", "drop --model"))
    if load.path == "ids" and (profile.protocol != "grpc" or not clients(plan).ensemble or load.model):
        why = "drop --model (the ids path calls tensorrt_llm)" if load.model else \
            "use --protocol grpc" if profile.protocol != "grpc" else f"use the text path for the {plan.runtime} runtime"
        raise SpecError(problem("--path", "ids streams token ids from tensorrt_llm over gRPC, with the C++ "
                                "backend's tensors (not NVIDIA's LLM-API model, not HTTP or OpenAI)", why))
    if profile.cancel_rate > 0 and load.model == "ensemble" and plan.ensemble_entry == "triton":
        say("warning: --cancel-rate through `ensemble` rendered with serving.ensemble: triton: Triton's ensemble "
            "scheduler checks cancellation only between steps, so cancelled streams keep generating to their end "
            "(drop --model to cancel through tensorrt_llm_bls, the ensemble's only step)")
    if profile.mode == "closed" and any(x != int(x) for x in profile.sweep):
        raise SpecError(problem("--sweep", "closed-loop levels are user counts", "pass whole numbers, or "
                                "--request-rate to sweep request rates"))
    if profile.mode == "trace" and (profile.sweep or profile.processes > 1):
        raise SpecError(problem("--trace", "a trace is replayed once, in one Locust process",
                                "drop --sweep and --processes"))
    try:  # what the checks above do not name (e.g. --max-concurrency 0) still meets the profile's own limits
        LoadProfile.model_validate(profile.model_dump())
    except ValidationError as err:
        first = err.errors()[0]
        raise SpecError(problem(_flag(str(first["loc"][0])), first["msg"].lower(), "see `tritongen loadtest -h`")) \
            from None
    return load


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
    env[CONFIG_ENV] = str(config_path)
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
    frontend_snapshots: list = field(default_factory=list)
    """The OpenAI frontend's /metrics, scraped alike (protocol openai)."""
    active_after: float | None = None
    host: dict | None = None
    """Host-wide CPU over the level (tritongen.loadtests.host)."""


def locust_config(plan, load: LoadTest, url: str, samples_dir: Path, level: float) -> LocustConfig:
    """What the Locust processes of one level run: the profile unchanged, and the level's facts."""
    return LocustConfig(
        profile=load.profile, url=url, level=level, samples_dir=str(samples_dir), tokenizer_dir=plan.tokenizer.dir,
        add_special_tokens=plan.tokenizer.add_special_tokens, skip_special_tokens=plan.tokenizer.skip_special_tokens,
        path=load.path, timeout_s=float(STOP_TIMEOUT_S), rate_shares=load.profile.processes,
        **_target_model(plan, load))


def workload(config: LocustConfig) -> dict:
    """The report's `metadata.workload` (docs/loadtest-report.md): the definition the Locust processes ran, as
    flat keys; the run's first level stands for the per-level request_rate."""
    p = config.profile
    return {
        "url": config.url, "protocol": p.protocol, "tokenizer_dir": config.tokenizer_dir, "model": config.model,
        "api_key_env": config.api_key_env, "input_tokens": p.input_tokens.model_dump(),
        "output_tokens": p.output_tokens.model_dump(), "prompts_file": p.prompts_file,
        "add_special_tokens": config.add_special_tokens, "skip_special_tokens": config.skip_special_tokens,
        "path": config.path, "timeout_s": config.timeout_s, "seed": config.seed, "request_rate": config.request_rate,
        "arrival": p.arrival, "burstiness": p.burstiness, "trace_file": p.trace_file, "processes": config.rate_shares,
        "cancel_rate": p.cancel_rate, "cancel_after_ms": p.cancel_after_ms, "duration_s": p.duration_s,
        "dialect": config.dialect,
    }


def _target_model(plan, load: LoadTest) -> dict:
    """The LocustConfig keys that name what the users call: the OpenAI frontend's public model name (and its API
    key's variable), a runtime's own model in its request dialect (its own tensor names), else `--model`,
    else the ensemble -- or, when streams are cancelled and the ensemble is Triton's scheduler (serving.ensemble:
    triton), tensorrt_llm_bls: the same tensors as the ensemble (its only step), and the one a cancellation reaches
    (Triton's ensemble scheduler checks cancellation only between steps, so a cancelled ensemble request keeps
    generating)."""
    if load.profile.protocol == "openai" and plan.frontend is not None:
        # The users read usage the way the route's dialect counts (the frontend counts for a model that has none).
        return {"model": plan.frontend.models[0].name, "api_key_env": plan.frontend.api_key_env,
                "dialect": plan.frontend.models[0].dialect}
    target = clients(plan).dialect()
    if target is not None:
        return {"dialect": target.key, "model": target.model}
    if load.path == "ids":
        return {"model": LLM_MODEL}
    if load.model is not None:
        return {"model": load.model}
    triton_ensemble = plan.ensemble_entry == "triton"
    return {"model": BLS_MODEL if load.profile.cancel_rate > 0 and triton_ensemble else "ensemble"}


def _run_level(plan, endpoint: Endpoint, load: LoadTest, out: Path, level: float, url: str,
               distribution=None, progress: bool = False) -> LevelRun:
    profile = load.profile
    stem = f"locust_L{level:g}" if len(profile.levels()) > 1 else "locust"
    samples_dir = out / "samples" / f"level-{level:g}"
    samples_dir.mkdir(parents=True)
    config = locust_config(plan, load, url, samples_dir, level)
    if distribution is not None:  # each worker sends its share of an open-loop rate
        config = config.model_copy(update={"rate_shares": distribution.workers})
    config_path = out / f"{stem}_config.json"
    config_path.write_text(config.to_json())
    if profile.mode == "closed":
        users, spawn_rate = int(level), (level if len(profile.levels()) > 1 else profile.spawn_rate)
    else:
        # Open loop: users are concurrency slots, started at once; the schedule decides when requests go.
        users = profile.max_concurrency or DEFAULT_MAX_CONCURRENCY
        spawn_rate = users
    run = LevelRun(level, samples_dir, [])
    poller = frontend_poller = None
    stats = endpoint.stats_source()
    if endpoint.metrics_url:
        try:
            run.snapshots.append(scrape(endpoint.metrics_url, stats=stats))
            poller = PromPoller(endpoint.metrics_url, interval_s=1.0, stats=stats).start()
        except CheckFailed as err:
            say(f"warning: no server view: {err}")
    if profile.protocol == "openai" and endpoint.openai_url:
        frontend_url = f"http://{endpoint.openai_url}/metrics"
        try:
            run.frontend_snapshots.append(scrape(frontend_url))
            frontend_poller = PromPoller(frontend_url, interval_s=1.0).start()
        except CheckFailed:
            pass  # the breakdown then has no frontend stage
    what = {"closed": f"{users} users", "open": f"{level:g} requests/s ({profile.arrival}) with at most "
            f"{users} in flight", "trace": f"trace {profile.trace_file} with at most {users} in flight"}
    say(f"locust: {what[profile.mode]}, {profile.protocol} -> {url}, {max(1, math.ceil(profile.duration_s))} s"
        + (f" ({profile.warmup_s:g} s warm-up)" if profile.warmup_s else "")
        + (f", {profile.processes} processes" if profile.processes > 1 else ""))
    cmd = _locust_command(out, users, spawn_rate, profile.duration_s, profile.processes, stem)
    timeout_s = profile.duration_s + STOP_TIMEOUT_S + 120
    watch = HostWatch(host_ports(endpoint.grpc_url, endpoint.http_url, endpoint.openai_url,
                                 endpoint.triton_grpc_url)).start()
    try:
        with Progress(f"{profile.level_unit} {level:g}", samples_dir, enabled=progress):
            _run_level_locust(cmd, config, config_path, out, distribution, timeout_s)
    finally:
        run.host = watch.stop()
        if poller is not None:
            run.snapshots += poller.stop()
        if frontend_poller is not None:
            run.frontend_snapshots += frontend_poller.stop()
    if endpoint.metrics_url and run.snapshots:
        try:
            run.active_after, _ = wait_until_idle(endpoint.metrics_url)
            run.snapshots.append(scrape(endpoint.metrics_url, stats=stats))
        except CheckFailed as err:
            say(f"warning: no server view after the level: {err}")
            run.snapshots = []
    run.csv_files = sorted(out.glob(f"{stem}_*.csv"))
    return run


def _run_level_locust(cmd: list[str], config: LocustConfig, config_path: Path, out: Path, distribution,
                      timeout_s: float) -> None:
    if distribution is None:
        _run_locust(cmd, config_path, out / "locust.log", timeout_s=timeout_s)
    else:  # Locust master here, workers here (--workers) or on other hosts (--master)
        run_master(cmd, config, out, distribution,
                   lambda argv, t: _run_locust(argv, config_path, out / "locust.log", t), timeout_s=timeout_s)


def _edges(snapshots: list, ws: float, we: float):
    """The scrapes nearest a window's edges: the last at or before its start, the first at or after its end."""
    snaps = sorted(snapshots, key=lambda s: s.taken_at)
    if len(snaps) < 2:
        return None
    before = max((s for s in snaps if s.taken_at <= ws), key=lambda s: s.taken_at, default=snaps[0])
    after = min((s for s in snaps if s.taken_at >= we), key=lambda s: s.taken_at, default=snaps[-1])
    return before, after


def _views(run: LevelRun, start_wall: float, window_start_s: float, window_end_s: float):
    """(server view over the window, over the whole level, the window's edge scrapes, the frontend's edge scrapes):
    differences of the scrapes nearest the edges."""
    ws, we = start_wall + window_start_s, start_wall + window_end_s
    edges = _edges(run.snapshots, ws, we)
    if edges is None:
        return None, None, None, ()
    before, after = edges
    snaps = sorted(run.snapshots, key=lambda s: s.taken_at)
    inside = [s for s in snaps if before.taken_at < s.taken_at < after.taken_at]
    return (server_view(before, after, inside), server_view(snaps[0], snaps[-1], snaps[1:-1]), edges,
            _edges(run.frontend_snapshots, ws, we) or ())


def run_loadtest(plan, endpoint: Endpoint, load: LoadTest, out: Path, *, spec_path: str | None = None,
                 distribution=None, progress: bool = False) -> int:
    """Check the target, run every level, write the report into `out`, print the verdicts; the gate's exit code.

    `distribution` (tritongen.loadtests.distributed.Distribution) runs each level on Locust's master/worker mode;
    the workers' samples arrive in the level's samples folder like a single process's. `progress`: a status line
    per level while it runs (tritongen.loadtests.progress). Ctrl-C (SIGINT) stops the level in flight; the report
    of the levels finished before it is written, marked incomplete, and the exit code is 130.
    """
    url = endpoint.url_for(load.profile.protocol)
    target = _target_model(plan, load)
    # exit 3 before any load when not ready
    try:
        with on_interrupt("stopping before any load", say):
            server_info = preflight(url, load.profile.protocol, target.get("model", "ensemble"),
                                    api_key_env=target.get("api_key_env"))
    except KeyboardInterrupt:
        say("nothing ran: no report")
        return INTERRUPTED_EXIT
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "samples", ignore_errors=True)  # a report must never mix in samples of an earlier run
    (out / "locust.log").write_text("")
    levels = load.profile.levels()
    if load.profile.mode == "trace":
        rows = read_trace(load.profile.trace_file)
        span = rows[-1].offset_s
        levels = (round(len(rows) / span, 3) if span > 0 else float(len(rows)),)
        load = dataclasses.replace(load, profile=load.profile.model_copy(
            update={"duration_s": max(load.profile.duration_s, span + 1)}))
    profile = load.profile

    runs, incomplete = [], None
    try:
        with on_interrupt("stopping the level in flight; the report holds the levels that finished", say):
            for i, level in enumerate(levels, 1):
                if len(levels) > 1:
                    say(f"level {i}/{len(levels)}: {level:g} {profile.level_unit}")
                runs.append(_run_level(plan, endpoint, load, out, level, url, distribution, progress))
    except KeyboardInterrupt:
        cut = levels[len(runs)] if len(runs) < len(levels) else None
        left = sample_files(out / "samples" / f"level-{cut:g}") if cut is not None else []
        finished = sum(1 for f in left for line in open(f, "rb") if line.strip())
        unfinished = (f"; the {finished} request(s) that finished in {profile.level_unit} {cut:g} before it are in "
                      f"{out / 'samples' / f'level-{cut:g}'}, not in a report (a level cut short has no window)"
                      if finished else "")
        if not runs:
            say(f"interrupted before the first level finished: no level to report{unfinished}")
            return INTERRUPTED_EXIT
        done = ", ".join(f"{run.level:g}" for run in runs)
        incomplete = (f"interrupted (Ctrl-C) during {profile.level_unit} {cut:g}: the report holds "
                      f"the {len(runs)} of {len(levels)} levels that finished ({done})")
        say(f"interrupted: writing the report of the finished levels ({done}){unfinished}")

    files = [f for run in runs for f in sample_files(run.samples_dir)]
    samples = read_samples(files)
    if not samples:
        tail = "\n".join((out / "locust.log").read_text(errors="replace").splitlines()[-30:])
        raise CheckFailed(f"locust recorded no requests; its log ({out / 'locust.log'}) ends:\n{tail}")
    servers, cpu, host = {}, {}, {}
    for run in runs:
        mine = [s for s in samples if s.level == run.level]
        if mine:
            start, window = measurement_window(mine, profile.warmup_s, profile.duration_s)
            view, view_run, edges, frontend = _views(run, start, window.start_s, window.end_s)
            servers[run.level] = LevelServer(window=view, run=view_run, active_after=run.active_after, edges=edges,
                                             frontend_edges=frontend, called_model=target.get("model"))
        cpu[run.level] = load_generator_cpu(run.samples_dir)
        host[run.level] = run.host
    ran = workload(locust_config(plan, load, url, Path("."), levels[0]))
    inputs = RunInputs(
        load=LoadInfo(mode=profile.mode, level_unit=profile.level_unit, warmup_s=profile.warmup_s,
                      duration_s=profile.duration_s),
        deployment=plan.name, metadata=run_metadata(plan, server_info, ran, spec_path), servers=servers,
        load_generator=cpu, host=host, sample_files=files, locust_csv=[f for run in runs for f in run.csv_files],
        output_token_counter=clients(plan).output_token_counter, incomplete=incomplete)
    report = write_report(out, samples, plan.slo, inputs)
    console.print_report(report.summary, out, report.html_path, report.json_path)
    if incomplete:
        say(f"INCOMPLETE: {incomplete}")
        return INTERRUPTED_EXIT
    return report.exit_code


INTERRUPTED_EXIT = EXIT
"""The shell's code for a command ended by SIGINT (128 + 2), also when the report of the finished levels is written."""

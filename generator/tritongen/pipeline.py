"""Glue between stages that the CLI and `up` share: `up` itself and its OpenAI-frontend measurement."""

from __future__ import annotations

import argparse
import dataclasses
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tritongen.client import stream_grpc
from tritongen.errors import CheckFailed, EnvironmentMissing, SpecError, problem
from tritongen.frontend.metrics import histogram_buckets, quantiles
from tritongen.frontend.server import FrontendProcess, FrontendWorkers
from tritongen.loadtests.interrupt import on_interrupt
from tritongen.loadtests.progress import wanted
from tritongen.loadtests.runner import INTERRUPTED_EXIT, Endpoint, LoadTest, load_from_args, run_loadtest, say
from tritongen.plan import Plan, load_plan
from tritongen.plan.checks import require_tokenizer
from tritongen.render import render_for, write_repository
from tritongen.runtimes import launch
from tritongen.serve import TritonServer
from tritongen.verify import verify_repository


def _stage(number: int, total: int, name: str, detail: str = "") -> None:
    say(f"[{number}/{total}] {name}" + (f": {detail}" if detail else ""))


def up(args: argparse.Namespace) -> int:
    """validate -> plan -> render -> verify -> serve (embedded tritonserver) -> loadtest -> report -> stop."""
    total = 7
    plan = load_plan(args.spec, engine_dir=args.engine_dir)
    rt = launch(plan)
    if not rt.embedded:
        raise EnvironmentMissing(problem(
            "runtime", rt.not_embedded(),
            "run `tritongen deploy SPEC --target docker` (or compose / k8s) and `tritongen loadtest` against it"))
    require_tokenizer(plan.tokenizer.dir)
    _stage(1, total, "validate", f"{args.spec} ({plan.name}, runtime {plan.runtime})")
    load = load_from_args(args, plan)
    _stage(2, total, "plan", f"{plan.llm_instance_group.kind} x{plan.llm_instance_group.count}, "
           f"max_batch_size {plan.max_batch_size}, tokenizer {plan.tokenizer.dir}")
    out = Path(args.out or f"up-{plan.name}").resolve()
    repo = out / "model_repository"
    files = render_for(plan)
    # The repository under OUT is tritongen's own output, so a new run replaces it.
    write_repository(files, repo, overwrite=True, flag="--out")
    _stage(3, total, "render", f"{len(files)} files -> {repo}")
    findings = verify_repository(repo)
    if findings:
        for finding in findings:
            say(f"FAIL {finding}")
        raise CheckFailed(f"{repo}: {len(findings)} verification finding(s)")
    _stage(4, total, "verify", "configs parse, ensemble wiring consistent")
    server = TritonServer(repo, log_path=out / "tritonserver.log")
    frontends: list = []  # the OpenAI frontend once started, for the stop
    code = INTERRUPTED_EXIT
    try:
        with on_interrupt("stopping " + ("the OpenAI frontend and " if plan.frontend.enabled else "")
                          + "tritonserver", say):
            code = _serve_and_load(args, plan, load, repo, out, server, total, frontends.append)
    except KeyboardInterrupt:
        say("nothing finished before Ctrl-C: no report (the load test had not begun)")
    finally:
        _stage(7, total, "stop", "stopping " + ("the OpenAI frontend and " if frontends else "") + "tritonserver")
        for frontend in frontends:
            frontend.stop()
        server.stop()
    return code


def _serve_and_load(args: argparse.Namespace, plan: Plan, load: LoadTest, repo: Path, out: Path, server, total: int,
                    started: Callable) -> int:
    """Stages 5 and 6 of `up`: the server (and the frontend, handed to `started` for the stop), then the load; the
    load test's exit code (130 when Ctrl-C stopped it: it wrote the report of the levels that finished)."""
    profile = load.profile
    _stage(5, total, "serve", "starting the embedded tritonserver ...")
    server.start(timeout=args.server_timeout)
    _stage(5, total, "serve", f"ready: http {server.http_url}, grpc {server.grpc_url}, "
           f"metrics {server.metrics_url}, log {server.log_path}")
    _stream_one(server.grpc_url, plan.max_tokens_default)
    openai_port = getattr(args, "openai", None)
    overhead = getattr(args, "openai_overhead", False)
    frontend = None
    if openai_port is not None or overhead or profile.protocol == "openai" or plan.frontend.enabled:
        frontend = _start_frontend(plan, repo, server.grpc_url, openai_port, out / "frontend.log")
        started(frontend)
        _stage(5, total, "serve", f"OpenAI API: {frontend.base_url} (model {plan.frontend.models[0].name})")
    endpoint = Endpoint(grpc_url=server.grpc_url, http_url=server.http_url, metrics_url=server.metrics_url,
                        openai_url=frontend.url if frontend else None)
    levels = ", ".join(f"{x:g}" for x in profile.levels())
    if overhead:
        _stage(6, total, "loadtest", f"{profile.mode} loop, {profile.level_unit} {levels}, grpc then "
               f"openai, {max(1, round(profile.duration_s))} s each")
        return _with_server_check(lambda: openai_overhead(plan, endpoint, load, out, args.spec), server)
    _stage(6, total, "loadtest", f"{profile.mode} loop, {profile.level_unit} {levels}, "
           f"{profile.protocol}, {max(1, round(profile.duration_s))} s per level")
    return _with_server_check(lambda: run_loadtest(plan, endpoint, load, out, spec_path=args.spec,
                                                   progress=wanted(args.no_progress)), server)


def _start_frontend(plan: Plan, repo: Path, grpc_url: str, port: int | None, log: Path):
    """The OpenAI frontend in its own process on `port` (None or -1: the plan's port; 0: a free one)."""
    if plan.frontend is None:
        raise SpecError(problem("frontend", "the plan has no frontend section (an older lock file?)",
                                "re-plan with `tritongen plan --json`"))
    chosen = plan.frontend.port if port in (None, -1) else port
    workers, _ = plan.frontend.workers_on_host()
    if workers > 1:
        return FrontendWorkers(repo, grpc_url, workers=workers, port=chosen, log_path=log).start()
    return FrontendProcess(repo, grpc_url, port=chosen, log_path=log).start()


def openai_overhead(plan: Plan, endpoint: Endpoint, load: LoadTest, out: Path, spec_path: str | None = None) -> int:
    """The same load through gRPC and through the OpenAI frontend; writes openai_overhead.json with the TTFT
    (and ITL) each protocol's clients saw and the difference. Exit code: the worse SLO verdict of the two."""


    profile = load.profile
    if len(profile.levels()) != 1:
        raise SpecError(problem("--openai-overhead", "compares the two protocols at one load level",
                                "drop --sweep (or --trace)"))

    def added_buckets() -> dict[float, float]:
        text = urllib.request.urlopen(f"http://{endpoint.openai_url}/metrics", timeout=10).read().decode()
        return histogram_buckets(text, "tritongen_openai_added_latency_seconds")

    runs, code = {}, 0
    for protocol in ("grpc", "openai"):
        # Both protocols call the same Triton model: the frontend's (tensorrt_llm_bls unless the spec says ensemble).
        model = plan.frontend.models[0].triton_model if protocol == "grpc" else None
        run = dataclasses.replace(load, profile=profile.model_copy(update={"protocol": protocol}), model=model)
        before = added_buckets() if protocol == "openai" else None
        result = run_loadtest(plan, endpoint, run, out / protocol, spec_path=spec_path)
        if result == INTERRUPTED_EXIT:  # Ctrl-C: the protocol's partial report is written; no comparison
            return result
        code = max(code, result)
        level = json.loads((out / protocol / "loadtest.json").read_text())["levels"][0]
        runs[protocol] = {key: level["metrics"][key] for key in ("request_count", "error_count", "ttft_ms",
                                                                  "itl_ms", "e2e_ms", "output_token_throughput")}
        runs[protocol]["tokens"] = level["tokens"]

    def delta(metric: str, stat: str) -> float | None:
        a, b = runs["grpc"][metric], runs["openai"][metric]
        return None if not a or not b else b[stat] - a[stat]

    # The frontend's own share of each OpenAI request's TTFT, measured per request inside the frontend (the
    # histogram counts the whole life of the frontend, so the runs before this one are subtracted).
    after = added_buckets()
    added = quantiles({le: n - before.get(le, 0.0) for le, n in after.items()})
    added = {"requests": added.pop("count"), **{k: None if v is None else v * 1e3 for k, v in added.items()}}
    result = {"mode": profile.mode, "level": profile.levels()[0], "duration_s": profile.duration_s,
              "runs": runs, "frontend_added_ttft_ms": added,
              "openai_minus_grpc_ms": {f"{m}_{s}": delta(m, s) for m in ("ttft_ms", "itl_ms")
                                       for s in ("p50", "p95")}}
    (out / "openai_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    d = result["openai_minus_grpc_ms"]
    if d["ttft_ms_p50"] is None:
        raise CheckFailed("openai overhead: a run recorded no time to first token; see the two reports")
    say(f"OpenAI frontend vs gRPC at {profile.levels()[0]:g} {profile.level_unit}: TTFT p50 "
        f"{runs['grpc']['ttft_ms']['p50']:.2f} -> {runs['openai']['ttft_ms']['p50']:.2f} ms "
        f"({d['ttft_ms_p50']:+.2f} ms), p95 {d['ttft_ms_p95']:+.2f} ms; ITL p50 {d['itl_ms_p50']:+.2f} ms")
    if added["p50"] is not None:
        say(f"frontend's own share of TTFT (per request, inside the frontend): p50 {added['p50']:.2f} ms, "
            f"p95 {added['p95']:.2f} ms over {added['requests']:.0f} requests")
    say(f"overhead: {out / 'openai_overhead.json'}")
    return code


def _stream_one(grpc_url: str, max_tokens: int) -> None:
    """One streamed completion through the ensemble, printed as it arrives: the deployment answers."""
    prompt = "Once upon a time"
    print(f"       generate  {prompt!r} ->", end=" ", flush=True)
    chunks = 0
    for text in stream_grpc(grpc_url, prompt, max_tokens):
        chunks += 1
        print(text.encode("unicode_escape").decode(), end="", flush=True)
    print(f"   ({chunks} streamed responses)", flush=True)


def _with_server_check(run: Callable[[], int], server) -> int:
    """Run the load test; when the server died during it, say so with its log tail (not just an SLO failure)."""
    code = run()
    if server.process is not None and server.process.poll() is not None:
        raise CheckFailed(f"tritonserver exited with code {server.process.returncode} during the load test:\n"
                          + server.log_tail())
    return code

"""`tritongen up` (a plan run once on this machine through tritongen.orchestrate, with one streamed answer and the
OpenAI frontend when asked) and its OpenAI-frontend measurement."""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tritongen.client import stream_grpc
from tritongen.errors import CheckFailed, SpecError, problem
from tritongen.frontend.metrics import histogram_buckets, quantiles
from tritongen.frontend.server import FrontendProcess, FrontendWorkers
from tritongen.loadtests.interrupt import on_interrupt
from tritongen.loadtests.runner import INTERRUPTED_EXIT, Endpoint, LoadTest, run_loadtest, say
from tritongen.orchestrate import LocalRun, RunOptions, require_embedded
from tritongen.plan import Plan, load_plan
from tritongen.plan.checks import require_tokenizer


STAGES = ("validate", "plan", "render", "verify", "serve", "loadtest", "stop")
"""`up`'s stages, numbered in this order as it reports them."""


def _stage(name: str, detail: str = "") -> None:
    say(f"[{STAGES.index(name) + 1}/{len(STAGES)}] {name}" + (f": {detail}" if detail else ""))


@dataclass(frozen=True)
class UpOptions:
    """`tritongen up`'s settings (tritongen.cli.load builds them from its flags)."""

    spec: str
    """The spec, or a plan JSON."""
    load: Callable[[Plan], LoadTest]
    """The plan's load test with the command line's overrides, every combination checked (before any load)."""
    out: str | None = None
    """Output folder (default ./up-<name>)."""
    engine_dir: str | None = None
    server_timeout: float = 300.0
    openai: int | None = None
    """Start the OpenAI frontend on this port (-1: the plan's; 0: a free one); None: only when the plan or the
    load's protocol asks for it."""
    openai_overhead: bool = False
    """Run the load twice, gRPC then OpenAI, and report the TTFT the frontend adds."""
    progress: bool = True


def up(opts: UpOptions) -> int:
    """validate -> plan -> render -> verify -> serve (embedded tritonserver) -> loadtest -> report -> stop."""
    plan = load_plan(opts.spec, engine_dir=opts.engine_dir)
    require_embedded(plan)
    require_tokenizer(plan.tokenizer.dir)
    _stage("validate", f"{opts.spec} ({plan.name}, runtime {plan.runtime})")
    load = opts.load(plan)
    _stage("plan", f"{plan.llm_instance_group.kind} x{plan.llm_instance_group.count}, "
           f"max_batch_size {plan.max_batch_size}, tokenizer {plan.tokenizer.dir}")
    out = Path(opts.out or f"up-{plan.name}").resolve()
    run = LocalRun(RunOptions(out=out, server_timeout=opts.server_timeout), stage=_stage)
    frontends: list = []  # the OpenAI frontend once started, for the stop
    code = INTERRUPTED_EXIT
    try:
        with on_interrupt("stopping " + ("the OpenAI frontend and " if plan.frontend.enabled else "")
                          + "tritonserver", say):
            run.serve(plan)
            code = _serve_and_load(opts, plan, load, run, frontends.append)
    except KeyboardInterrupt:
        say("nothing finished before Ctrl-C: no report (the load test had not begun)")
    finally:
        if run.server is not None or frontends:  # nothing to stop when the repository failed verification
            _stage("stop", "stopping " + ("the OpenAI frontend and " if frontends else "") + "tritonserver")
        for frontend in frontends:
            frontend.stop()
        run.stop()
    return code


def _serve_and_load(opts: UpOptions, plan: Plan, load: LoadTest, run: LocalRun, started: Callable) -> int:
    """After the server: one streamed answer, the frontend (handed to `started` for the stop), then the load; the
    load test's exit code (130 when Ctrl-C stopped it: it wrote the report of the levels that finished)."""
    profile = load.profile
    server = run.server
    assert server is not None
    _stream_one(server.grpc_url, plan.max_tokens_default)
    frontend = None
    if opts.openai is not None or opts.openai_overhead or profile.protocol == "openai" or plan.frontend.enabled:
        frontend = _start_frontend(plan, run.repo, server.grpc_url, opts.openai, run.options.out / "frontend.log")
        started(frontend)
        _stage("serve", f"OpenAI API: {frontend.base_url} (model {plan.frontend.models[0].name})")
    levels = ", ".join(f"{x:g}" for x in profile.levels())
    if opts.openai_overhead:
        _stage("loadtest", f"{profile.mode} loop, {profile.level_unit} {levels}, grpc then "
               f"openai, {max(1, round(profile.duration_s))} s each")
        return run.checked(lambda: openai_overhead(plan, run.endpoint(frontend.url), load, run.options.out,
                                                   opts.spec))
    _stage("loadtest", f"{profile.mode} loop, {profile.level_unit} {levels}, "
           f"{profile.protocol}, {max(1, round(profile.duration_s))} s per level")
    return run.loadtest(plan, load, run.options.out, openai_url=frontend.url if frontend else None,
                        spec_path=opts.spec, progress=opts.progress)


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

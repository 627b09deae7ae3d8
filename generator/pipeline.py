"""Glue between stages that the CLI and `up` share: render for a Plan, and `up` itself."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from tritongen.errors import CheckFailed, EnvironmentMissing, problem
from tritongen.loadtests.runner import Endpoint, run_loadtest, say, settings_from_args
from tritongen.plan import Plan
from tritongen.render import Locations, render_repository
from tritongen.runtimes.tensorrtllm.release import TRTLLM


def render_for(plan: Plan, where: Locations | None = None) -> dict[str, bytes]:
    """Render the repository of a Plan; for tensorrtllm, check the planned engine first when it is here."""
    from tritongen.runtimes.tensorrtllm.checks import check_plan_engine

    check_plan_engine(plan)
    return render_repository(plan, where)


def _stage(number: int, total: int, name: str, detail: str = "") -> None:
    say(f"[{number}/{total}] {name}" + (f": {detail}" if detail else ""))


def up(args: argparse.Namespace) -> int:
    """validate -> plan -> render -> verify -> serve (embedded tritonserver) -> loadtest -> report -> stop."""
    from tritongen.plan import load_plan
    from tritongen.render import write_repository
    from tritongen.serve import TritonServer
    from tritongen.verify import verify_repository

    total = 7
    plan = load_plan(args.spec, engine_dir=args.engine_dir)
    if plan.runtime == "trtllm":
        raise EnvironmentMissing(problem(
            "runtime", f"trtllm serves NVIDIA's llmapi model, which needs TensorRT-LLM {TRTLLM.version} inside "
            f"{TRTLLM.container}; the embedded tritonserver cannot load it",
            "run `tritongen deploy SPEC --target docker` (or compose / k8s) and `tritongen loadtest` against it"))
    _stage(1, total, "validate", f"{args.spec} ({plan.name}, runtime {plan.runtime})")
    settings = settings_from_args(args, plan)
    _stage(2, total, "plan", f"{plan.llm_instance_group.kind} x{plan.llm_instance_group.count}, "
           f"max_batch_size {plan.triton_max_batch_size}, tokenizer {plan.tokenizer.dir}")
    out = Path(args.out or f"up-{plan.name}").resolve()
    repo = out / "model_repository"
    files = render_for(plan)
    # The repository under OUT is tritongen's own output, so a new run replaces it.
    write_repository(files, repo, overwrite=True)
    _stage(3, total, "render", f"{len(files)} files -> {repo}")
    findings = verify_repository(repo)
    if findings:
        for finding in findings:
            say(f"FAIL {finding}")
        raise CheckFailed(f"{repo}: {len(findings)} verification finding(s)")
    _stage(4, total, "verify", "configs parse, ensemble wiring consistent")
    server = TritonServer(repo, log_path=out / "tritonserver.log")
    _stage(5, total, "serve", "starting the embedded tritonserver ...")
    server.start(timeout=args.server_timeout)
    try:
        _stage(5, total, "serve", f"ready: http {server.http_url}, grpc {server.grpc_url}, "
               f"metrics {server.metrics_url}, log {server.log_path}")
        _stream_one(server.grpc_url, plan.max_tokens_default)
        endpoint = Endpoint(grpc_url=server.grpc_url, http_url=server.http_url, metrics_url=server.metrics_url)
        levels = ", ".join(f"{x:g}" for x in settings.levels())
        _stage(6, total, "loadtest", f"{settings.mode} loop, {settings.level_unit} {levels}, {settings.protocol}, "
               f"{max(1, round(settings.duration_s))} s per level")
        code = _with_server_check(lambda: run_loadtest(plan, endpoint, settings, out, spec_path=args.spec), server)
    finally:
        _stage(7, total, "stop", "stopping tritonserver")
        server.stop()
    return code


def _stream_one(grpc_url: str, max_tokens: int) -> None:
    """One streamed completion through the ensemble, printed as it arrives: the deployment answers."""
    from tritongen.client import stream_grpc

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

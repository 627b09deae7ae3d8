"""Glue between stages that the CLI and `up` share: engine resolution for tensorrtllm, render for a Plan."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from tritongen.errors import CheckFailed, EnvironmentMissing, SpecError, problem
from tritongen.loadtests.runner import Endpoint, run_loadtest, say, settings_from_args
from tritongen.plan import Plan
from tritongen.render import render_repository
from tritongen.runtimes.tensorrtllm.release import TRTLLM
from tritongen.spec import Spec



def resolve_engine_dir(spec: Spec, plan: Plan, *, engine_dir: str | None = None,
                       gpu_arch: str | None = None) -> Path:
    """The engine folder the tensorrt_llm model will load: given, or the cache entry a build would fill."""
    from tritongen.runtimes.tensorrtllm.build import build_engine

    given = engine_dir or spec.engine.engine_dir
    if given:
        path = Path(given).expanduser()
        return path if path.is_absolute() else (Path(plan.spec_dir) / path).resolve()
    from tritongen.runtimes.tensorrtllm.build import detect_gpu_arch

    checkpoint = Path(plan.spec_dir, spec.model.checkpoint).resolve()
    arch = gpu_arch or detect_gpu_arch()
    return Path(build_engine(spec, checkpoint, arch, dry_run=True, log=lambda _: None).engine_dir)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def check_engine_dir(spec: Spec, plan: Plan, engine: Path, log: Callable[[str], None] = _stderr) -> None:
    """Consistency checks against the engine's config.json (exit 2 naming both fields); a missing engine is said."""
    from tritongen.runtimes.tensorrtllm.checks import check_engine, load_engine_config, logits_datatype

    if not (engine / "config.json").is_file():
        log(f"engine.engine_dir: no built engine at {engine} yet, so the repository is not checked against one; "
            "run `tritongen build` for this spec (or point engine.engine_dir at a built engine) before serving")
        return
    config = load_engine_config(engine)
    problems = check_engine(config, spec, tokenizer_vocab_size=plan.tokenizer.vocab_size,
                            world_size=spec.engine.tp_size * spec.engine.pp_size)
    if logits_datatype(config) != plan.logits_datatype:
        problems.append(problem(f"engine {engine} (logits {logits_datatype(config)})",
                                f"differs from the plan's logits_datatype ({plan.logits_datatype})",
                                "set engine.engine_dir to this engine in the spec so the plan reads it"))
    if problems:
        raise SpecError(problems)


def gpu_device_ids(spec: Spec) -> list[list[int]] | None:
    """One model instance over the first tp*pp GPUs of placement.gpu_ids (None: all visible)."""
    if not spec.placement.gpu_ids:
        return None
    world = spec.engine.tp_size * spec.engine.pp_size
    if len(spec.placement.gpu_ids) < world:
        raise SpecError(problem("placement.gpu_ids", f"lists {len(spec.placement.gpu_ids)} GPUs but the engine "
                                f"needs tp_size*pp_size = {world}", f"list {world} GPU ids"))
    return [spec.placement.gpu_ids[:world]]


def render_for(spec: Spec, plan: Plan, *, engine_dir: str | None = None, gpu_arch: str | None = None,
               log: Callable[[str], None] = _stderr) -> dict[str, bytes]:
    """Render the repository for any runtime; for tensorrtllm, check the engine first when it exists."""
    if plan.runtime in ("hf", "trtllm"):
        return render_repository(plan)
    from tritongen.runtimes.tensorrtllm import tensorrt_llm_parameters

    engine = resolve_engine_dir(spec, plan, engine_dir=engine_dir, gpu_arch=gpu_arch)
    check_engine_dir(spec, plan, engine, log)
    if plan.placement is not None:
        # Each server group sees its own GPUs from 0; the KV budget is the one every group can hold.
        world = spec.engine.tp_size * spec.engine.pp_size
        ids: list[list[int]] | None = [list(range(world))]
        kv = spec.serving.kv_cache.model_copy(update={"max_tokens": plan.kv_tokens_per_instance})
        spec = spec.model_copy(update={"serving": spec.serving.model_copy(update={"kv_cache": kv})})
    else:
        ids = gpu_device_ids(spec)
    return render_repository(plan, lambda _plan: tensorrt_llm_parameters(spec, engine, ids))


def _stage(number: int, total: int, name: str, detail: str = "") -> None:
    say(f"[{number}/{total}] {name}" + (f": {detail}" if detail else ""))


def up(args: argparse.Namespace) -> int:
    """validate -> plan -> render -> verify -> serve (embedded tritonserver) -> loadtest -> report -> stop."""
    from tritongen.plan import make_plan
    from tritongen.render import write_repository
    from tritongen.serve import TritonServer
    from tritongen.spec import load_spec
    from tritongen.verify import verify_repository

    total = 7
    spec = load_spec(args.spec)
    _stage(1, total, "validate", f"{args.spec} ({spec.name}, runtime {spec.runtime})")
    if spec.runtime == "trtllm":
        raise EnvironmentMissing(problem(
            "runtime", "trtllm serves NVIDIA's llmapi model, which needs TensorRT-LLM "
            f"{TRTLLM.version} inside {TRTLLM.container}; the embedded tritonserver cannot load it",
            "run `tritongen deploy SPEC --target docker` (or compose / k8s) and `tritongen loadtest` against it"))
    plan = make_plan(spec, Path(args.spec).resolve().parent)
    settings = settings_from_args(args, plan)
    _stage(2, total, "plan", f"{plan.llm_instance_group.kind} x{plan.llm_instance_group.count}, "
           f"max_batch_size {plan.triton_max_batch_size}, tokenizer {plan.tokenizer.dir}")
    out = Path(args.out or f"up-{plan.name}").resolve()
    repo = out / "model_repository"
    files = render_for(spec, plan, engine_dir=args.engine_dir)
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
        _stage(6, total, "loadtest", f"{settings.users} users, {settings.protocol}, "
               f"{max(1, round(settings.duration_s))} s")
        code = _with_server_check(lambda: run_loadtest(plan, endpoint, settings, out), server)
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

"""The handlers of tritongen's own commands (validate, plan, render, verify, serve, generate, build); tritongen.cli
imports this module only when one of them runs."""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import time
from pathlib import Path

from tritongen import client, console, repository_manifest
from tritongen.cli.flags import REFERENCE_HEAD
from tritongen.errors import EnvironmentMissing, SpecError, TritongenError, clip, problem, scrub
from tritongen.frontend.server import FrontendServer, FrontendWorkers
from tritongen.plan import is_plan_file, load_plan, plan_from_file
from tritongen.plan.checks import plan_notes, require_gpu_here
from tritongen.plan.frontend import CONFIG_FILE, FrontendPlan
from tritongen.plan.show import plan_text
from tritongen.render import render_for, status_lines, write_repository
from tritongen.requests import OPTIONAL_FIELDS
from tritongen.runtimes import builder, names
from tritongen.serve import TritonServer, port_in_use
from tritongen.serve.state import clear_state, pick, repository_deployment, write_state
from tritongen.spec import explain, explain_markdown, load_spec
from tritongen.verify import verify_load, verify_repository


def print_notes(plan) -> None:
    for note in plan_notes(plan):
        print(note, file=sys.stderr)


def cmd_validate(args: argparse.Namespace) -> int:
    if args.markdown:
        print(REFERENCE_HEAD + explain_markdown(), end="")
        return 0
    if args.explain:
        for path, type_name, default, doc in explain():
            print(f"{path:45} {type_name:30} {default:12} {doc}")
        return 0
    if not args.spec:
        raise SpecError("SPEC: missing; pass the spec file to validate")
    try:
        spec = load_spec(args.spec)
        # Everything `plan` checks (the checkpoint and its config: parallelism, dtype, tokenizer; with --inventory
        # placement and fp8 support), without the engine cache key's GPU architecture: no GPU needed to validate.
        arch = (spec.engine.gpu_arch or "unchecked") if builder(spec.runtime).builds_engine else None
        _, plan = plan_from_file(args.spec, args.inventory, gpu_arch=arch)
        require_gpu_here(spec.placement.device, args.inventory, spec.engine.gpu_arch if arch else None)
    except TritongenError as err:
        if args.json:  # scripts read the verdict from stdout; the errors still go to stderr with the exit code
            print(json.dumps({"ok": False, "spec": args.spec, "exit_code": err.exit_code,
                              "errors": [scrub(clip(line, 2000)) for line in err.problems]}, indent=2))
        raise
    checked = "spec, checkpoint and " + ("placement on the inventory" if args.inventory else "model settings")
    if args.json:
        print(json.dumps({"ok": True, "spec": args.spec, "name": spec.name, "runtime": spec.runtime,
                          "checked": checked, "notes": plan_notes(plan)}, indent=2))
        return 0
    print_notes(plan)
    print(f"ok: {args.spec} ({spec.name}, runtime {spec.runtime}): {checked}")
    if console.verbose():
        print(plan_text(plan, hint=False), end="")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    plan = load_plan(args.spec, args.inventory, engine_dir=args.engine_dir, gpu_arch=args.gpu_arch)
    if not is_plan_file(args.spec):
        spec = load_spec(args.spec)
        stated = (args.gpu_arch or spec.engine.gpu_arch) if builder(spec.runtime).builds_engine else None
        require_gpu_here(spec.placement.device, args.inventory, stated)
    print_notes(plan)
    if args.json:
        print(plan.to_json(), end="")
        return 0
    print(plan_text(plan, verbose=console.verbose(), hint=not console.quiet()), end="")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    plan = load_plan(args.spec, args.inventory, engine_dir=args.engine_dir, gpu_arch=args.gpu_arch)
    print_notes(plan)
    files = render_for(plan)
    out = Path(args.output)
    lines = status_lines(files, out)
    if args.dry_run:
        for line in lines:
            print(f"{line}  (dry run)")
        return 0
    write_repository(files, out, overwrite=args.force)
    for line in lines:
        console.info(line)
    print(f"model repository: {out.resolve()}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    repo = Path(args.repo)
    _note_without_manifest(repo)
    findings = verify_repository(repo)
    for f in findings:
        print(f"FAIL {f}")
    if findings:
        return 1
    print(f"ok: {repo} parses and its ensemble wiring is consistent")
    if args.load:
        # Loading every model takes a while (tokenizers, the LLM): say so rather than sit silent.
        console.info("loading every model in the embedded tritonserver (up to 300 s) ...")
        states = verify_load(repo)
        for name, state in sorted(states.items()):
            print(f"{state:>6}  {name}")
    return 0


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def cmd_serve(args: argparse.Namespace) -> int:
    server = None
    grpc_url = args.triton_url
    _check_repository(Path(args.repo))
    if args.openai is None and args.triton_url is None and _openai_enabled(Path(args.repo)):
        args.openai = -1  # the repository's frontend.openai.enabled: start it on its configured port
    if grpc_url is None:
        server = TritonServer(Path(args.repo), http_port=args.http_port, grpc_port=args.grpc_port,
                              metrics_port=args.metrics_port, grace_s=args.grace_period)
    elif args.openai is None:
        raise SpecError("--triton-url: given without --openai; add --openai [PORT] to front that Triton")
    frontend = None
    _check_openai_port(args)
    # SIGTERM ends serve as Ctrl-C does, also while the server is still starting: one path stops everything.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if server is not None:
            name = repository_deployment(Path(args.repo))
            same, _ = pick(name=name) if name else (None, [])
            if same is not None:
                print(f"warning: another serve of deployment '{name}' runs ({same.label}); generate and loadtest "
                      "pick the newest: pass --server REPO or --url to choose", file=sys.stderr, flush=True)
            console.info("starting tritonserver ...")
            server.start(timeout=args.timeout)
            grpc_url = server.grpc_url
            print(f"ready  http {server.http_url}  grpc {server.grpc_url}  metrics {server.metrics_url}", flush=True)
            console.info(f"log    {server.log_path}   (Ctrl-C stops)")
            console.detail(f"command {shlex.join(map(str, server.process.args))}")
        if args.openai is not None:
            frontend = _start_openai(args, grpc_url)
        if server is not None:
            path = write_state(Path(args.repo), grpc=server.grpc_url, http=server.http_url, metrics=server.metrics_url,
                               openai=frontend.url if frontend is not None else None)
            console.info(f"state  {path}   (generate and loadtest find this server there)")
        while True:
            if server is not None and (server.failure or server.process.poll() is not None):
                # A dead stub or a server that stopped on its own: exit non-zero so an orchestrator restarts us.
                reason = server.failure or f"tritonserver exited with code {server.process.returncode}"
                print(f"serve: {reason}\n{server.failure_reasons()}", flush=True)
                return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        # A second Ctrl-C (a terminal sends SIGINT to the whole group) must not cut the cleanup short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        clear_state(Path(args.repo))
        if frontend is not None:
            frontend.stop()
        if server is not None and server.process is not None:
            console.info("stopping tritonserver ...")
            # Drain: the server accepts nothing new, requests in flight finish within the grace period (streams
            # still running at its end get a final UNAVAILABLE); then the server, its stubs and /dev/shm regions go.
            server.stop()
            # A stub that crashed on the way out: the stop went on (exit code unchanged), but its cause is said.
            for warning in server.stop_warnings:
                print(f"warning: while tritonserver stopped, {warning}", file=sys.stderr, flush=True)
    return 0


def _check_openai_port(args: argparse.Namespace) -> None:
    """A fixed OpenAI port that something else holds fails now, before tritonserver starts (not after, with a
    frontend that logs the bind error)."""
    if args.openai is None:
        return
    if args.openai == -1:
        port, where = FrontendPlan.read(args.repo).port, "frontend.openai.port of the spec"
    else:
        port, where = args.openai, "--openai"
    if port and port_in_use(port):
        raise EnvironmentMissing(f"serve.openai_port: port {port} ({where}) is already in use by another process; "
                                 "stop that process or pick another port with --openai PORT (0: a free port)")


def _check_repository(repo: Path) -> None:
    """Say exactly why a path cannot be served, before tritonserver fails on it with a log tail."""
    fix = "render one first (`tritongen render SPEC -o DIR`, then `tritongen serve DIR`), or run `tritongen up SPEC`"
    if repo.is_file():
        raise SpecError(problem("REPO", f"{repo} is a file (a spec or a plan?), not a model repository", fix))
    if not repo.is_dir():
        raise SpecError(problem("REPO", f"{repo} does not exist", fix))
    if not any(repo.glob("*/config.pbtxt")):
        raise SpecError(problem("REPO", f"{repo} holds no model (no */config.pbtxt)", fix))
    _note_without_manifest(repo)


def _note_without_manifest(repo: Path) -> None:
    """A repository without a render manifest still serves and verifies, from its config files: say so once."""
    if repo.is_dir() and repository_manifest.read(repo) is None:
        console.info(repository_manifest.NOTE.format(repo=repo), file=sys.stderr)


def _openai_enabled(repo: Path) -> bool:
    """The rendered repository asks for the OpenAI frontend (spec frontend.openai.enabled)."""
    return (repo / CONFIG_FILE).is_file() and FrontendPlan.read(repo).enabled


def _start_openai(args: argparse.Namespace, grpc_url: str):
    config = FrontendPlan.read(args.repo)
    port = config.port if args.openai == -1 else args.openai
    if args.openai_workers is not None and args.openai_workers < 1:
        raise SpecError(problem("--openai-workers", f"must be >= 1 (got {args.openai_workers})",
                                "pass a positive count, or leave it out for the planned one"))
    workers, why = (args.openai_workers, "--openai-workers") if args.openai_workers else config.workers_on_host()
    if workers > 1:
        frontend = FrontendWorkers(Path(args.repo), grpc_url, workers=workers, port=port,
                                   host=args.openai_host, path=args.openai_path).start()
    else:
        frontend = FrontendServer(config, grpc_url, host=args.openai_host, port=port, path=args.openai_path).start()
    names = ", ".join(m.name for m in config.models)
    print(f"openai {frontend.base_url}  models: {names}  (Triton gRPC {grpc_url}; {workers} worker(s): {why})",
          flush=True)
    return frontend


def local_server(protocol: str, *, name: str | None = None, server: str | None = None):
    """The local `tritongen serve` of deployment `name` (or `--server`, or the only one) that has an endpoint for
    `protocol` (tritongen.serve.state.Served), said on stderr with any doubt about the choice; None when none
    matches."""
    chosen, warnings = pick(name=name, server=server)
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr, flush=True)
    if chosen is None or chosen.url(protocol) is None:
        return None
    print(f"server {chosen.label}: {protocol} {chosen.url(protocol)}", file=sys.stderr, flush=True)
    return chosen


def cmd_generate(args: argparse.Namespace) -> int:
    # Each flag named like a request input (--min-tokens, --top-p, ...) sets that input (tritongen.requests.Request).
    params = {name: value for name, value in vars(args).items() if name in OPTIONAL_FIELDS}
    served = None if args.url else local_server(args.protocol, server=args.server)
    url = args.url or (served.url(args.protocol) if served else None) or \
        ("127.0.0.1:8001" if args.protocol == "grpc" else "127.0.0.1:8000")
    client.require_server(url, args.protocol)
    if args.path == "ids":
        if args.protocol != "grpc":
            raise SpecError(problem("--path", "ids needs --protocol grpc (tensorrt_llm streams over gRPC)",
                                    "drop --protocol http"))
        codec = client.ids_codec(url, args.tokenizer)
        for text in client.stream_ids(url, codec, args.prompt, args.max_tokens, stream=args.stream, **params):
            print(text, end="", flush=True)
    elif args.protocol == "grpc":
        for text in client.stream_grpc(url, args.prompt, args.max_tokens, stream=args.stream,
                                       model=args.model, **params):
            print(text, end="" if args.stream else "\n", flush=True)
    elif args.stream:
        for text in client.stream_http(url, args.prompt, args.max_tokens,
                                       model=args.model, **params):
            print(text, end="", flush=True)
    else:
        print(client.generate_http(url, args.prompt, args.max_tokens, model=args.model,
                                   **params), end="")
    print()
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    plan = load_plan(args.spec, gpu_arch=args.gpu_arch)
    rt = builder(plan)
    if not rt.builds_engine:
        raise SpecError(f"runtime: build needs runtime: {names(lambda r: r.builds_engine)}; the {plan.runtime} "
                        "runtime serves the checkpoint as is")

    def arch_source(here: str) -> tuple[str, str]:
        """The setting that chose the planned GPU architecture, and how to make it this machine's."""
        if is_plan_file(args.spec):
            return f"{args.spec}: runtime_settings.gpu_arch", f"re-plan with --gpu-arch {here}"
        field = "--gpu-arch" if args.gpu_arch else "engine.gpu_arch"
        return field, f"set {field} to {here}"

    result = rt.build_engine(plan, examples_dir=args.examples_dir, dry_run=args.dry_run, arch_source=arch_source)
    if args.dry_run:
        for command in result.commands:
            print(" ".join(shlex.quote(c) for c in command))
    print(f"cache key: {result.key}")
    print(f"engine:    {result.engine_dir} ({result.runner})")
    return 0



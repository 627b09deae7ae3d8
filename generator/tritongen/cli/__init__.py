"""`tritongen`: a thin CLI over the stages. Errors map to exit codes here and nowhere else.

Exit codes: 0 success; 1 a check failed (verification, SLO); 2 bad input (spec, flags); 3 something the
command needs is missing from this machine; 70 an internal error (a tritongen bug; `--debug` shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import time
import traceback
from pathlib import Path

from tritongen import console
from tritongen.cli.flags import FINDS_SERVER, REFERENCE_HEAD, add_verbosity_flags, version
from tritongen.demo.model import TOKENIZERS
from tritongen.errors import INTERNAL_ERROR_EXIT, EnvironmentMissing, SpecError, TritongenError, clip, problem, scrub


def print_notes(plan) -> None:
    from tritongen.plan.checks import plan_notes

    for note in plan_notes(plan):
        print(note, file=sys.stderr)


def _cmd_demo(args: argparse.Namespace) -> int:
    """`make demo`: a tiny Llama made locally -> rendered ensemble -> the embedded tritonserver -> a streamed
    completion -> a Locust load test against the example's SLOs, from the repository root. Exit code: the verdict."""
    from tritongen.demo.model import make_demo_model

    root = _demo_root()
    if root != Path.cwd().resolve():
        print(f"[demo] from the tritongen checkout {root} (its examples/{DEMO_EXAMPLE})", flush=True)
    model = make_demo_model(root / "build" / "tiny-llama")
    console.info(f"[demo] tiny Llama checkpoint + tokenizer: {model}")
    console.info("[demo] its weights are random: the generated text is noise by design; the demo proves the "
                 "serving path (rendering, tritonserver, streaming, load test), not a model")
    level = {console.QUIET: ["-q"], console.VERBOSE: ["-v"]}.get(console.level(), [])  # main sets it anew
    return main([*level, "up", str(root / "examples" / DEMO_EXAMPLE), "--out", str(root / "demo-output")])


DEMO_EXAMPLE = "tiny-cpu.yaml"


def _demo_root() -> Path:
    """The checkout the demo runs in: the working folder when it holds examples/tiny-cpu.yaml, else the checkout
    this tritongen is installed from (an editable install); refused before anything is written otherwise."""
    import tritongen

    for root in (Path.cwd().resolve(), Path(tritongen.__file__).resolve().parents[2]):
        if (root / "examples" / DEMO_EXAMPLE).is_file():
            return root
    raise SpecError(problem("demo", f"needs a tritongen checkout (examples/{DEMO_EXAMPLE}), and neither "
                            f"{Path.cwd()} nor this installation is one",
                            "run it in a clone of the tritongen repository, or serve your own spec: "
                            "`tritongen demo-model build/tiny-llama`, then `tritongen up SPEC`"))


def _cmd_validate(args: argparse.Namespace) -> int:
    from tritongen.spec import explain, load_spec

    if args.markdown:
        from tritongen.spec import explain_markdown

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
        from tritongen.plan import plan_from_file

        # Everything `plan` checks (the checkpoint and its config: parallelism, dtype, tokenizer; with --inventory
        # placement and fp8 support), without the engine cache key's GPU architecture: no GPU needed to validate.
        from tritongen.runtimes import runtime

        arch = (spec.engine.gpu_arch or "unchecked") if runtime(spec.runtime).builds_engine else None
        _, plan = plan_from_file(args.spec, args.inventory, gpu_arch=arch)
    except TritongenError as err:
        if args.json:  # scripts read the verdict from stdout; the errors still go to stderr with the exit code
            print(json.dumps({"ok": False, "spec": args.spec, "exit_code": err.exit_code,
                              "errors": [scrub(clip(line, 2000)) for line in err.problems]}, indent=2))
        raise
    checked = "spec, checkpoint and " + ("placement on the inventory" if args.inventory else "model settings")
    if args.json:
        from tritongen.plan.checks import plan_notes

        print(json.dumps({"ok": True, "spec": args.spec, "name": spec.name, "runtime": spec.runtime,
                          "checked": checked, "notes": plan_notes(plan)}, indent=2))
        return 0
    print_notes(plan)
    print(f"ok: {args.spec} ({spec.name}, runtime {spec.runtime}): {checked}")
    if console.verbose():
        from tritongen.plan.show import plan_text

        print(plan_text(plan, hint=False), end="")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from tritongen.plan import load_plan

    plan = load_plan(args.spec, args.inventory, engine_dir=args.engine_dir, gpu_arch=args.gpu_arch)
    print_notes(plan)
    if args.json:
        print(plan.to_json(), end="")
        return 0
    from tritongen.plan.show import plan_text

    print(plan_text(plan, verbose=console.verbose(), hint=not console.quiet()), end="")
    return 0


def _cmd_render(args: argparse.Namespace) -> int:
    from tritongen.render import render_for
    from tritongen.plan import load_plan
    from tritongen.render import status_lines, write_repository

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


def _cmd_verify(args: argparse.Namespace) -> int:
    from tritongen.verify import verify_load, verify_repository

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


def _cmd_serve(args: argparse.Namespace) -> int:
    from tritongen.serve import TritonServer

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
            from tritongen.serve.state import pick, repository_deployment

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
            from tritongen.serve.state import write_state

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
        from tritongen.serve.state import clear_state

        clear_state(Path(args.repo))
        if frontend is not None:
            frontend.stop()
        if server is not None and server.process is not None:
            console.info("stopping tritonserver ...")
            # Drain: the server accepts nothing new, requests in flight finish within the grace period (streams
            # still running at its end get a final UNAVAILABLE); then the server, its stubs and /dev/shm regions go.
            server.stop()
    return 0


def _check_openai_port(args: argparse.Namespace) -> None:
    """A fixed OpenAI port that something else holds fails now, before tritonserver starts (not after, with a
    frontend that logs the bind error)."""
    from tritongen.serve import port_in_use

    if args.openai is None:
        return
    if args.openai == -1:
        from tritongen.plan.frontend import FrontendPlan

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
    from tritongen import repository_manifest

    if repo.is_dir() and repository_manifest.read(repo) is None:
        console.info(repository_manifest.NOTE.format(repo=repo), file=sys.stderr)


def _openai_enabled(repo: Path) -> bool:
    """The rendered repository asks for the OpenAI frontend (spec frontend.openai.enabled)."""
    from tritongen.plan.frontend import CONFIG_FILE, FrontendPlan

    return (repo / CONFIG_FILE).is_file() and FrontendPlan.read(repo).enabled


def _start_openai(args: argparse.Namespace, grpc_url: str):
    from tritongen.frontend.server import FrontendServer
    from tritongen.plan.frontend import FrontendPlan

    config = FrontendPlan.read(args.repo)
    port = config.port if args.openai == -1 else args.openai
    if args.openai_workers is not None and args.openai_workers < 1:
        raise SpecError(problem("--openai-workers", f"must be >= 1 (got {args.openai_workers})",
                                "pass a positive count, or leave it out for the planned one"))
    workers, why = (args.openai_workers, "--openai-workers") if args.openai_workers else config.workers_on_host()
    if workers > 1:
        from tritongen.frontend.server import FrontendWorkers

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
    from tritongen.serve.state import pick

    chosen, warnings = pick(name=name, server=server)
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr, flush=True)
    if chosen is None or chosen.url(protocol) is None:
        return None
    print(f"server {chosen.label}: {protocol} {chosen.url(protocol)}", file=sys.stderr, flush=True)
    return chosen


def _cmd_generate(args: argparse.Namespace) -> int:
    from tritongen import client

    params = {"min_tokens": args.min_tokens, "temperature": args.temperature, "top_k": args.top_k,
              "top_p": args.top_p}
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


def _cmd_demo_model(args: argparse.Namespace) -> int:
    from tritongen.demo.model import make_demo_model

    path = make_demo_model(args.dir, seed=args.seed, force=args.force, tokenizer=args.tokenizer)
    print(f"tiny Llama checkpoint + tokenizer: {path} (random weights: its text is noise by design)")
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from tritongen.plan import is_plan_file, load_plan
    from tritongen.runtimes import names, runtime_of
    from tritongen.runtimes.tensorrtllm import TensorrtllmPlan
    from tritongen.runtimes.tensorrtllm.build import build_engine, detect_gpu_arch

    plan = load_plan(args.spec, gpu_arch=args.gpu_arch)
    if not runtime_of(plan).builds_engine:
        raise SpecError(f"runtime: build needs runtime: {names(lambda r: r.builds_engine)}; the {plan.runtime} "
                        "runtime serves the checkpoint as is")
    trt = plan.runtime_settings
    assert isinstance(trt, TensorrtllmPlan)
    if trt.engine_key is None:
        raise SpecError(problem("engine.engine_dir", f"the plan serves the given engine {trt.engine_dir}, so "
                                "there is nothing to build", "unset engine.engine_dir (and --engine-dir) to build "
                                "into the engine cache"))
    if not args.dry_run:
        here = detect_gpu_arch()
        if trt.gpu_arch != here:
            if is_plan_file(args.spec):
                field, fix = f"{args.spec}: runtime_settings.gpu_arch", f"re-plan with --gpu-arch {here}"
            else:
                field = "--gpu-arch" if args.gpu_arch else "engine.gpu_arch"
                fix = f"set {field} to {here}"
            raise SpecError(problem(field, f"{trt.gpu_arch}, but this machine's GPU 0 is {here} and an engine runs "
                                    "only on the architecture it was built for",
                                    f"build on an {trt.gpu_arch} machine, or {fix}"))
    result = build_engine(trt, plan.paths.checkpoint, examples_dir=args.examples_dir, dry_run=args.dry_run)
    if args.dry_run:
        for command in result.commands:
            print(" ".join(shlex.quote(c) for c in command))
    print(f"cache key: {result.key}")
    print(f"engine:    {result.engine_dir} ({result.runner})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tritongen", description="One YAML spec in; a Triton Inference Server "
                                "deployment of an LLM out, proven under load.",
                                epilog="--debug (anywhere): print the traceback of an error. "
                                "`tritongen COMMAND -h`: the options of one command.")
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}",
                   help="print tritongen's version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("validate", help="validate a spec")
    s.add_argument("spec", nargs="?", help="the deployment spec (YAML) to check")
    s.add_argument("--json", action="store_true", help="print the verdict as JSON on stdout (ok, checked, notes; "
                   "or errors and exit_code)")
    s.add_argument("--explain", action="store_true", help="list every spec field with its type, default and doc")
    s.add_argument("--markdown", action="store_true", help="the spec reference as a Markdown page "
                   "(docs/reference.md)")
    s.add_argument("--inventory", help="also place the model on these GPUs: an inventory file, saved `nvidia-smi "
                   "-L` output, or 'nvml'")
    s.set_defaults(func=_cmd_validate)

    s = sub.add_parser("plan", help="print the fully resolved Plan (--json: a lock file render/deploy/loadtest take)")
    s.add_argument("spec", help="the deployment spec (YAML)")
    s.add_argument("--json", action="store_true", help="the Plan as JSON: pass it to render, deploy or loadtest "
                                                       "in place of the spec")
    s.add_argument("--inventory", help="place on GPUs: 'nvml', an inventory YAML/JSON, or saved `nvidia-smi -L`")
    s.add_argument("--engine-dir", help="tensorrtllm: a built engine folder (default: the engine cache entry)")
    s.add_argument("--gpu-arch", help="tensorrtllm: the engine cache key's GPU architecture, e.g. sm90 (default: "
                                      "from the inventory's GPUs, else GPU 0's through NVML)")
    s.set_defaults(func=_cmd_plan)

    s = sub.add_parser("render", help="render the model repository")
    s.add_argument("spec", help="a spec, or a plan JSON from `tritongen plan --json`")
    s.add_argument("-o", "--output", required=True, help="folder to write the model repository to")
    s.add_argument("--dry-run", action="store_true", help="show what would be written")
    s.add_argument("--force", action="store_true", help="replace an existing, non-empty output folder")
    s.add_argument("--engine-dir", help="tensorrtllm: a built engine folder (default: the engine cache entry)")
    s.add_argument("--gpu-arch", help="tensorrtllm: the engine cache key's GPU architecture, e.g. sm90 (default: "
                                      "from the inventory's GPUs, else GPU 0's through NVML)")
    s.add_argument("--inventory", help="take instance groups and KV budgets from a placement on this inventory")
    s.set_defaults(func=_cmd_render)

    s = sub.add_parser("verify", help="check a model repository")
    s.add_argument("repo", help="a model repository folder (from `tritongen render`)")
    s.add_argument("--load", action="store_true", help="also load it in the embedded tritonserver")
    s.set_defaults(func=_cmd_verify)

    s = sub.add_parser("serve", help="serve a model repository with the embedded tritonserver")
    s.add_argument("repo", help="a model repository folder (from `tritongen render SPEC -o DIR`)")
    s.add_argument("--http-port", type=int, default=0, help="Triton's HTTP port (default 0: a free port)")
    s.add_argument("--grpc-port", type=int, default=0, help="Triton's gRPC port (default 0: a free port)")
    s.add_argument("--metrics-port", type=int, default=0, help="Triton's /metrics port (default 0: a free port)")
    s.add_argument("--timeout", type=float, default=300, help="seconds to wait for every model to be ready "
                   "(default 300)")
    s.add_argument("--grace-period", type=float, default=30.0, metavar="S",
                   help="on SIGTERM/Ctrl-C, seconds requests in flight may finish before the server stops (default "
                   "30, a pod's default terminationGracePeriodSeconds); streams still running then end with "
                   "UNAVAILABLE")
    s.add_argument("--openai", nargs="?", type=int, const=-1, default=None, metavar="PORT",
                   help="also serve the OpenAI-compatible API (default port: frontend.openai.port of the spec; "
                   "0: a free port)")
    s.add_argument("--openai-host", default="127.0.0.1", help="address the OpenAI API listens on")
    s.add_argument("--openai-workers", type=int, default=None, metavar="N",
                   help="OpenAI API worker processes sharing its port, each with its own gRPC channel (default: the "
                   "repository's frontend.json: frontend.openai.workers, else planned from the streams the servers "
                   "carry, at most half this host's cores)")
    s.add_argument("--openai-path", choices=("text", "ids"), default="text",
                   help="text: the API calls the ensemble with text; ids: it calls tensorrt_llm with token ids and "
                   "detokenizes in its workers (same text)")
    s.add_argument("--triton-url", help="host:port of a running Triton's gRPC endpoint to front with --openai "
                   "(local or remote); no tritonserver is started")
    s.set_defaults(func=_cmd_serve)

    s = sub.add_parser("generate", help="send one prompt to a running deployment")
    s.add_argument("prompt", help="the prompt text")
    s.add_argument("--url", help=f"host:port of Triton's endpoint for --protocol. {FINDS_SERVER}, else "
                   "127.0.0.1:8001 for grpc and 127.0.0.1:8000 for http")
    s.add_argument("--server", metavar="NAME|REPO", help="which local `tritongen serve` to call when several run: "
                   "its deployment name or model repository (default: the newest)")
    s.add_argument("--protocol", choices=["grpc", "http"], default="grpc",
                   help="grpc: ModelStreamInfer (default); http: Triton's generate / generate_stream")
    s.add_argument("--stream", action="store_true", help="print the text as it is generated")
    s.add_argument("--max-tokens", type=int, default=32, help="most output tokens (default 32)")
    s.add_argument("--min-tokens", type=int, help="fewest output tokens (the end token is ignored before)")
    s.add_argument("--temperature", type=float, help="sampling temperature (greedy without --top-k/--top-p)")
    s.add_argument("--top-k", type=int, help="sample from the k most likely tokens")
    s.add_argument("--top-p", type=float, help="sample from the smallest set of tokens with this probability")
    s.add_argument("--model", default="tensorrt_llm_bls",
                   help="Triton model to call: tensorrt_llm_bls (default: the ensemble's only step, same inputs; "
                        "Ctrl-C cancels it, while Triton's ensemble scheduler does not pass a cancellation on) or "
                        "ensemble")
    s.add_argument("--path", choices=["text", "ids"], default="text",
                   help="text: send text to --model, which tokenizes and detokenizes in tritonserver; ids: send "
                   "token ids to tensorrt_llm and detokenize here (same text, no Python model per response)")
    s.add_argument("--tokenizer", help="--path ids: the tokenizer folder (default: the one the server's "
                   "preprocessing model names)")
    s.set_defaults(func=_cmd_generate)

    s = sub.add_parser("demo", help="the main job end to end on the embedded default (`make demo`; run it from "
                       "the repository root: examples/tiny-cpu.yaml on a tiny Llama made in build/tiny-llama)")
    s.set_defaults(func=_cmd_demo)

    s = sub.add_parser("demo-model", help="make a tiny Llama checkpoint and tokenizer locally")
    s.add_argument("dir", help="folder to write the checkpoint and tokenizer to")
    s.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    s.add_argument("--force", action="store_true", help="make it again in a folder that exists (without "
                   "--force a checkpoint there is kept as is)")
    s.add_argument("--tokenizer", choices=TOKENIZERS, default="bytelevel",
                   help="bytelevel: byte-level BPE (GPT-2/Llama-3 style); sentencepiece: byte-fallback BPE over "
                        "'▁' words (Llama-2/Mistral style)")
    s.set_defaults(func=_cmd_demo_model)

    s = sub.add_parser("build", help="build (or find in the cache) the TensorRT-LLM engine")
    s.add_argument("spec", help="a spec, or a plan JSON from `tritongen plan --json` (built as planned)")
    s.add_argument("--dry-run", action="store_true", help="print the commands and the cache key only")
    s.add_argument("--gpu-arch", help="engine cache key architecture, e.g. sm90 (default: GPU 0's, through NVML)")
    s.add_argument("--examples-dir", help="a TensorRT-LLM checkout's examples/ folder (local builds)")
    s.set_defaults(func=_cmd_build)
    from tritongen.cli.deploy import add_commands as add_deploy_commands
    from tritongen.cli.load import add_commands as add_load_commands
    from tritongen.cli.tune import add_commands as add_tune_commands

    add_load_commands(sub)
    add_deploy_commands(sub)
    add_tune_commands(sub)
    from tritongen.cli.completion import add_command as add_completion_command

    add_completion_command(sub, p)
    add_verbosity_flags(p, sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command; every outcome is an exit code (see the module docstring), never a stray traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if debug:
        argv.remove("--debug")
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad flags, which is our bad-input code too
        return int(exc.code or 0)
    console.set_level(args.verbosity)
    try:
        return args.func(args)
    except TritongenError as err:
        if debug:
            traceback.print_exc()
        for line in err.problems:
            # A problem may carry context lines (a YAML error's source line and caret): indented under it.
            first, *context = scrub(clip(line, 2000)).split("\n")
            print(f"error: {first}", file=sys.stderr)
            for extra in context:
                print(f"       {extra}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # noqa: BLE001 - the one place an unexpected error becomes an exit code
        if debug:
            traceback.print_exc()
        where = traceback.extract_tb(err.__traceback__)[-1]
        print(f"error: internal error {type(err).__name__}: {scrub(clip(str(err), 300))} (at {Path(where.filename).name}:"
              f"{where.lineno}); this is a tritongen bug: rerun with --debug for the traceback and report it",
              file=sys.stderr)
        return INTERNAL_ERROR_EXIT


if __name__ == "__main__":
    sys.exit(main())

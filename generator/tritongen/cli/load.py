"""`tritongen loadtest` and `tritongen up`: argument parsing only; the runner is tritongen.loadtests.runner and
`up` is tritongen.pipeline.up."""

from __future__ import annotations

import argparse
from pathlib import Path

from tritongen.cli.flags import FINDS_SERVER
from tritongen.errors import SpecError, problem
from tritongen.plan.checks import require_tokenizer
from tritongen.loadtests.progress import wanted
from tritongen.loadtests.runner import PROTOCOLS, Endpoint, LoadTest, load_from_args, run_loadtest


def _endpoint_from_args(args: argparse.Namespace, protocol: str, name: str | None = None) -> Endpoint:
    import sys

    from tritongen.cli import local_server

    default_port = {"grpc": 8001, "openai": 9000}.get(protocol, 8000)
    # Without --url: the local `tritongen serve` of the plan's deployment (its state file), else the usual ports.
    key = "http" if protocol in ("http", "http_stream") else protocol
    served = None if args.url else local_server(key, name=name, server=getattr(args, "server", None))
    state = served.urls if served is not None else {}
    url = args.url or state.get(key) or f"127.0.0.1:{default_port}"
    if ":" not in url or not url.rpartition(":")[2].isdigit():
        raise SpecError(problem("--url", f"{url!r} is not host:port", "pass e.g. --url 127.0.0.1:8001"))
    metrics = None if args.no_metrics else (args.metrics_url or state.get("metrics")
                                            or f"http://{url.rpartition(':')[0]}:8002/metrics")
    if args.url and not args.metrics_url and not args.no_metrics:
        print(f"loadtest: --url without --metrics-url: Triton's metrics are read from {metrics}; if nothing answers "
              "there, the check that client token totals equal the server's is skipped (pass --metrics-url)",
              file=sys.stderr, flush=True)
    return Endpoint(grpc_url=url if protocol == "grpc" else None,
                    http_url=url if protocol in ("http", "http_stream") else None, metrics_url=metrics,
                    openai_url=url if protocol == "openai" else None,
                    triton_grpc_url=state.get("grpc") if protocol == "openai" else None)


def _cmd_loadtest(args: argparse.Namespace) -> int:
    from tritongen.plan import load_plan

    plan = load_plan(args.spec)
    require_tokenizer(plan.tokenizer.dir)  # the load generator sizes prompts and counts tokens with it
    load = load_from_args(args, plan)
    endpoint = _endpoint_from_args(args, load.profile.protocol, plan.name)
    if args.worker:
        return _run_worker(args, plan, load, endpoint)
    out = Path(args.out or f"loadtest-{plan.name}")

    def run() -> int:
        return run_loadtest(plan, endpoint, load, out, spec_path=args.spec,
                            distribution=_distribution_from_args(args, load), progress=wanted(args.no_progress))

    if args.json:
        from tritongen.cli.verdict import with_json_verdict

        return with_json_verdict(out, run)
    return run()


def _distribution_from_args(args: argparse.Namespace, load: LoadTest):
    """--workers N (local worker processes) or --master --workers N (workers on other hosts); None: one process."""
    from tritongen.loadtests.distributed import DEFAULT_MASTER_PORT, Distribution, free_port

    if args.workers is None:
        if args.master:
            raise SpecError(problem("--master", "needs --workers N (the workers to wait for)",
                                    "pass e.g. --master --workers 4, then start 4 `tritongen loadtest SPEC --worker "
                                    "--master-host THIS_HOST`"))
        return None
    if args.workers < 1:
        raise SpecError(problem("--workers", f"must be >= 1 (got {args.workers})", "pass a positive count"))
    if load.profile.processes > 1:
        raise SpecError(problem("--processes", "cannot be combined with --workers",
                                "use --workers N alone (each worker is its own process)"))
    if args.master:
        return Distribution(args.workers, local=False, bind_host=args.master_bind_host,
                            port=args.master_port or DEFAULT_MASTER_PORT, wait_s=args.worker_wait)
    return Distribution(args.workers, local=True, bind_host="127.0.0.1", port=args.master_port or free_port(),
                        wait_s=args.worker_wait)


def _run_worker(args: argparse.Namespace, plan, load: LoadTest, endpoint: Endpoint) -> int:
    from tritongen.loadtests.distributed import DEFAULT_MASTER_PORT, run_worker
    from tritongen.loadtests.runner import locust_config

    if not args.master_host:
        raise SpecError(problem("--worker", "needs --master-host", "pass the host running `tritongen loadtest "
                                "--master`, e.g. --worker --master-host 10.0.0.5"))
    if args.master or args.workers is not None or args.sweep:
        raise SpecError(problem("--worker", "cannot be combined with --master, --workers or --sweep",
                                "the master decides users, duration and levels; pass only --master-host"))
    out = Path(args.out or f"loadtest-{plan.name}-worker")
    # Until the run starts, the plan's level and this worker's own processes; then the master's level and the number
    # of worker processes sharing an open-loop rate (tritongen.loadtests.distributed.LEVEL_MESSAGE).
    profile = load.profile
    config = locust_config(plan, load, endpoint.url_for(profile.protocol), out / "samples",
                           profile.request_rate or profile.users)
    return run_worker(config, out, args.master_host, args.master_port or DEFAULT_MASTER_PORT, profile.processes)


def _cmd_up(args: argparse.Namespace) -> int:
    from tritongen.pipeline import up

    return up(args)


def _load_flags(s: argparse.ArgumentParser) -> None:
    s.add_argument("--protocol", choices=PROTOCOLS, help="default: validation.load.protocol")
    s.add_argument("-u", "--users", type=int, help="concurrent users (default: validation.load.users)")
    s.add_argument("-r", "--spawn-rate", type=float, help="users started per second")
    s.add_argument("-t", "--duration", type=float, help="run time in seconds (per level with --sweep)")
    s.add_argument("--processes", type=int, help="Locust processes (default: validation.load.processes)")
    s.add_argument("--warmup", type=float, help="unmeasured seconds at the start of each level")
    s.add_argument("--sweep", help="comma-separated load levels, one run each: user counts (closed loop) or "
                                   "requests/s (with --request-rate), e.g. 1,2,4,8")
    s.add_argument("--request-rate", type=float, help="open loop: requests/s on an arrival schedule")
    s.add_argument("--arrival", choices=("constant", "poisson", "gamma"), help="open-loop arrival process")
    s.add_argument("--burstiness", type=float, help="gamma shape: < 1 burstier than Poisson, > 1 smoother")
    s.add_argument("--max-concurrency", type=int, help="open loop: most requests in flight (default 64)")
    s.add_argument("--trace", help="replay a JSONL trace (timestamp ms, input_length, output_length)")
    s.add_argument("--cancel-rate", type=float, help="fraction of streamed requests the client cancels")
    s.add_argument("--cancel-after-ms", type=float, help="when, after sending, a request is cancelled")
    s.add_argument("--model", help="Triton model to call (grpc/http): ensemble (default) or tensorrt_llm_bls "
                   "(the default with --cancel-rate: the ensemble cannot stop a running step)")
    s.add_argument("--no-progress", action="store_true", help="no live status line per level (level, elapsed, "
                   "requests, tok/s, errors); it is shown on a terminal only anyway")
    s.add_argument("--path", choices=("text", "ids"), help="text (default): send text to --model, which tokenizes "
                   "and detokenizes in tritonserver; ids: send token ids to tensorrt_llm and detokenize in the "
                   "load generator (grpc only; the same text, no Python model per response)")


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register `loadtest` and `up` on tritongen's subcommand parser."""
    s = subparsers.add_parser("loadtest", help="load-test a running deployment against the spec's SLOs")
    s.add_argument("spec", help="a spec, or a plan JSON from `tritongen plan --json`")
    s.add_argument("--url", help=f"host:port of the endpoint for --protocol. {FINDS_SERVER}, else 127.0.0.1:8001 "
                   "for grpc, :8000 for http, :9000 for openai")
    s.add_argument("--server", metavar="NAME|REPO", help="which local `tritongen serve` to load when several run: "
                   "its deployment name or model repository (default: the newest of the spec's deployment)")
    _load_flags(s)
    s.add_argument("-o", "--out", help="report folder (default ./loadtest-<name>)")
    s.add_argument("--metrics-url", help="Triton /metrics URL (default http://<url host>:8002/metrics)")
    s.add_argument("--no-metrics", action="store_true", help="do not scrape Triton's /metrics")
    s.add_argument("--json", action="store_true", help="print the verdict as JSON on stdout (passed, exit_code, "
                   "capacity, failing objectives per level, report path); progress goes to stderr")
    g = s.add_argument_group("distributed load generation (Locust master/worker)")
    g.add_argument("--workers", type=int, help="Locust workers: started here, or with --master the workers to wait for")
    g.add_argument("--master", action="store_true", help="be the master of --workers N started on other hosts")
    g.add_argument("--worker", action="store_true", help="be a worker of the master at --master-host")
    g.add_argument("--master-host", help="--worker: host of the master")
    g.add_argument("--master-port", type=int, help="master port (default 5557; a free port for local --workers)")
    g.add_argument("--master-bind-host", default="*", help="--master: interface to listen on (default all)")
    g.add_argument("--worker-wait", type=float, default=120, help="seconds the master waits for its workers")
    s.set_defaults(func=_cmd_loadtest)

    s = subparsers.add_parser("up", help="validate, render, verify, serve, load-test and report in one step")
    s.add_argument("spec", help="the deployment spec (YAML)")
    s.add_argument("-o", "--out", help="output folder (default ./up-<name>): model_repository/, report, logs")
    _load_flags(s)
    s.add_argument("--engine-dir", help="tensorrtllm: a built engine folder (default: the engine cache entry)")
    s.add_argument("--server-timeout", type=float, default=300, help="seconds to wait for tritonserver to be ready")
    s.add_argument("--openai", nargs="?", type=int, const=-1, default=None, metavar="PORT",
                   help="also start the OpenAI frontend (default port: frontend.openai.port; 0: a free port; "
                   "implied by --protocol openai and frontend.openai.enabled)")
    s.add_argument("--openai-overhead", action="store_true",
                   help="run the load test twice at the same load, gRPC then OpenAI, and report the TTFT the "
                   "frontend adds")
    s.set_defaults(func=_cmd_up)

"""`tritongen loadtest` and `tritongen up`: from the parsed arguments to tritongen.loadtests.runner and
tritongen.pipeline.up (their flags are in tritongen.cli.parser)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tritongen.cli.commands import local_server
from tritongen.cli.verdict import with_json_verdict
from tritongen.errors import SpecError, problem
from tritongen.loadtests.distributed import DEFAULT_MASTER_PORT, Distribution, run_worker
from tritongen.loadtests.progress import wanted
from tritongen.loadtests.runner import Endpoint, LoadTest, load_from_args, locust_config, run_loadtest
from tritongen.pipeline import UpOptions, up
from tritongen.plan import load_plan
from tritongen.plan.checks import require_tokenizer
from tritongen.ports import free_port


def _endpoint_from_args(args: argparse.Namespace, protocol: str, name: str | None = None) -> Endpoint:
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


def cmd_loadtest(args: argparse.Namespace) -> int:
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
        return with_json_verdict(out, run)
    return run()


def _distribution_from_args(args: argparse.Namespace, load: LoadTest):
    """--workers N (local worker processes) or --master --workers N (workers on other hosts); None: one process."""
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


def cmd_up(args: argparse.Namespace) -> int:
    return up(UpOptions(spec=args.spec, load=lambda plan: load_from_args(args, plan), out=args.out,
                        engine_dir=args.engine_dir, server_timeout=args.server_timeout, openai=args.openai,
                        openai_overhead=args.openai_overhead, progress=wanted(args.no_progress)))

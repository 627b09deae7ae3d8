"""Does what `tritongen deploy --target compose` ships stream as fast as `tritongen serve` of the same spec?

One command, one JSON. For the synthetic runtime (examples/synthetic-cpu.yaml with the tiny demo tokenizer, native
BLS and native token source; --set changes the spec):
1. `tritongen deploy SPEC --target compose -o DIR` writes the deployment exactly as a user gets it: its model
   repository (paths under /models, as the containers see them), Dockerfile.serving and native/ (its build context);
2. the backend libraries are built outside docker with the RUN line of Dockerfile.serving's builder stage, read with
   dockerfile-parse: the same script and flags, with only the container's paths moved here (/src/native -> DIR/native,
   the prefix and build folder -> a temporary folder, /opt/tritonserver/include and lib -> --triton-include /
   --triton-lib, or build.sh's defaults when those are not given);
3. each library the runtime stage copies to /opt/tritonserver/backends/<backend>/ is put into the folder of the model
   that names that backend (Triton searches the model folder before any backend directory), and /models/checkpoint,
   /models/tokenizer and /models/model_repository are made links to the host's folders (the bench refuses to run
   when /models holds anything else);
4. that repository is served by the embedded tritonserver (tritongen.serve.TritonServer, what `tritongen serve`
   runs), next to the repository `tritongen render` writes for the same spec, served the same way;
5. bench/streamclient.py drives the ensemble of each (N processes x M gRPC streams, exact text checked on every
   completed request), --repeat rounds interleaved; the JSON has every round, each side's median and the ratio.

    .venv/bin/python bench/deploy_parity.py --streams 256 --processes 8 --duration 10 --warmup 3 --repeat 3 \
        [--itl-ms 5] [--output-tokens 128] [--triton-include DIR --triton-lib DIR] [--set KEY=VALUE] [--name deploy_parity]

Writes bench/results/<name>.json and prints it. Exit code 1 when a round has errors, inexact text, client != server
token counts, or the deployed side streams below 95% of serve's median.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tritongen.cli import main as tritongen
from tritongen.deploy import serving_image
from tritongen.plan import plan_from_file
from tritongen.serve import TritonServer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import streamclient  # noqa: E402
from engine_speed import measure  # noqa: E402  (client figures + server CPU + counter check, one definition)

RESULTS = ROOT / "bench" / "results"
MODELS = Path("/models")
GOAL = 0.95


def write_spec(args, workdir: Path) -> Path:
    from specs import apply_overrides

    data = yaml.safe_load((ROOT / "examples" / "synthetic-cpu.yaml").read_text())
    data["model"]["checkpoint"] = str(Path(args.checkpoint).resolve())
    overrides = {"synthetic.ttft_ms": args.ttft_ms, "synthetic.itl_ms": args.itl_ms,
                 "serving.max_batch_size": max(64, args.streams)}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = yaml.safe_load(value)
    apply_overrides(data, overrides)
    spec = workdir / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def build_as_dockerfile(out: Path, work: Path, args) -> dict:
    """Run Dockerfile.serving's build.sh line here: {"command": what ran, "libraries": {backend: library}}."""
    from dockerfile_parse import DockerfileParser

    with (out / serving_image.DOCKERFILE).open("rb") as f:
        steps = DockerfileParser(fileobj=f).structure
    run = next(st["value"] for st in steps if st["instruction"] == "RUN" and "build.sh" in st["value"])
    argv = shlex.split(run)
    prefix, build_dir = work / "backends", work / "native-build"
    context = serving_image.NATIVE_CONTEXT
    moved = {f"/src/{context}/": f"{out / context}/", serving_image.BUILD_PREFIX: str(prefix),
             "/tmp/tritongen-native-build": str(build_dir)}
    where = {"--triton-include": args.triton_include, "--triton-lib": args.triton_lib}
    cmd, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in where:
            skip = True
            if where[a]:
                cmd += [a, where[a]]
            continue
        for old, new in moved.items():
            if a.startswith(old):
                a = new + a[len(old):]
        cmd.append(a)
    print("build:", shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    libs = {}
    for st in steps:
        if st["instruction"] == "COPY" and st["value"].startswith("--from=backends"):
            _, src, dest = st["value"].split()
            backend = Path(dest).parent.name
            libs[backend] = prefix / Path(src).relative_to(serving_image.BUILD_PREFIX)
    return {"command": shlex.join(cmd), "libraries": libs}


def place_libraries(repo: Path, libs: dict[str, Path]) -> list[str]:
    """Copy each library into the folder of every model whose config.pbtxt names its backend."""
    placed = []
    for config in sorted(repo.glob("*/config.pbtxt")):
        text = config.read_text()
        for backend, lib in libs.items():
            if f'backend: "{backend}"' in text:
                shutil.copy(lib, config.parent / lib.name)
                placed.append(f"{config.parent.name}/{lib.name}")
    return placed


def link_models(out: Path, spec_plan) -> list[Path]:
    """/models/{checkpoint,tokenizer,model_repository} -> this host's folders, as the compose file mounts them."""
    wanted = {"model_repository": out / "model_repository", "checkpoint": Path(spec_plan.paths.checkpoint),
              "tokenizer": Path(spec_plan.tokenizer.dir)}
    MODELS.mkdir(exist_ok=True)
    made = []
    for name, target in wanted.items():
        link = MODELS / name
        if link.is_symlink():
            link.unlink()
        if link.exists():
            raise SystemExit(f"{link} exists and is not a link this bench made; move it away and run again")
        link.symlink_to(target.resolve())
        made.append(link)
    return made


def run_side(server, args, processes: int, streams: int) -> dict:
    cfg = streamclient.Config(server.grpc_url, "ensemble", processes, streams, args.duration, args.warmup,
                              args.output_tokens, args.input_tokens)
    return measure(server, cfg, streamclient.prepare(cfg))


def median(rounds: list[dict]) -> dict:
    return sorted(rounds, key=lambda r: r["tok_per_s"])[(len(rounds) - 1) // 2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=256, help="concurrent streams")
    ap.add_argument("--processes", type=int, default=8, help="client processes (streams are spread over them)")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--repeat", type=int, default=3, help="rounds, the two sides interleaved")
    ap.add_argument("--itl-ms", type=float, default=5.0)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--checkpoint", default=str(ROOT / "build" / "tiny-llama"),
                    help="tokenizer/checkpoint folder (`tritongen demo-model build/tiny-llama` makes one)")
    ap.add_argument("--triton-include", help="Triton headers for build.sh (the container's /opt/tritonserver/include); "
                    "default: build.sh's own")
    ap.add_argument("--triton-lib", help="folder of libtritonserver.so for build.sh; default: build.sh's own")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="spec override")
    ap.add_argument("--name", default="deploy_parity", help="results file name under bench/results/")
    args = ap.parse_args(argv)

    processes = min(args.processes, args.streams)
    streams = math.ceil(args.streams / processes)
    results: dict = {"deployed": [], "serve": []}
    links: list[Path] = []
    servers = {}
    with tempfile.TemporaryDirectory(prefix="deploy-parity-") as tmp:
        work = Path(tmp)
        spec = write_spec(args, work)
        out, rendered = work / "deployment", work / "rendered"
        for argv_ in (["deploy", str(spec), "--target", "compose", "-o", str(out)],
                      ["render", str(spec), "-o", str(rendered)]):
            if tritongen(argv_) != 0:
                raise SystemExit(f"tritongen {shlex.join(argv_)} failed")
        build = build_as_dockerfile(out, work, args)
        placed = place_libraries(out / "model_repository", build["libraries"])
        _, plan = plan_from_file(spec)
        try:
            links = link_models(out, plan)
            # Served from /models/model_repository, the path the compose file mounts it at.
            servers["deployed"] = TritonServer(MODELS / "model_repository", log_path=work / "deployed.log")
            servers["serve"] = TritonServer(rendered, log_path=work / "serve.log")
            for name, server in servers.items():
                try:
                    server.start(timeout=300)
                except Exception:
                    print(server.log_tail(80))
                    raise
            for round_ in range(args.repeat):
                for name, server in servers.items():
                    r = run_side(server, args, processes, streams)
                    r["round"] = round_
                    print(f"{name:>9} " + streamclient.summary_line(r), flush=True)
                    results[name].append(r)
        finally:
            for server in servers.values():
                server.stop()
            for link in links:
                link.unlink(missing_ok=True)
            if links and MODELS.is_dir() and not any(MODELS.iterdir()):
                MODELS.rmdir()
            bad = [r for rs in results.values() for r in rs if r["errors"] or r["text_exact"] != r["text_checked"]
                   or not r["client_equals_server_tokens"]]
            if bad and servers:
                RESULTS.mkdir(parents=True, exist_ok=True)
                for name in servers:
                    shutil.copy(work / f"{name}.log", RESULTS / f"{args.name}-{name}-tritonserver.log")

    deployed, served = median(results["deployed"]), median(results["serve"])
    ratio = round(deployed["tok_per_s"] / served["tok_per_s"], 3) if served["tok_per_s"] else None
    summary = {
        "deployed_tok_per_s": deployed["tok_per_s"], "serve_tok_per_s": served["tok_per_s"], "ratio": ratio,
        "goal": GOAL, "meets_goal": ratio is not None and ratio >= GOAL,
        "exact_text": all(r["text_exact"] == r["text_checked"] for rs in results.values() for r in rs),
        "errors": sum(r["errors"] for rs in results.values() for r in rs),
        "deployed_itl_ms_p50": deployed["itl_ms_p50"], "serve_itl_ms_p50": served["itl_ms_p50"],
    }
    meta = {"command": shlex.join(["bench/deploy_parity.py", *(argv if argv is not None else sys.argv[1:])]),
            "host": platform.node(), "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "streams": processes * streams, "processes": processes, "build": build["command"],
            "libraries_in_model_folders": placed}
    doc = {"meta": meta, "summary": summary, "rounds": results}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(json.dumps({"meta": meta, "summary": summary}, indent=2, default=str))
    return 0 if summary["meets_goal"] and summary["exact_text"] and not summary["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())

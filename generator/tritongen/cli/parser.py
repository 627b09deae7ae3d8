"""tritongen's argument parser: every command and its flags. It imports nothing but argparse and tritongen.cli.flags,
so `tritongen --help` and `tritongen COMMAND --help` answer without loading the planner, the runtimes, pydantic or
numpy (tests/cli/test_cli_startup.py); the choices below that mirror a spec type are checked against it there."""

from __future__ import annotations

import argparse

from tritongen.cli.flags import FINDS_SERVER, VersionAction, add_verbosity_flags

PROTOCOLS = ("grpc", "http", "http_stream", "openai")
"""--protocol's choices: tritongen.plan.load.Protocol."""
TOKENIZERS = ("bytelevel", "sentencepiece")
"""demo-model --tokenizer's choices: tritongen.demo.model.TOKENIZERS."""
SHELLS = ("bash", "zsh", "tcsh")
"""The shells shtab writes a completion script for."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tritongen", description="One YAML spec in; a Triton Inference Server "
                                "deployment of an LLM out, proven under load.",
                                epilog="--debug (anywhere): print the traceback of an error. "
                                "`tritongen COMMAND -h`: the options of one command.")
    p.add_argument("--version", action=VersionAction,
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

    s = sub.add_parser("plan", help="print the fully resolved Plan (--json: a lock file render/deploy/loadtest take)")
    s.add_argument("spec", help="the deployment spec (YAML)")
    s.add_argument("--json", action="store_true", help="the Plan as JSON: pass it to render, deploy or loadtest "
                                                       "in place of the spec")
    s.add_argument("--inventory", help="place on GPUs: 'nvml', an inventory YAML/JSON, or saved `nvidia-smi -L`")
    s.add_argument("--engine-dir", help="tensorrtllm: a built engine folder (default: the engine cache entry)")
    s.add_argument("--gpu-arch", help="tensorrtllm: the engine cache key's GPU architecture, e.g. sm90 (default: "
                                      "from the inventory's GPUs, else GPU 0's through NVML)")

    s = sub.add_parser("render", help="render the model repository")
    s.add_argument("spec", help="a spec, or a plan JSON from `tritongen plan --json`")
    s.add_argument("-o", "--output", required=True, help="folder to write the model repository to")
    s.add_argument("--dry-run", action="store_true", help="show what would be written")
    s.add_argument("--force", action="store_true", help="replace an existing, non-empty output folder")
    s.add_argument("--engine-dir", help="tensorrtllm: a built engine folder (default: the engine cache entry)")
    s.add_argument("--gpu-arch", help="tensorrtllm: the engine cache key's GPU architecture, e.g. sm90 (default: "
                                      "from the inventory's GPUs, else GPU 0's through NVML)")
    s.add_argument("--inventory", help="take instance groups and KV budgets from a placement on this inventory")

    s = sub.add_parser("verify", help="check a model repository")
    s.add_argument("repo", help="a model repository folder (from `tritongen render`)")
    s.add_argument("--load", action="store_true", help="also load it in the embedded tritonserver")

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
                   help="Triton model to call: tensorrt_llm_bls (default; Ctrl-C cancels it) or ensemble (the same "
                        "BLS under NVIDIA's entry name with serving.ensemble: bls; with serving.ensemble: triton, "
                        "Triton's ensemble scheduler does not pass a cancellation on)")
    s.add_argument("--path", choices=["text", "ids"], default="text",
                   help="text: send text to --model, which tokenizes and detokenizes in tritonserver; ids: send "
                   "token ids to tensorrt_llm and detokenize here (same text, no Python model per response)")
    s.add_argument("--tokenizer", help="--path ids: the tokenizer folder (default: the one the server's "
                   "preprocessing model names)")

    s = sub.add_parser("demo", help="the main job end to end on the embedded default (`make demo`; run it from "
                       "the repository root: examples/tiny-cpu.yaml on a tiny Llama made in build/tiny-llama)")

    s = sub.add_parser("pins", help="each runtime's pinned container: image, release, versions, NVIDIA's driver rule, "
                       "newer releases known, and where each fact was read")
    s.add_argument("--json", action="store_true", help="the same as JSON")

    s = sub.add_parser("demo-model", help="make a tiny Llama checkpoint and tokenizer locally")
    s.add_argument("dir", help="folder to write the checkpoint and tokenizer to")
    s.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    s.add_argument("--force", action="store_true", help="make it again in a folder that exists (without "
                   "--force a checkpoint there is kept as is)")
    s.add_argument("--tokenizer", choices=TOKENIZERS, default="bytelevel",
                   help="bytelevel: byte-level BPE (GPT-2/Llama-3 style); sentencepiece: byte-fallback BPE over "
                        "'▁' words (Llama-2/Mistral style)")
    s.add_argument("--adapters", type=int, default=0, metavar="N",
                   help="also make N small LoRA adapters with PEFT (random, non-zero) in DIR/adapters/lora-1..N")

    s = sub.add_parser("build", help="build (or find in the cache) the TensorRT-LLM engine")
    s.add_argument("spec", help="a spec, or a plan JSON from `tritongen plan --json` (built as planned)")
    s.add_argument("--dry-run", action="store_true", help="print the commands and the cache key only")
    s.add_argument("--gpu-arch", help="engine cache key architecture, e.g. sm90 (default: GPU 0's, through NVML)")
    s.add_argument("--examples-dir", help="a TensorRT-LLM checkout's examples/ folder (local builds)")
    _add_load_commands(sub)
    _add_deploy_command(sub)
    _add_tune_command(sub)
    s = sub.add_parser("completion", help="print a shell completion script (bash, zsh, tcsh)",
                       description="Print a completion script for SHELL. bash: `tritongen completion bash > "
                       "~/.local/share/bash-completion/completions/tritongen`; zsh: `tritongen completion zsh > "
                       "~/.zfunc/_tritongen` with ~/.zfunc on $fpath before compinit.")
    s.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    add_verbosity_flags(p, sub)
    return p


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


def _add_load_commands(subparsers: argparse._SubParsersAction) -> None:
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


def _add_deploy_command(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("deploy", help="write compose files or Kubernetes manifests, or start containers (docker)")
    s.add_argument("spec", help="a spec, or a plan JSON from `tritongen plan --inventory ... --json`")
    s.add_argument("--target", choices=["compose", "k8s", "docker"], required=True,
                   help="compose: docker compose files; k8s: Kubernetes manifests (kustomize); docker: start the "
                   "containers through a docker engine")
    s.add_argument("-o", "--output", required=True, help="folder for model_repository/ and the deployment files")
    s.add_argument("--inventory", help="GPUs to place a spec on: 'nvml' (this machine, the default), an inventory "
                                       "YAML/JSON, or saved `nvidia-smi -L`")
    s.add_argument("--engine-config", help="tensorrtllm: the engine's config.json (or its folder); its folder is "
                                           "the engine that is served (default: engine.engine_dir)")
    s.add_argument("--k8s-mig-strategy", choices=["mixed", "single"], default="mixed",
                   help="how the NVIDIA device plugin advertises MIG slices (default mixed)")
    s.add_argument("--image", help="serving image (default: the pinned TensorRT-LLM container, or for hf a "
                                   "locally built tritonserver image with torch + transformers)")
    s.add_argument("--force", action="store_true", help="replace a non-empty output folder (and, for docker, "
                                                        "containers of the same name)")
    s.add_argument("--timeout", type=float, default=1800, help="docker: seconds to wait for readiness")


def _add_tune_command(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("tune", help="search the runtime's settings for the most goodput under validation.slo, "
                       "measuring each trial with a real serve and load test (docs/tune.md)")
    s.add_argument("spec", help="the spec to tune; the winner is written next to it as <name>.tuned.yaml")
    s.add_argument("--inventory", help="GPU inventory to plan for (placement; goodput is per GPU or MIG slice)")
    s.add_argument("--budget", type=int, help="trials to run, the input spec's own settings first (default 16; "
                   "with --resume: the total, finished trials included)")
    s.add_argument("--time", help="stop starting trials after this long (600, 600s, 15m, 2h)")
    s.add_argument("--resume", metavar="DIR", help="continue the tune stored in DIR (its study.db); finished "
                   "trials are not run again")
    s.add_argument("--out", metavar="DIR", help="where the trials, the table, the plot and the store go "
                   "(default: tune-<name> next to the spec)")
    s.add_argument("--knob", action="append", metavar="PATH=LOW:HIGH", help="narrow one knob's range, or fix it "
                   "(PATH=VALUE); repeatable. The runtime's knobs and ranges: docs/tune.md")
    s.add_argument("--rounds", type=int, default=2, help="load-test rounds per trial; a round that misses the SLO "
                   "stops the trial (default 2)")
    s.add_argument("--top", type=int, default=5, help="configurations listed in top.json (default 5)")
    s.add_argument("--seed", type=int, default=0, help="the sampler's seed (default 0)")
    s.add_argument("--confirm", type=int, default=2, help="before writing a winner, measure the input and the "
                   "winner alternately this many times each; the winner is written only when it beats the input "
                   "with 95%% confidence (default 2; 0: decide on the trials' own measurements)")
    s.add_argument("--no-early-stop", dest="early_stop", action="store_false", help="spend the whole budget even "
                   "once no untried value can win")

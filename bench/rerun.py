"""The H200 rerun: in-process and served continuous batching in ONE process run, same environment, same settings.

1. Build the Llama-3.2-1B-shaped random model and save it with a local BPE tokenizer (bench/served.py's
   make_checkpoint), bf16.
2. In-process: transformers continuous batching driven directly with exactly the hf runtime's settings (read from
   the rendered config: sampling greedy -> no sampling processors, CUDA graphs, log probs, the attention choice,
   model.py's min_tokens processor), closed loop at each level, 128 in / 256 out (min_tokens = max_tokens, end id
   masked as the served model does).
3. Served: the same checkpoint behind tritongen's rendered ensemble, started with tritongen.serve.TritonServer, and
   driven by `tritongen loadtest --sweep` (Locust, gRPC streaming) itself.
4. One JSON under --out with both sides, the ratios, and in every part: cuDNN version, attention backend, graph mode,
   resolved cache size, and the server's exit status (and whether its log shows a crash at shutdown).

    python bench/rerun.py --out $OUT                      # H200 (see bench/device_issue13.sh)
    python bench/rerun.py --tiny --device cpu --levels 1,2 --duration 4 --warmup 1 --output-tokens 8 \
        --input-tokens 16 --out /tmp/rerun                # check the script on a CPU
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
import types
import urllib.request
from pathlib import Path

from tritongen.render import render_for
from tritongen.plan import plan_from_file
from tritongen.render import write_repository
from tritongen.serve import TritonServer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from benchlib import LEVEL_COLS, environment, table, write_json  # noqa: E402

SPEC = """\
version: 1
name: bench-rerun
runtime: hf
model:
  checkpoint: checkpoint
  dtype: {dtype}
serving:
  max_batch_size: {max_batch}
  streaming: true
  exclude_input_in_output: true
  preprocessing_instances: {pre}
  postprocessing_instances: {post}
{extra}  dynamic_batching:
    max_queue_size: 0
{kv}hf:
  sampling: greedy
{hf}placement:
  device: {device}
validation:
  load:
    users: 1
    spawn_rate: {spawn}
    duration_s: {duration}
    protocol: grpc
    processes: {processes}
    input_tokens: {{mean: {input_tokens}, stddev: 0}}
    output_tokens: {{mean: {output_tokens}, stddev: 0}}
"""


def torch_facts() -> dict:
    import torch

    facts = {"torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        facts["cudnn"] = torch.backends.cudnn.version()
    except Exception as err:  # a shadowed cuDNN raises here
        facts["cudnn"] = f"unusable: {err}"
    if torch.cuda.is_available():
        facts["sdpa_backends_enabled"] = {
            "cudnn": torch.backends.cuda.cudnn_sdp_enabled(), "flash": torch.backends.cuda.flash_sdp_enabled(),
            "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "math": torch.backends.cuda.math_sdp_enabled()}
    return facts


def _model_module():
    """Import the hf model's hf_requests (its min_tokens processor) outside Triton."""
    sys.modules.setdefault("triton_python_backend_utils",
                           types.SimpleNamespace(TRITONSERVER_RESPONSE_COMPLETE_FINAL=1))
    from tritongen.served import hf_requests

    return hf_requests


def inprocess(args, ckpt: Path, repo: Path, params: dict) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    from inprocess_cb import run_level

    hf = _model_module()
    device = "cuda" if args.device == "gpu" else "cpu"
    attention = params.get("attention") or ("sdpa_mem_efficient" if device == "cuda" else "sdpa")
    if attention == "sdpa_mem_efficient" and device == "cuda":  # what model.py does for this choice
        torch.backends.cuda.enable_cudnn_sdp(False)
        torch.backends.cuda.enable_flash_sdp(False)
    graphs = device == "cuda" if params.get("cuda_graphs", "auto") == "auto" else params["cuda_graphs"] == "true"
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=getattr(torch, args.dtype),
                                                 attn_implementation="sdpa").to(device)
    eos = model.config.eos_token_id
    cb = ContinuousBatchingConfig(
        per_request_processors=False, block_size=int(params["kv_cache_block_size"]),
        num_blocks=int(params["kv_cache_num_blocks"]) if params.get("kv_cache_num_blocks") else None,
        max_batch_tokens=int(params["max_batch_tokens"]) if params.get("max_batch_tokens") else None,
        max_memory_percent=float(params["kv_cache_free_gpu_mem_fraction"]), use_cuda_graph=graphs,
        use_async_batching=False, return_logprobs=params.get("log_probs", "true") == "true")
    manager = model.init_continuous_batching(
        generation_config=GenerationConfig(do_sample=False, eos_token_id=eos, pad_token_id=eos, max_new_tokens=16),
        continuous_batching_config=cb)
    hf.install_processor(manager, hf.MinTokensProcessor())
    t = time.perf_counter()
    manager.start()
    while manager.batch_processor is None and manager.is_running() and time.perf_counter() - t < 600:
        time.sleep(0.05)
    start_s = time.perf_counter() - t
    resolved = manager.continuous_batching_config
    cache = manager.batch_processor.cache
    settings = {"attention": attention, "attn_implementation": model.config._attn_implementation,
                "use_cuda_graph": list(resolved.use_cuda_graph) if isinstance(resolved.use_cuda_graph, tuple)
                else resolved.use_cuda_graph, "use_async_batching": resolved.use_async_batching,
                "num_blocks": cache.num_blocks, "block_size": getattr(cache, "block_size", None),
                "max_batch_tokens": cache.max_batch_tokens, "return_logprobs": cb.return_logprobs,
                "sampling": "greedy (no sampling processors)", "min_tokens_processor": True}
    rng = random.Random(0)
    vocab = min(512, model.config.vocab_size)  # the tokenizer's ids, as the served prompts use
    kwargs = {"tritongen_min_tokens": args.output_tokens, "tritongen_end_id": int(eos)}

    def prompt():
        return [rng.randrange(4, vocab) for _ in range(args.input_tokens)]

    first = run_level(manager, 1, prompt, args.output_tokens, 0.0, min(10.0, args.duration), submit_kwargs=kwargs,
                      eos=int(eos))
    levels = []
    for n in (int(x) for x in args.levels.split(",")):
        res = run_level(manager, n, prompt, args.output_tokens, args.warmup, args.duration, submit_kwargs=kwargs,
                        eos=int(eos))
        print(f"  in-process c={n}: {res['output_tok_per_s']} tok/s, TTFT p50 {res['ttft_ms_p50']} ms", flush=True)
        levels.append(res)
    manager.stop(block=True, timeout=10)
    del model, manager
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"settings": settings, "torch": torch_facts(), "manager_start_s": round(start_s, 2),
            "first_request_cold": first, "levels": levels}


def scrape_settings(metrics_url: str) -> dict:
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    out = {}
    for m in re.finditer(r'^tritongen_llm_setting\{([^}]*)\} (\S+)$', text, re.MULTILINE):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        out[labels["setting"]] = labels.get("value", float(m.group(2)))
    return out


def served(args, work: Path, spec_path: Path, repo: Path) -> dict:
    log = work / "tritonserver.log"
    server = TritonServer(repo, log_path=log)
    t = time.perf_counter()
    server.start(timeout=600)
    ready_s = time.perf_counter() - t
    out = Path(args.out) / "loadtest"
    cmd = [sys.executable, "-m", "tritongen", "loadtest", str(spec_path), "--url", server.grpc_url,
           "--metrics-url", server.metrics_url, "--sweep", args.levels, "-t", str(args.warmup + args.duration),
           # The in-process side measures [warmup, warmup + duration] after its first request; so does this side.
           "--warmup", str(args.warmup), "--out", str(out)]
    settings = {}
    try:
        settings = scrape_settings(server.metrics_url)
        print("served settings:", settings, flush=True)
        loadtest = subprocess.run(cmd, timeout=args.loadtest_timeout, check=False)
        loadtest_rc = loadtest.returncode
    finally:
        failure = server.failure
        server.stop()
    text = log.read_text(errors="replace") if log.exists() else ""
    summary = json.loads((out / "loadtest.json").read_text()) if (out / "loadtest.json").exists() else {}
    return {"settings": settings, "server_ready_s": round(ready_s, 1), "loadtest_command": cmd,
            "loadtest_exit_code": loadtest_rc, "server_exit_code": server.process.returncode,
            "server_failure": failure, "server_log_crash_lines": [
                line for line in text.splitlines() if "ASSERTION FAILED" in line or "Signal (11)" in line][:5],
            "levels": summary.get("levels", []), "capacity": summary.get("capacity")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,4,16,64,256")
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--warmup", type=float, default=4.0)
    ap.add_argument("--duration", type=float, default=16.0)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--kv-max-tokens", type=int, default=262144, help="serving.kv_cache.max_tokens")
    ap.add_argument("--max-batch-tokens", type=int, help="hf.max_batch_tokens (default: transformers sizes it)")
    ap.add_argument("--no-log-probs", action="store_true", help="hf.log_probs: false")
    ap.add_argument("--stream-interval", type=int, default=1, help="serving.stream_interval (tokens per response)")
    ap.add_argument("--processes", type=int, default=4, help="Locust processes")
    ap.add_argument("--loadtest-timeout", type=float, default=400)
    ap.add_argument("--workdir", default="/tmp/tritongen-rerun")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    from served import make_checkpoint

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    make_checkpoint(work / "checkpoint", tiny=args.tiny, dtype=args.dtype)
    max_level = max(int(x) for x in args.levels.split(","))
    spec_path = work / "deployment.yaml"
    spec_path.write_text(SPEC.format(
        dtype=args.dtype, max_batch=max(8, max_level), pre=4, post=4, device=args.device, spawn=max_level,
        duration=args.duration, processes=args.processes, input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        kv=f"  kv_cache:\n    max_tokens: {args.kv_max_tokens}\n" if args.kv_max_tokens else "",
        hf=(f"  max_batch_tokens: {args.max_batch_tokens}\n" if args.max_batch_tokens else "")
        + ("  log_probs: false\n" if args.no_log_probs else ""),
        extra=f"  stream_interval: {args.stream_interval}\n" if args.stream_interval != 1 else ""))
    spec, plan = plan_from_file(spec_path)
    repo = work / "repo"
    write_repository(render_for(plan), repo, overwrite=True)
    config = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    params = dict(re.findall(r'key: "(\w+)"\s*value: \{ string_value: "([^"]*)" \}', config))

    data = {"bench": "rerun", "environment": environment(), "spec": spec_path.read_text(),
            "workload": {"input_tokens": args.input_tokens, "output_tokens": args.output_tokens,
                         "min_tokens": args.output_tokens, "warmup_s": args.warmup, "duration_s": args.duration,
                         "levels": args.levels}}
    data["inprocess"] = inprocess(args, work / "checkpoint", repo, params)
    write_json(Path(args.out) / "rerun.json", data)
    data["served"] = served(args, work, spec_path, repo)
    base = {lv["concurrency"]: lv for lv in data["inprocess"]["levels"]}
    rows = []
    for level in data["served"]["levels"]:
        concurrency = int(level["level"])
        m, b = level["metrics"], base.get(concurrency, {})
        tok, ttft = m.get("output_token_throughput"), (m.get("ttft_ms") or {}).get("p50")
        rows.append({"concurrency": concurrency, "served_tok_per_s": tok,
                     "inprocess_tok_per_s": b.get("output_tok_per_s"),
                     "ratio": round(tok / b["output_tok_per_s"], 3) if tok and b.get("output_tok_per_s") else None,
                     "served_ttft_p50_ms": ttft, "inprocess_ttft_p50_ms": b.get("ttft_ms_p50"),
                     "added_ttft_p50_ms": round(ttft - b["ttft_ms_p50"], 2)
                     if ttft is not None and b.get("ttft_ms_p50") is not None else None,
                     "served_errors": m.get("error_count"),
                     "tokens_client_eq_server": level.get("tokens", {}).get("equal"),
                     "locust_max_cpu": level.get("load_generator", {}).get("max_cpu_fraction")})
    data["comparison"] = rows
    write_json(Path(args.out) / "rerun.json", data)
    print(table(data["inprocess"]["levels"], LEVEL_COLS))
    print(table(rows, [(k, k) for k in rows[0]] if rows else []))
    return 0 if data["served"]["server_exit_code"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Served throughput: the same model behind tritongen's rendered ensemble on the real tritonserver.

Steps: build the Llama-3.2-1B-shaped random model (bench/benchlib.py, the same seed as bench/inprocess_cb.py),
save it with save_pretrained plus a locally trained BPE tokenizer (generator/tritongen/demo_model.py's), write a tritongen
spec (runtime hf, placement.device gpu -> KIND_GPU), render it with tritongen.plan.plan_from_file +
tritongen.render.render_for + tritongen.render.write_repository, start it with tritongen.serve.TritonServer,
and drive the `ensemble` model (preprocessing -> tensorrt_llm -> postprocessing) with a closed-loop driver:
one thread per in-flight request slot, each with its own tritonclient gRPC stream (ModelStreamInfer), sending
text prompts of exactly --input-tokens tokens with max_tokens = min_tokens = --output-tokens (greedy: no top_k /
top_p given), return_num_output_tokens=true so each streamed response says how many tokens it carries.

Timestamps are taken in the gRPC callback when a response arrives; metrics follow GenAI-Perf's definitions
(bench/benchlib.py). Per level, Triton's /metrics (per-model queue/compute time, execution counts,
tritongen_llm_steps) and the CPU seconds of each python backend stub process are sampled before and after,
for the breakdown of where time goes.

    python bench/served.py                   # H200
    python bench/served.py --tiny --device cpu --levels 1,4 --duration 4 --warmup 1 --output-tokens 16

Writes bench/results/served.json (or --out) and prints a table (with the in-process ratio when
bench/results/inprocess_cb.json or --inprocess exists).
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import re
import sys
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from benchlib import LEVEL_COLS, RESULTS, Req, build_model, environment, llama_config, summarize, table, \
    write_json  # noqa: E402

SPEC = """\
version: 1
name: bench-llama-1b
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
{kv}placement:
  device: {device}
"""


def make_checkpoint(out: Path, *, tiny: bool, dtype: str) -> tuple[Path, object]:
    import torch

    from tritongen.demo.model import train_tokenizer

    tok = train_tokenizer("bytelevel", 512)
    config = llama_config(tiny, bos=tok.bos_token_id, eos=tok.eos_token_id, pad=tok.pad_token_id)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build_model(config, dtype=getattr(torch, dtype), device=device, favour_ids=len(tok))
    model.config.dtype = dtype
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out, tok


def make_prompts(tok, n: int, length: int, seed: int = 0) -> list[str]:
    """Texts that the tokenizer turns into exactly `length` tokens (as the preprocessing model encodes them)."""
    rng = random.Random(seed)
    specials = set(tok.all_special_ids)
    ids_pool = [i for i in range(len(tok)) if i not in specials]
    prompts = []
    while len(prompts) < n:
        ids = [rng.choice(ids_pool) for _ in range(length)]
        for _ in range(20):
            text = tok.decode(ids)
            enc = tok(text).input_ids
            if len(enc) == length:
                prompts.append(text)
                break
            ids = enc[:length] if len(enc) > length else enc + [rng.choice(ids_pool) for _ in range(length - len(enc))]
    return prompts


# ---------------------------------------------------------------------------------------------- server side
_METRIC = re.compile(r'^(\w+)\{([^}]*)\}\s+([0-9.eE+-]+)$')


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = _METRIC.match(line)
        if not m:
            continue
        name, labels, value = m.groups()
        if not (name.startswith("nv_inference_") or name.startswith("tritongen_llm_")):
            continue
        model = re.search(r'model="([^"]+)"', labels)
        out[f"{name}[{model.group(1) if model else ''}]"] = float(value)
    return out


def stub_cpu(server_pid: int) -> dict[str, float]:
    """CPU seconds (user+system) of tritonserver itself and of each python stub, keyed by model."""
    import psutil

    out: dict[str, float] = {}
    try:
        root = psutil.Process(server_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return out
    for p in procs:
        try:
            t = p.cpu_times()
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        key = "tritonserver"
        if p.pid != server_pid:
            m = re.search(r"/(preprocessing|postprocessing|tensorrt_llm_bls|tensorrt_llm)/\d+/model\.py", cmd)
            key = f"stub:{m.group(1)}" if m else f"other:{p.pid}"
        out[key] = out.get(key, 0.0) + t.user + t.system
    return out


def diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 3) for k, v in after.items() if v - before.get(k, 0.0)}


def breakdown(m: dict[str, float], cpu: dict[str, float], window: float) -> dict:
    """Per model: executions, mean queue/compute times per request, CPU use of its stub."""
    out = {}
    for model in ("ensemble", "preprocessing", "tensorrt_llm", "postprocessing"):
        req = m.get(f"nv_inference_request_success[{model}]", 0.0)
        ex = m.get(f"nv_inference_exec_count[{model}]", 0.0)
        row = {"requests": req, "executions": ex}
        for key in ("request_duration_us", "queue_duration_us", "compute_input_duration_us",
                    "compute_infer_duration_us", "compute_output_duration_us"):
            v = m.get(f"nv_inference_{key}[{model}]")
            if v is not None and req:
                row[f"{key.replace('_us', '')}_ms_per_request"] = round(v / req / 1000, 3)
        c = cpu.get(f"stub:{model}")
        if c is not None:
            row["stub_cpu_s"] = c
            row["stub_cpu_percent_of_one_core"] = round(100 * c / window, 1)
        out[model] = row
    out["tritonserver_cpu_percent_of_one_core"] = round(100 * cpu.get("tritonserver", 0.0) / window, 1)
    steps = m.get("tritongen_llm_steps_total[tensorrt_llm]")
    sreq = m.get("tritongen_llm_step_requests_total[tensorrt_llm]")
    if steps:
        out["llm_steps"] = steps
        out["llm_mean_requests_per_step"] = round(sreq / steps, 2) if sreq else None
        out["llm_steps_per_s"] = round(steps / window, 2)
    return out


# ---------------------------------------------------------------------------------------------- driver
def run_level(url: str, metrics_url: str, server_pid: int, concurrency: int, prompts: list[str], out_tokens: int,
              warmup: float, duration: float, guide: tuple[str, str] | None = None,
              texts: list[str] | None = None) -> dict:
    """One closed-loop level. With `guide` ((type, guide)) every request is guided and has no min_tokens (the
    grammar decides where it ends); `texts` collects the text of each request that ended on its own."""
    import tritonclient.grpc as grpcclient

    from tritongen.client import grpc_inputs

    reqs: list[Req] = []
    errors: list[str] = []
    stop = threading.Event()
    rng = random.Random(concurrency)
    lock = threading.Lock()

    def worker() -> None:
        client = grpcclient.InferenceServerClient(url)
        q: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: q.put((time.perf_counter(), result, error)))
        try:
            while not stop.is_set():
                with lock:
                    prompt = rng.choice(prompts)
                inputs = grpc_inputs(prompt, out_tokens, stream=True, min_tokens=None if guide else out_tokens,
                                     guide=guide, return_num_output_tokens=True)
                r = Req(sent=time.perf_counter())
                parts = []
                reqs.append(r)
                client.async_stream_infer("ensemble", inputs, enable_empty_final_response=True)
                while not stop.is_set():
                    try:
                        ts, result, error = q.get(timeout=0.25)
                    except queue.Empty:
                        continue
                    if error is not None:
                        errors.append(str(error))
                        return
                    n = result.as_numpy("num_output_tokens")  # per response: the tokens it carries
                    if n is not None and n.size:
                        new = int(n.reshape(-1)[0])
                    else:
                        new = 1 if result.as_numpy("text_output") is not None else 0
                    if new > 0:
                        r.token_times.extend([ts] * new)
                    if texts is not None:
                        text = result.as_numpy("text_output")
                        if text is not None and text.size:
                            parts.append(text.reshape(-1)[0].decode("utf-8", "replace"))
                    final = result.get_response().parameters.get("triton_final_response")
                    if final is not None and final.bool_param:
                        r.done = ts
                        if texts is not None:
                            texts.append("".join(parts))
                        break
        finally:
            try:
                client.stop_stream(cancel_requests=True)
                client.close()
            except Exception:
                pass

    m0, c0 = scrape(metrics_url), stub_cpu(server_pid)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    w0, w1 = t0 + warmup, t0 + warmup + duration
    time.sleep(max(0.0, w0 - time.perf_counter()))
    mw0, cw0 = scrape(metrics_url), stub_cpu(server_pid)
    tw0 = time.perf_counter()
    time.sleep(max(0.0, w1 - time.perf_counter()))
    mw1, cw1 = scrape(metrics_url), stub_cpu(server_pid)
    tw1 = time.perf_counter()
    stop.set()
    for t in threads:
        t.join(timeout=30)
    res = summarize(reqs, (w0, w1), concurrency, 1 if guide else out_tokens)
    res["errors"] = len(errors)
    res["first_errors"] = errors[:3]
    res["server_window"] = breakdown(diff(mw1, mw0), diff(cw1, cw0), tw1 - tw0)
    res["server_level_total_metrics"] = diff(scrape(metrics_url), m0)
    # Let cancelled requests leave the model before the next level.
    time.sleep(2.0)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,4,16,64,256")
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--duration", type=float, default=25.0)
    ap.add_argument("--long-levels", default="256")
    ap.add_argument("--long-duration", type=float, default=35.0)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--pre", type=int, default=4, help="preprocessing instances")
    ap.add_argument("--post", type=int, default=4, help="postprocessing instances")
    ap.add_argument("--kv-max-tokens", type=int, default=None,
                    help="serving.kv_cache.max_tokens (default: transformers sizes the cache from free memory)")
    ap.add_argument("--stub-timeout", type=int, default=None,
                    help="--backend-config=python,stub-timeout-seconds=N for tritonserver (default: Triton's 30)")
    ap.add_argument("--workdir", default="/tmp/tritongen-bench")
    ap.add_argument("--inprocess", default=str(RESULTS / "inprocess_cb.json"))
    ap.add_argument("--out", default=str(RESULTS / "served.json"))
    args = ap.parse_args(argv)

    try:
        import pytriton  # noqa: F401
    except ImportError:
        # pytriton's __init__ imports its own client (zmq, sh, ...); only its tritonserver folder is needed here.
        import importlib.util
        import types

        found = importlib.util.find_spec("pytriton")
        if found is None:
            raise
        stub = types.ModuleType("pytriton")
        stub.__file__ = found.origin
        sys.modules["pytriton"] = stub
    from tritongen.render import render_for
    from tritongen.plan import plan_from_file
    from tritongen.render import write_repository
    from tritongen.serve import TritonServer

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    ckpt, tok = make_checkpoint(work / "checkpoint", tiny=args.tiny, dtype=args.dtype)
    save_s = time.perf_counter() - t
    max_level = max(int(x) for x in args.levels.split(","))
    spec_path = work / "deployment.yaml"
    spec_path.write_text(SPEC.format(dtype=args.dtype, max_batch=max(8, max_level), pre=args.pre, post=args.post,
                                     device=args.device,
                                     kv=(f"  kv_cache:\n    max_tokens: {args.kv_max_tokens}\n"
                                         if args.kv_max_tokens else "")))
    spec, plan = plan_from_file(spec_path)
    repo = work / "repo"
    write_repository(render_for(plan), repo, overwrite=True)
    prompts = make_prompts(tok, 256, args.input_tokens)
    log = work / "tritonserver.log"
    t = time.perf_counter()
    extra = [f"--backend-config=python,stub-timeout-seconds={args.stub_timeout}"] if args.stub_timeout else []
    server = TritonServer(repo, log_path=log, extra_args=extra)
    server.start(timeout=600)
    ready_s = time.perf_counter() - t
    print(f"server ready in {ready_s:.1f}s (checkpoint written in {save_s:.1f}s)", flush=True)
    levels = []
    try:
        first = run_level(server.grpc_url, server.metrics_url, server.process.pid, 1, prompts, args.output_tokens,
                          0.0, 12.0 if not args.tiny else 8.0)
        run_level(server.grpc_url, server.metrics_url, server.process.pid, 4, prompts, args.output_tokens, 0.0,
                  min(5.0, args.duration))
        long_levels = {int(x) for x in args.long_levels.split(",") if x}
        for n in (int(x) for x in args.levels.split(",")):
            dur = args.long_duration if n in long_levels else args.duration
            res = run_level(server.grpc_url, server.metrics_url, server.process.pid, n, prompts, args.output_tokens,
                            args.warmup, dur)
            sw = res["server_window"]
            print(f"  c={n}: {res['output_tok_per_s']} tok/s, TTFT p50 {res['ttft_ms_p50']} ms, ITL p50 "
                  f"{res['itl_ms_p50']} ms, completed {res['requests_completed']}, errors {res['errors']}, "
                  f"llm stub CPU {sw.get('tensorrt_llm', {}).get('stub_cpu_percent_of_one_core')}%, "
                  f"req/step {sw.get('llm_mean_requests_per_step')}", flush=True)
            levels.append(res)
    finally:
        server.stop()
    tail = log.read_text(errors="replace").splitlines()[-30:] if log.exists() else []
    data = {
        "bench": "served", "environment": environment(),
        "driver": "bench/served.py closed-loop threads, tritonclient gRPC ModelStreamInfer (one stream per slot)",
        "model": {"shape": "tiny" if args.tiny else "Llama-3.2-1B", "dtype": args.dtype, "weights": "random"},
        "spec": spec_path.read_text(), "tritonserver_extra_args": extra, "server_ready_s": round(ready_s, 1), "checkpoint_save_s": round(save_s, 1),
        "workload": {"input_tokens": args.input_tokens, "output_tokens": args.output_tokens,
                     "greedy": "no top_k/top_p -> model.py greedy", "min_tokens": args.output_tokens,
                     "warmup_s": args.warmup, "duration_s": args.duration, "long_duration_s": args.long_duration},
        "first_request_cold": first, "levels": levels, "server_log_tail": tail,
    }
    inproc = Path(args.inprocess)
    if inproc.is_file():
        base = {lv["concurrency"]: lv for lv in json.loads(inproc.read_text())["levels"]}
        for lv in levels:
            b = base.get(lv["concurrency"])
            if b and b.get("output_tok_per_s") and lv.get("output_tok_per_s") is not None:
                lv["ratio_vs_inprocess"] = round(lv["output_tok_per_s"] / b["output_tok_per_s"], 3)
                if b.get("ttft_ms_p50") is not None and lv.get("ttft_ms_p50") is not None:
                    lv["added_ttft_ms_p50"] = round(lv["ttft_ms_p50"] - b["ttft_ms_p50"], 2)
    write_json(Path(args.out), data)
    print(table(levels, LEVEL_COLS + [("ratio vs in-process", "ratio_vs_inprocess"),
                                      ("added TTFT p50 ms", "added_ttft_ms_p50"), ("errors", "errors")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

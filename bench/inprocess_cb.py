"""In-process ceiling: transformers continuous batching driven directly, with the hf runtime's exact settings.

The model is Llama-3.2-1B-shaped (hidden 2048, 16 layers, 32 heads, 8 KV heads, MLP 8192, vocab 128256, tied
embeddings) with random weights built locally, bf16. Continuous batching is configured as
generator/tritongen/served/hf_model.py configures it (per_request_processors, block size 32,
num_blocks/max_batch_tokens left to transformers, max_memory_percent 0.9, use_cuda_graph=False,
use_async_batching=False, a sampling generation config), and each request is submitted as model.py submits a
greedy request with min_tokens = max_tokens: streaming=True, eos_token_id=-1, temperature 1, top_k 1, top_p 1.
One thread consumes results with get_result(timeout=0.1), as model.py's dispatcher does.

Closed loop: N requests in flight; when one finishes, the next is submitted at once. Each level runs for
warmup + duration seconds (time-boxed); tokens are counted inside the window after the warm-up.

    python bench/inprocess_cb.py                      # H200: levels 1,4,16,64,256, 128 in / 256 out
    python bench/inprocess_cb.py --tiny --device cpu --levels 1,4 --duration 3 --warmup 1 --output-tokens 16

Writes bench/results/inprocess_cb.json (or --out) and prints a table.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import LEVEL_COLS, RESULTS, Req, build_model, environment, llama_config, param_bytes, summarize, \
    table, write_json  # noqa: E402


def start_manager(model, *, block_size=32, num_blocks=None, max_batch_tokens=None, mem=0.9, cuda_graph=False,
                  async_batching=False):
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    cb_config = ContinuousBatchingConfig(per_request_processors=True, block_size=block_size, num_blocks=num_blocks,
                                         max_batch_tokens=max_batch_tokens, max_memory_percent=mem,
                                         use_cuda_graph=cuda_graph, use_async_batching=async_batching)
    eos = model.config.eos_token_id
    generation_config = GenerationConfig(do_sample=True, temperature=0.5, top_k=50, top_p=0.9, eos_token_id=eos,
                                         pad_token_id=model.config.pad_token_id, max_new_tokens=16)
    manager = model.init_continuous_batching(generation_config=generation_config,
                                             continuous_batching_config=cb_config)
    t = time.perf_counter()
    manager.start()
    while manager.batch_processor is None and manager.is_running() and time.perf_counter() - t < 600:
        time.sleep(0.05)
    if manager.batch_processor is None:
        raise RuntimeError("continuous batching did not start")
    return manager, time.perf_counter() - t


def cache_info(manager) -> dict:
    info = {}
    cache = getattr(manager.batch_processor, "cache", None)
    for key in ("num_blocks", "block_size", "max_batch_tokens"):
        for obj in (cache, manager.batch_processor):
            v = getattr(obj, key, None)
            if isinstance(v, int):
                info[key] = v
                break
    return info


_ids = itertools.count()


def run_level(manager, concurrency: int, prompt_fn, out_tokens: int, warmup: float, duration: float,
              submit_kwargs: dict | None = None, eos: int = -1) -> dict:
    """Closed loop at `concurrency`; returns the summary plus how the level ended. `submit_kwargs` replace the
    per-request sampling arguments (bench/rerun.py passes model.py's greedy-path arguments)."""
    extra = dict(temperature=1.0, top_k=1, top_p=1.0) if submit_kwargs is None else submit_kwargs
    reqs: list[Req] = []
    active: dict[str, tuple[Req, list[int]]] = {}

    def submit():
        rid = f"b{next(_ids)}"
        r = Req(sent=time.perf_counter())
        reqs.append(r)
        active[rid] = (r, [0])
        manager.add_request(prompt_fn(), request_id=rid, max_new_tokens=out_tokens, streaming=True,
                            eos_token_id=eos, **extra)

    t0 = time.perf_counter()
    for _ in range(concurrency):
        submit()
    w0, w1 = t0 + warmup, t0 + warmup + duration
    while True:
        now = time.perf_counter()
        if now >= w1:
            break
        if not manager.is_running():
            raise RuntimeError("continuous batching manager stopped")
        out = manager.get_result(timeout=0.1)
        if out is None:
            continue
        entry = active.get(out.request_id)
        if entry is None:
            continue
        now = time.perf_counter()
        r, seen = entry
        new = len(out.generated_tokens) - seen[0]
        seen[0] = len(out.generated_tokens)
        r.token_times.extend([now] * max(0, min(new, out_tokens - len(r.token_times))))
        if len(r.token_times) >= out_tokens or out.is_finished():
            r.done = now
            del active[out.request_id]
            if not out.is_finished():
                manager.cancel_request(out.request_id)
            submit()
    for rid in list(active):
        manager.cancel_request(rid)
    active.clear()
    # Drain what the cancelled requests still produce before the next level.
    quiet_since = time.perf_counter()
    while time.perf_counter() - quiet_since < 1.0 and time.perf_counter() - w1 < 20:
        if manager.get_result(timeout=0.2) is not None:
            quiet_since = time.perf_counter()
    return summarize(reqs, (w0, w1), concurrency, out_tokens)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,4,16,64,256")
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds per level before the window opens")
    ap.add_argument("--duration", type=float, default=25.0, help="measurement window per level, seconds")
    ap.add_argument("--long-levels", default="256", help="levels that get --long-duration instead")
    ap.add_argument("--long-duration", type=float, default=35.0)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="CPU-sized model, for checking the script")
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--num-blocks", type=int, default=None)
    ap.add_argument("--max-batch-tokens", type=int, default=None)
    ap.add_argument("--mem", type=float, default=0.9)
    ap.add_argument("--out", default=str(RESULTS / "inprocess_cb.json"))
    args = ap.parse_args(argv)

    import torch

    dtype = getattr(torch, args.dtype)
    config = llama_config(args.tiny)
    t = time.perf_counter()
    model = build_model(config, dtype=dtype, device=args.device, favour_ids=512)
    build_s = time.perf_counter() - t
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    manager, start_s = start_manager(model, block_size=args.block_size, num_blocks=args.num_blocks,
                                     max_batch_tokens=args.max_batch_tokens, mem=args.mem)
    rng = random.Random(0)
    vocab = config.vocab_size

    def prompt():
        return [rng.randrange(4, vocab) for _ in range(args.input_tokens)]

    # One request alone, cold: what the first user pays after READY.
    first = run_level(manager, 1, prompt, args.output_tokens, 0.0, 12.0 if not args.tiny else 5.0)
    # Warm-up at moderate concurrency, not recorded.
    run_level(manager, 4, prompt, args.output_tokens, 0.0, min(5.0, args.duration))
    levels = []
    long_levels = {int(x) for x in args.long_levels.split(",") if x}
    for n in (int(x) for x in args.levels.split(",")):
        dur = args.long_duration if n in long_levels else args.duration
        res = run_level(manager, n, prompt, args.output_tokens, args.warmup, dur)
        print(f"  c={n}: {res['output_tok_per_s']} tok/s, TTFT p50 {res['ttft_ms_p50']} ms, "
              f"ITL p50 {res['itl_ms_p50']} ms, completed {res['requests_completed']}", flush=True)
        levels.append(res)
    peak = torch.cuda.max_memory_allocated() if args.device.startswith("cuda") else None
    info = cache_info(manager)
    manager.stop(block=True, timeout=10)
    data = {
        "bench": "inprocess_cb", "environment": environment(),
        "model": {"shape": "tiny" if args.tiny else "Llama-3.2-1B", "dtype": args.dtype, "weights": "random",
                  "param_bytes": param_bytes(model), "build_s": round(build_s, 2)},
        "cb_config": {"per_request_processors": True, "block_size": args.block_size, "num_blocks": args.num_blocks,
                      "max_batch_tokens": args.max_batch_tokens, "max_memory_percent": args.mem,
                      "use_cuda_graph": False, "use_async_batching": False, "resolved": info},
        "workload": {"input_tokens": args.input_tokens, "output_tokens": args.output_tokens, "greedy": "top_k=1",
                     "eos": "disabled (eos_token_id=-1)", "warmup_s": args.warmup, "duration_s": args.duration,
                     "long_levels": sorted(long_levels), "long_duration_s": args.long_duration},
        "manager_start_s": round(start_s, 2),
        "first_request_cold": first,
        "peak_gpu_mem_gib": None if peak is None else round(peak / 2**30, 2),
        "levels": levels,
    }
    write_json(Path(args.out), data)
    print(table(levels, LEVEL_COLS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

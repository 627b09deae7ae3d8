"""Optimisation ladder and roofline for the Llama-3.2-1B-shaped model on one GPU.

Rungs (128 prompt tokens, greedy, every sequence forced to its full length with min_new_tokens):
  1. fp32, eager attention, model.generate, batch 1
  2. bf16, eager attention, batch 1
  3. bf16, sdpa attention, batch 1
  4. bf16, sdpa, static batch 4 (model.generate)
  5. bf16, sdpa, static batch 32 and 64
  6. continuous batching at high concurrency with the hf runtime's defaults: see bench/inprocess_cb.py
  7. continuous batching at 256 in flight with explicit cache/batch-token settings (--cb-configs)
Each rung records output tokens/s, per-token latency, and peak GPU memory (torch.cuda.max_memory_allocated).

Roofline: HBM bandwidth measured with a large device-to-device copy (bytes read + written); the decode upper bound
at batch B is B tokens per step, where a step must read the weights once and the KV cache of every sequence.

    python bench/ladder.py
    python bench/ladder.py --tiny --device cpu --new-tokens 8 --cb-duration 3 --cb-concurrency 4

Writes bench/results/ladder.json and prints a table.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import RESULTS, build_model, environment, llama_config, param_bytes, table, write_json  # noqa: E402


def hbm_bandwidth(device: str, gib: float = 4.0) -> dict:
    import torch

    if not device.startswith("cuda"):
        return {}
    n = int(gib * 2**30) // 2
    a = torch.randn(n, dtype=torch.bfloat16, device=device)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1000)
    t = statistics.median(times)
    moved = 2 * a.numel() * a.element_size()
    del a, b
    torch.cuda.empty_cache()
    return {"copy_bytes_read_plus_written": moved, "median_s": t, "tb_per_s": round(moved / t / 1e12, 3)}


def sync(device):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def gen_rung(name, config, *, dtype, attn, batch, new_tokens, in_tokens, device) -> dict:
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = build_model(config, dtype=dtype, device=device, attn=attn)
    g = torch.Generator().manual_seed(batch)
    ids = torch.randint(4, config.vocab_size, (batch, in_tokens), generator=g).to(device)
    mask = torch.ones_like(ids)
    kw = dict(do_sample=False, pad_token_id=config.pad_token_id, eos_token_id=config.eos_token_id)
    with torch.inference_mode():
        model.generate(ids, attention_mask=mask, max_new_tokens=4, min_new_tokens=4, **kw)  # warm-up
        sync(device)
        t = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kw)
        sync(device)
        wall = time.perf_counter() - t
    made = (out.shape[1] - in_tokens) * batch
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else None
    res = {"rung": name, "dtype": str(dtype).replace("torch.", ""), "attn": attn, "batch": batch,
           "new_tokens": new_tokens, "wall_s": round(wall, 3), "output_tok_per_s": round(made / wall, 1),
           "ms_per_step": round(wall * 1000 / new_tokens, 2),
           "peak_gpu_mem_gib": None if peak is None else round(peak / 2**30, 2),
           "param_bytes": param_bytes(model)}
    del model, out
    print(f"  {name}: {res['output_tok_per_s']} tok/s, {res['ms_per_step']} ms/step, peak {res['peak_gpu_mem_gib']} GiB",
          flush=True)
    return res


def cb_rung(name, config, *, device, concurrency, in_tokens, out_tokens, duration, settings) -> dict:
    import torch

    from inprocess_cb import cache_info, run_level, start_manager

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = build_model(config, dtype=torch.bfloat16 if device.startswith("cuda") else torch.float32,
                        device=device, favour_ids=512)
    manager, start_s = start_manager(model, **settings)
    rng = random.Random(1)

    def prompt():
        return [rng.randrange(4, config.vocab_size) for _ in range(in_tokens)]

    run_level(manager, min(4, concurrency), prompt, out_tokens, 0.0, 3.0)  # warm-up
    lv = run_level(manager, concurrency, prompt, out_tokens, 5.0, duration)
    info = cache_info(manager)
    manager.stop(block=True, timeout=10)
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else None
    res = {"rung": name, "dtype": "bfloat16", "attn": "sdpa", "batch": f"CB {concurrency}", "settings": settings,
           "resolved": info, "manager_start_s": round(start_s, 2), "output_tok_per_s": lv["output_tok_per_s"],
           "ms_per_step": lv["itl_ms_p50"], "ttft_ms_p50": lv["ttft_ms_p50"],
           "peak_gpu_mem_gib": None if peak is None else round(peak / 2**30, 2), "level": lv}
    del model
    print(f"  {name}: {res['output_tok_per_s']} tok/s, ITL p50 {res['ms_per_step']} ms, peak {res['peak_gpu_mem_gib']} "
          f"GiB, resolved {info}", flush=True)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--in-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128, help="tokens per sequence for the batch-1 rungs")
    ap.add_argument("--batch-new-tokens", type=int, default=256, help="tokens per sequence for the static batches")
    ap.add_argument("--static-batches", default="4,32,64")
    ap.add_argument("--cb-concurrency", type=int, default=256)
    ap.add_argument("--cb-out-tokens", type=int, default=256)
    ap.add_argument("--cb-duration", type=float, default=20.0)
    ap.add_argument("--cb-configs", default='[{"block_size": 32, "num_blocks": 4096}, '
                                            '{"block_size": 32, "num_blocks": 4096, "max_batch_tokens": 16384}]',
                    help="JSON list of start_manager keyword sets")
    ap.add_argument("--skip", default="", help="comma list of rung numbers to skip")
    ap.add_argument("--out", default=str(RESULTS / "ladder.json"))
    args = ap.parse_args(argv)

    import torch

    config = llama_config(args.tiny)
    skip = {int(x) for x in args.skip.split(",") if x}
    bw = hbm_bandwidth(args.device)
    rungs = []
    d, n, i = args.device, args.new_tokens, args.in_tokens
    if 1 not in skip:
        rungs.append(gen_rung("1 fp32 eager b1", config, dtype=torch.float32, attn="eager", batch=1, new_tokens=n,
                              in_tokens=i, device=d))
    low = torch.bfloat16 if d.startswith("cuda") else torch.float32
    if 2 not in skip:
        rungs.append(gen_rung("2 bf16 eager b1", config, dtype=low, attn="eager", batch=1, new_tokens=n,
                              in_tokens=i, device=d))
    if 3 not in skip:
        rungs.append(gen_rung("3 bf16 sdpa b1", config, dtype=low, attn="sdpa", batch=1, new_tokens=n,
                              in_tokens=i, device=d))
    for b in (int(x) for x in args.static_batches.split(",") if x):
        if 4 in skip:
            break
        rungs.append(gen_rung(f"4 bf16 sdpa static b{b}", config, dtype=low, attn="sdpa", batch=b,
                              new_tokens=args.batch_new_tokens, in_tokens=i, device=d))
    if 7 not in skip:
        for k, settings in enumerate(json.loads(args.cb_configs)):
            try:
                rungs.append(cb_rung(f"7.{k + 1} CB {args.cb_concurrency} {settings}", config, device=d,
                                     concurrency=args.cb_concurrency, in_tokens=i, out_tokens=args.cb_out_tokens,
                                     duration=args.cb_duration, settings=settings))
            except Exception as err:  # keep the rungs already measured
                rungs.append({"rung": f"7.{k + 1} CB {settings}", "error": repr(err)})
                print(f"  CB {settings}: {err!r}", flush=True)

    weights = next((r["param_bytes"] for r in rungs if r.get("dtype") == "bfloat16" and "param_bytes" in r), None)
    roof = {}
    if bw and weights:
        kv_per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * \
            (config.hidden_size // config.num_attention_heads) * 2
        ctx = args.in_tokens + args.cb_out_tokens // 2  # mean context during a 128-in / 256-out request
        bps = bw["tb_per_s"] * 1e12 / 2  # a copy's read+write rate; a decode step is almost all reads
        roof = {"weights_bytes": weights, "kv_bytes_per_token": kv_per_token, "mean_context_tokens": ctx,
                "bandwidth_assumed_bytes_per_s": bps,
                "note": "read bandwidth taken as half the copy's read+write rate (conservative: a pure read "
                        "stream can run somewhat faster)",
                "decode_upper_bound": []}
        for b in (1, 4, 16, 32, 64, 256):
            step_bytes = weights + b * ctx * kv_per_token
            roof["decode_upper_bound"].append({"batch": b, "step_bytes": step_bytes,
                                               "min_step_ms": round(step_bytes / bps * 1000, 3),
                                               "max_tok_per_s": round(b / (step_bytes / bps), 0)})
    data = {"bench": "ladder", "environment": environment(), "hbm_copy": bw, "roofline": roof, "rungs": rungs}
    write_json(Path(args.out), data)
    print(table([r for r in rungs if "error" not in r],
                [("rung", "rung"), ("tok/s", "output_tok_per_s"), ("ms/step", "ms_per_step"),
                 ("peak GiB", "peak_gpu_mem_gib")]))
    if roof:
        print(table(roof["decode_upper_bound"], [("batch", "batch"), ("min step ms", "min_step_ms"),
                                                 ("max tok/s", "max_tok_per_s")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

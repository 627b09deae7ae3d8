"""Shared pieces of the GPU benchmarks: the Llama-3.2-1B-shaped model, the closed-loop bookkeeping, statistics.

Metrics follow GenAI-Perf's definitions, computed from raw per-token timestamps:
- TTFT: time from sending a request to its first output token.
- ITL (inter-token latency): per request, (last token time - first token time) / (tokens - 1); percentiles are
  taken over requests.
- output token throughput: output tokens received inside the measurement window / window length.
- e2e latency: send to last token, for requests that completed.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

# Llama-3.2-1B: hidden 2048, 16 layers, 32 heads (head_dim 64), 8 KV heads, MLP 8192, vocab 128256, tied embeddings.
LLAMA_1B = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True, max_position_embeddings=8192,
                rope_theta=500000.0)
# Same code paths, CPU-sized, for checking the scripts without a GPU.
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=4096, tie_word_embeddings=True, max_position_embeddings=2048,
            rope_theta=500000.0)


def llama_config(tiny: bool = False, *, bos: int = 1, eos: int = 2, pad: int = 3):
    from transformers import LlamaConfig

    return LlamaConfig(**(TINY if tiny else LLAMA_1B), bos_token_id=bos, eos_token_id=eos, pad_token_id=pad)


def build_model(config, *, dtype, device: str, seed: int = 0, attn: str = "sdpa", favour_ids: int = 0):
    """Random-weight LlamaForCausalLM, initialised on `device` with a fixed seed.

    favour_ids > 0 scales the first `favour_ids` embedding rows (tied to the output head) so greedy decoding picks
    tokens a small tokenizer can decode; the compute is the same either way.
    """
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    config._attn_implementation = attn
    with torch.device(device):  # random init on the target device: seconds instead of a minute on the CPU
        model = LlamaForCausalLM(config)
    if favour_ids:
        with torch.no_grad():
            model.model.embed_tokens.weight[:favour_ids].mul_(8.0)
    return model.to(dtype=dtype, device=device).eval()


def param_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass
class Req:
    """One request's timestamps (perf_counter seconds)."""

    sent: float
    token_times: list[float] = field(default_factory=list)
    done: float | None = None


def summarize(reqs: list[Req], window: tuple[float, float], concurrency: int, target_tokens: int) -> dict:
    """GenAI-Perf style metrics for one concurrency level; `window` is (measure_start, measure_end)."""
    w0, w1 = window
    tokens_in_window = sum(1 for r in reqs for t in r.token_times if w0 <= t <= w1)
    ttft = [(r.token_times[0] - r.sent) * 1000 for r in reqs if r.token_times]
    itl = [(r.token_times[-1] - r.token_times[0]) * 1000 / (len(r.token_times) - 1)
           for r in reqs if len(r.token_times) >= 2]
    done = [r for r in reqs if r.done is not None and len(r.token_times) >= target_tokens]
    e2e = [(r.done - r.sent) * 1000 for r in done]
    gaps = [(b - a) * 1000 for r in reqs for a, b in zip(r.token_times, r.token_times[1:]) if w0 <= b <= w1]
    return {
        "concurrency": concurrency,
        "window_s": round(w1 - w0, 3),
        "output_tokens_in_window": tokens_in_window,
        "output_tok_per_s": round(tokens_in_window / (w1 - w0), 1) if w1 > w0 else None,
        "requests_started": len(reqs),
        "requests_completed": len(done),
        "requests_with_first_token": len(ttft),
        "ttft_ms_p50": _r(pct(ttft, 50)), "ttft_ms_p95": _r(pct(ttft, 95)),
        "itl_ms_p50": _r(pct(itl, 50)), "itl_ms_p95": _r(pct(itl, 95)),
        "token_gap_ms_p50": _r(pct(gaps, 50)), "token_gap_ms_p95": _r(pct(gaps, 95)),
        "e2e_ms_p50": _r(pct(e2e, 50)), "e2e_ms_p95": _r(pct(e2e, 95)),
        "tokens_per_completed_request": round(statistics.mean(len(r.token_times) for r in done), 1) if done else None,
    }


def _r(x: float | None, d: int = 2) -> float | None:
    return None if x is None else round(x, d)


def environment() -> dict:
    import torch
    import transformers

    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "host": platform.node(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["gpu_mem_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return env


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def table(rows: list[dict], cols: list[tuple[str, str]]) -> str:
    head = "| " + " | ".join(h for h, _ in cols) + " |"
    sep = "|" + "|".join("---:" for _ in cols) + "|"
    body = ["| " + " | ".join("-" if r.get(k) is None else str(r.get(k)) for _, k in cols) + " |" for r in rows]
    return "\n".join([head, sep, *body])


LEVEL_COLS = [("concurrency", "concurrency"), ("output tok/s", "output_tok_per_s"),
              ("TTFT p50 ms", "ttft_ms_p50"), ("TTFT p95 ms", "ttft_ms_p95"),
              ("ITL p50 ms", "itl_ms_p50"), ("ITL p95 ms", "itl_ms_p95"),
              ("completed", "requests_completed"), ("window s", "window_s")]

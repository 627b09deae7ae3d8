"""Guided decoding served: plain vs json_schema requests through tritongen's rendered ensemble on tritonserver.

The served counterpart of bench/guided_speed.py: the same Llama-3.2-1B-shaped random checkpoint (bf16) saved with
the 128,256-entry tokenizer (so XGrammar's masks cover the model's vocabulary), a spec with runtime hf and the
structured_output defaults, rendered and started with tritongen.serve.TritonServer, and driven as bench/served.py
drives it (one thread and gRPC stream per slot, closed loop, text prompts of --input-tokens tokens):
1. plain: max_tokens = min_tokens = --output-tokens;
2. json_schema: guided_decoding_guide_type/guided_decoding_guide with the schema (tests/data/json_schemas.json),
   no min_tokens; each finished text is parsed and validated (jsonschema when installed);
3. plain with max_tokens = min_tokens = the guided mean length.

    python bench/guided_served.py --out bench/results/guided_served.json            # GPU host
    python bench/guided_served.py --tiny --device cpu --streams 2 --warmup 1 --duration 4 --output-tokens 96 \
        --input-tokens 16 --out /tmp/guided_served.json                            # check the script on a CPU
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "generator"))

from benchlib import RESULTS, build_model, environment, llama_config, table, write_json  # noqa: E402

SCHEMAS = HERE.parent / "tests" / "data" / "json_schemas.json"
COLS = [("run", "run"), ("streams", "concurrency"), ("output tok/s", "output_tok_per_s"),
        ("vs plain", "ratio_to_plain"), ("ITL p50 ms", "itl_ms_p50"), ("TTFT p50 ms", "ttft_ms_p50"),
        ("tokens/request", "tokens_per_completed_request"), ("errors", "errors")]


def checkpoint(out: Path, *, tiny: bool, dtype: str):
    """The 1B-shaped random model with the model-sized byte-level tokenizer, saved as a checkpoint folder."""
    import torch
    from transformers import AutoTokenizer

    from guided_mask_cost import _large_tokenizer
    from tritongen.demo.model import make_demo_model

    demo = make_demo_model(out.parent / "demo")
    demo_config = json.loads((demo / "config.json").read_text())
    config = llama_config(tiny, bos=demo_config["bos_token_id"], eos=demo_config["eos_token_id"],
                          pad=demo_config.get("pad_token_id") or demo_config["eos_token_id"])
    tok = AutoTokenizer.from_pretrained(_large_tokenizer(demo, config.vocab_size))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build_model(config, dtype=getattr(torch, dtype), device=device, favour_ids=512)
    model.config.dtype = dtype
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return tok


def check(texts: list[str], schema: dict) -> dict:
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    valid, bad = 0, []
    for text in texts:
        try:
            value = json.loads(text)
            if jsonschema is not None:
                jsonschema.validate(value, schema)
            valid += 1
        except Exception:
            bad.append(text[:200])
    return {"finished": len(texts), "valid": valid, "validated_with": "jsonschema" if jsonschema else "json",
            "invalid_examples": bad[:3]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--schema", default="mixed_record")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--bls", default="auto", choices=["auto", "native", "python"], help="serving.bls")
    ap.add_argument("--workdir", default="/tmp/tritongen-guided-served")
    ap.add_argument("--out", default=str(RESULTS / "guided_served.json"))
    args = ap.parse_args(argv)

    try:
        import pytriton  # noqa: F401
    except ImportError:  # only its tritonserver folder is needed (bench/served.py does the same)
        found = importlib.util.find_spec("pytriton")
        if found is None:
            raise
        stub = types.ModuleType("pytriton")
        stub.__file__ = found.origin
        sys.modules["pytriton"] = stub
    from served import SPEC, make_prompts, run_level
    from tritongen.render import render_for
    from tritongen.plan import plan_from_file
    from tritongen.render import write_repository
    from tritongen.serve import TritonServer

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    tok = checkpoint(work / "checkpoint", tiny=args.tiny, dtype=args.dtype)
    save_s = time.perf_counter() - t
    spec_path = work / "deployment.yaml"
    spec_path.write_text(SPEC.format(dtype=args.dtype, max_batch=max(8, args.streams), pre=4, post=4,
                                     device=args.device, kv=f"  bls: {args.bls}\n"))
    _, plan = plan_from_file(spec_path)
    repo = work / "repo"
    write_repository(render_for(plan), repo, overwrite=True)
    prompts = make_prompts(tok, 64, args.input_tokens)
    schema = next(s["schema"] for s in json.loads(SCHEMAS.read_text()) if s["name"] == args.schema)
    guide = ("json_schema", json.dumps(schema))
    log = work / "tritonserver.log"
    server = TritonServer(repo, log_path=log, extra_args=["--backend-config=python,stub-timeout-seconds=600"])
    t = time.perf_counter()
    server.start(timeout=600)
    ready_s = time.perf_counter() - t
    print(f"server ready in {ready_s:.1f}s (checkpoint written in {save_s:.1f}s)", flush=True)
    runs = []

    def level(name, out_tokens, guided, texts=None, warmup=args.warmup, duration=args.duration):
        res = run_level(server.grpc_url, server.metrics_url, server.process.pid, args.streams, prompts, out_tokens,
                        warmup, duration, guide=guide if guided else None, texts=texts)
        res.pop("server_level_total_metrics", None)
        print(f"  {name}: {res['output_tok_per_s']} tok/s, ITL p50 {res['itl_ms_p50']} ms, errors {res['errors']} "
              f"{res['first_errors'][:1]}", flush=True)
        return {"run": name, **res}

    try:
        level("warm-up plain", args.output_tokens, False, warmup=0.0, duration=min(4.0, args.duration))
        level("warm-up json_schema", args.output_tokens, True, warmup=0.0, duration=min(4.0, args.duration))
        runs.append(level("plain", args.output_tokens, False))
        texts: list[str] = []
        runs.append(level(f"json_schema {args.schema}", args.output_tokens, True, texts))
        runs[-1]["outputs"] = check(texts, schema)
        print(f"  outputs: {runs[-1]['outputs']}", flush=True)
        matched = round(runs[-1]["tokens_per_completed_request"] or args.output_tokens)
        runs.append(level(f"plain, {matched} tokens", max(2, matched), False))
    finally:
        server.stop()
    base = runs[0]["output_tok_per_s"] if runs else None
    for r in runs:
        r["ratio_to_plain"] = round(r["output_tok_per_s"] / base, 3) if base else None
    tail = log.read_text(errors="replace").splitlines()[-30:] if log.exists() else []
    data = {"bench": "guided_served", "environment": environment(),
            "model": {"shape": "tiny" if args.tiny else "Llama-3.2-1B", "dtype": args.dtype, "weights": "random",
                      "tokenizer_vocab": len(tok)},
            "workload": {"streams": args.streams, "input_tokens": args.input_tokens,
                         "output_tokens": args.output_tokens, "warmup_s": args.warmup, "duration_s": args.duration,
                         "protocol": "gRPC streams to the ensemble", "schema": args.schema,
                         "bls": args.bls},
            "server_ready_s": round(ready_s, 1), "runs": runs,
            "ratio_json_schema_to_plain": runs[1]["ratio_to_plain"] if len(runs) > 1 else None,
            "server_log_tail": tail}
    write_json(Path(args.out), data)
    print(table(runs, COLS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

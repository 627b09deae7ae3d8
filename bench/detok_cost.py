"""CPU cost per streamed token of the detokenising path: per-response postprocessing (commit 9612afd) and the BLS.

Before: NVIDIA's and tritongen's former path. The ensemble's postprocessing model decodes each streamed response on
its own (one Triton call of the postprocessing model per token). After: tensorrt_llm_bls decodes incrementally
(detokenizer.py: two short window decodes per token, stop strings checked) and the ensemble is one step over it.

Two measurements, both CPU seconds (user + system), never wall time, so a busy machine slows them down but does not
bias them:
- inprocess: the decode work alone, per token, for both tokenizer kinds (process_time over every token of the
  multi-script text of tests/streaming_text.py, best of --repeat runs).
- served: the embedded tritonserver serving the tiny model; CPU of every process except the LLM's stub (tritonserver
  itself and the preprocessing / postprocessing / tensorrt_llm_bls stubs), divided by the streamed tokens the clients
  received, for the old repository (old ensemble and postprocessing, from git) and the new one.

    .venv/bin/python bench/detok_cost.py inprocess
    .venv/bin/python bench/detok_cost.py served --requests 48 --tokens 64 --concurrency 4
Results go to bench/results/detok_cost.json (one key per mode).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tritongen import client
from tritongen.demo.model import TOKENIZERS, make_demo_model, train_tokenizer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))
RESULTS = HERE / "results" / "detok_cost.json"
OLD = "9612afd"  # the last commit whose ensemble is preprocessing -> tensorrt_llm -> postprocessing


def inprocess(repeat: int) -> dict:
    import numpy as np

    from streaming_text import TEXT, load_detokenizer
    detok = load_detokenizer()
    out = {}
    for kind in TOKENIZERS:
        tok = train_tokenizer(kind, 512, TEXT)
        held = detok.held_ids(tok)
        ids = tok.encode(TEXT * 20, add_special_tokens=False)

        def before():
            # postprocessing per streamed response: decode the chunk alone, build the OUTPUT tensor
            for t in ids:
                text = tok.decode([t], skip_special_tokens=True)
                np.array([text.encode("utf-8")], dtype=np.object_)

        def after():
            d, stops = detok.IncrementalDetokenizer(tok, True, held), detok.StopStrings(["never there"])
            for t in ids:
                text, _ = stops.feed(d.add([t]))
                np.array([text.encode("utf-8")], dtype=np.object_)
            stops.feed(d.finish())

        row = {"tokens": len(ids)}
        for name, fn in (("before", before), ("after", after)):
            best = min(_cpu(fn) for _ in range(repeat))
            row[f"{name}_us_per_token"] = round(1e6 * best / len(ids), 2)
        row["after_over_before"] = round(row["after_us_per_token"] / row["before_us_per_token"], 2)
        out[kind] = row
    return out


def _cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def _old_repo(new_repo: Path, out: Path) -> Path:
    """The new repository with the former ensemble wiring and postprocessing model put back (from git)."""
    shutil.copytree(new_repo, out)
    for rel, src in (("ensemble/config.pbtxt", "tests/golden/tiny-cpu/ensemble/config.pbtxt"),
                     ("postprocessing/1/model.py", "model_repository_templates/postprocessing/1/model.py")):
        data = subprocess.run(["git", "-C", str(ROOT), "show", f"{OLD}:{src}"], check=True,
                              capture_output=True).stdout
        (out / rel).write_bytes(data)
    return out


def served(requests: int, tokens: int, concurrency: int) -> dict:
    from served import stub_cpu

    from streaming_text import PROMPTS, TEXT, render_repo, start_server
    tmp = Path(tempfile.mkdtemp(prefix="detok-cost-"))
    model = make_demo_model(tmp / "model", tokenizer="sentencepiece", recite=TEXT)
    new = render_repo(model, tmp / "new")
    repos = {"before": _old_repo(new, tmp / "old"), "after": new}
    out = {"requests": requests, "tokens_per_request": tokens, "concurrency": concurrency}
    for name, repo in repos.items():
        server = start_server(repo, tmp / f"{name}.log")
        try:
            list(client.stream_grpc(server.grpc_url, PROMPTS[0], tokens, min_tokens=tokens))  # warm-up
            received = []
            lock = threading.Lock()

            def worker(i: int) -> None:
                for j in range(i, requests, concurrency):
                    n = len(list(client.stream_grpc(server.grpc_url, PROMPTS[j % len(PROMPTS)], tokens,
                                                    min_tokens=tokens)))
                    with lock:
                        received.append(n)

            cpu0 = stub_cpu(server.process.pid)
            threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            cpu1 = stub_cpu(server.process.pid)
        finally:
            server.stop()
        used = {k: round(v - cpu0.get(k, 0.0), 3) for k, v in cpu1.items()}
        path_cpu = sum(v for k, v in used.items() if k != "stub:tensorrt_llm")
        streamed = requests * tokens
        out[name] = {"cpu_s_by_process": used, "responses": sum(received), "streamed_tokens": streamed,
                     "path_cpu_us_per_token": round(1e6 * path_cpu / streamed, 1),
                     "llm_cpu_us_per_token": round(1e6 * used.get("stub:tensorrt_llm", 0.0) / streamed, 1)}
    out["after_over_before"] = round(out["after"]["path_cpu_us_per_token"] / out["before"]["path_cpu_us_per_token"], 2)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["inprocess", "served"])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=4)
    a = p.parse_args()
    result = inprocess(a.repeat) if a.mode == "inprocess" else served(a.requests, a.tokens, a.concurrency)
    result["machine"] = {"python": platform.python_version(), "cpus": __import__("os").cpu_count(),
                         "load_average": __import__("os").getloadavg()}
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[a.mode] = result
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

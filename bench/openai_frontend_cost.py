"""What the OpenAI frontend costs, measured in CPU time rather than wall time (robust on a busy machine).

Starts the embedded tritonserver on the tiny demo deployment and the frontend in its own process, then sends the
same sequential requests two ways: gRPC ModelStreamInfer to the ensemble directly, and streamed chat completions
through the frontend (interleaved, one in flight). Reports client-side TTFT for both (wall clock, affected by
machine load) and the frontend process's CPU time per request and per streamed chunk (from /proc), which is
what the frontend adds when it is not waiting for a core.

    .venv/bin/python bench/openai_frontend_cost.py SPEC [--requests 40] [--max-tokens 16] [--out FILE]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from tritongen.client import stream_grpc
from tritongen.frontend.server import FrontendProcess
from tritongen.render import render_for
from tritongen.plan import plan_from_file
from tritongen.render import write_repository
from tritongen.serve import TritonServer


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _openai_once(host: str, port: int, model: str, prompt: str, max_tokens: int) -> tuple[float, int]:
    conn = http.client.HTTPConnection(host, port, timeout=120)
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_completion_tokens": max_tokens,
            "min_tokens": max_tokens, "stream": True}
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    ttft, chunks = None, 0
    for line in response:
        if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
            continue
        event = json.loads(line[5:])
        if event["choices"] and event["choices"][0]["delta"].get("content"):
            chunks += 1
            ttft = ttft or time.perf_counter() - start
    conn.close()
    return ttft, chunks


def _grpc_once(url: str, prompt: str, max_tokens: int) -> float:
    start = time.perf_counter()
    for _ in stream_grpc(url, prompt, max_tokens, min_tokens=max_tokens):
        return time.perf_counter() - start
    raise RuntimeError("no response")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("spec")
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--out")
    args = p.parse_args()
    _, plan = plan_from_file(args.spec)
    work = Path(tempfile.mkdtemp(prefix="openai-cost-"))
    write_repository(render_for(plan), work / "repo")
    model = plan.frontend.models[0].name
    with TritonServer(work / "repo", log_path=work / "triton.log") as server:
        frontend = FrontendProcess(work / "repo", server.grpc_url, port=0, log_path=work / "frontend.log").start()
        try:
            prompt = "Once upon a time in the quiet town by the river"
            for _ in range(3):  # warm both paths
                _grpc_once(server.grpc_url, prompt, args.max_tokens)
                _openai_once(frontend.host, frontend.port, model, prompt, args.max_tokens)
            grpc_ttft, openai_ttft, chunks = [], [], 0
            cpu = 0.0
            for i in range(args.requests):
                grpc_ttft.append(_grpc_once(server.grpc_url, f"{prompt} {i}", args.max_tokens))
                before = _cpu_seconds(frontend.process.pid)
                ttft, n = _openai_once(frontend.host, frontend.port, model, f"{prompt} {i}", args.max_tokens)
                cpu += _cpu_seconds(frontend.process.pid) - before
                openai_ttft.append(ttft)
                chunks += n
        finally:
            frontend.stop()
    result = {
        "requests": args.requests, "max_tokens": args.max_tokens, "load_average_1m": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "grpc_ttft_ms_p50": statistics.median(grpc_ttft) * 1e3,
        "openai_ttft_ms_p50": statistics.median(openai_ttft) * 1e3,
        "openai_minus_grpc_ttft_ms_p50": (statistics.median(openai_ttft) - statistics.median(grpc_ttft)) * 1e3,
        "frontend_cpu_ms_per_request": cpu / args.requests * 1e3,
        "frontend_cpu_ms_per_chunk": cpu / max(chunks, 1) * 1e3,
        "chunks_per_request": chunks / args.requests,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""A lean measuring client: N processes x M concurrent gRPC ModelStreamInfer streams, all started at once.

Each stream is one closed-loop user (one request in flight, the next sent when the last one ends). Per response the
client does the least it can: a timestamp, the token count from `num_output_tokens`, the payload appended (text
for `ensemble`/`tensorrt_llm_bls`, raw ids for `tensorrt_llm`). Everything else happens after the run.

The window (the same for every target): the first requests of every process go out together at `start`; the
measured window is [start + warmup, start + warmup + duration], on the host's monotonic clock (shared by processes).
- delivered tok/s: tokens in responses that arrived inside the window / window length;
- TTFT: first token - send; ITL: per request, (last token - first token) / (tokens after the first), as
  GenAI-Perf; both over requests sent inside the window; `gap`: per streamed response, time since the previous
  response / its tokens, for responses inside the window;
- client CPU: user + system seconds of the client processes over the window.

Exact text, checked after the run on every completed request: when the server's `tensorrt_llm` is the synthetic
source (its ids are deterministic: the id cycle starts at the prompt length, skipping ids below 16 and the end and
pad ids), expected = tokenizer.decode(expected ids, skip_special_tokens=True, clean_up_tokenization_spaces=False);
the text targets must stream exactly that, and `tensorrt_llm` (the ids path) must stream exactly the expected ids,
which the client then decodes. Prompts differ in length per request (8 variants), so crossed streams show.

`--target openai`: the same users against the OpenAI-compatible frontend (`--openai-url host:port`; `--url` still
names the tritonserver whose model configs give the tokenizer and the synthetic source's ids): streamed
/v1/completions (stream, stream_options.include_usage, max_tokens = min_tokens = --output-tokens) over raw HTTP/1.1
(asyncio streams, one keep-alive connection per user, chunked SSE). Per HTTP chunk the client keeps a timestamp and
the raw bytes; after the run each event is parsed. Tokens are the server's (the usage chunk's completion_tokens):
one per content chunk at its arrival, the rest (tokens whose text the frontend held back, e.g. partial UTF-8) at
the last one; `openai_chunks_equal_usage` says for how many requests chunks = tokens. Exact text: the
concatenated `text` deltas must equal the expected text.

    .venv/bin/python bench/streamclient.py --url 127.0.0.1:8001 --target ensemble --processes 2 --streams 32 \
        --duration 5 --warmup 2 --output-tokens 128 --input-tokens 128
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import struct
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass

TARGETS = ("tensorrt_llm", "tensorrt_llm_bls", "ensemble", "openai")
PROMPT_VARIANTS = 8
END_GRACE_S = 30.0  # after the window, requests in flight get this long to finish before they are cancelled


@dataclass(frozen=True)
class Config:
    url: str
    target: str
    processes: int = 1
    streams: int = 8
    """Concurrent streams per process."""
    duration_s: float = 5.0
    warmup_s: float = 2.0
    output_tokens: int = 128
    input_tokens: int = 128
    tokenizer: str | None = None
    """Tokenizer folder; default: the one the server's preprocessing (or BLS) model names."""
    openai_url: str | None = None
    """target `openai`: host:port of the OpenAI-compatible frontend."""
    model: str | None = None
    """target `openai`: the public model name (default: the first one /v1/models lists)."""
    api_key: str | None = None


@dataclass(frozen=True)
class Prompt:
    text: str
    ids: list[int]
    expected_ids: list[int] | None
    expected_text: bytes | None


# ---- what the server serves ------------------------------------------------------------------------------------

def _params(config: dict) -> dict[str, str]:
    return {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}


def discover(cfg: Config) -> dict:
    """The target's input names, the tokenizer and, for the synthetic source, its id cycle (from model configs)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(cfg.url)
    try:
        configs = {}
        for model in ("tensorrt_llm", "preprocessing", "tensorrt_llm_bls", "postprocessing", cfg.target):
            try:
                configs[model] = client.get_model_config(model, as_json=True)["config"]
            except Exception:  # a layout without that model
                continue
    finally:
        client.close()
    llm = _params(configs.get("tensorrt_llm", {}))
    tok_params = _params(configs.get("preprocessing") or configs.get("tensorrt_llm_bls") or {})
    post = _params(configs.get("postprocessing") or configs.get("tensorrt_llm_bls") or {})
    synthetic = None
    if "itl_ms" in llm and "vocab_size" in llm:
        synthetic = {k: int(llm.get(k) or d) for k, d in (("vocab_size", 256), ("end_id", 0), ("pad_id", 0))}
    return {
        "inputs": [t["name"] for t in configs.get(cfg.target, {}).get("input", [])],
        "model": _openai_model(cfg) if cfg.target == "openai" else None,
        "backend": configs.get("tensorrt_llm", {}).get("backend"),
        "tokenizer": cfg.tokenizer or tok_params.get("tokenizer_dir"),
        "add_special_tokens": tok_params.get("add_special_tokens", "true").lower() in ("true", "1", "yes"),
        "skip_special_tokens": post.get("skip_special_tokens", "true").lower() in ("true", "1", "yes"),
        "synthetic": synthetic,
    }


def _openai_model(cfg: Config) -> str:
    if cfg.model:
        return cfg.model
    if not cfg.openai_url:
        raise ValueError("--target openai needs --openai-url host:port")
    req = urllib.request.Request(f"http://{cfg.openai_url}/v1/models",
                                 headers={"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["data"][0]["id"]


def synthetic_ids(prompt_len: int, n: int, vocab_size: int, end_id: int, pad_id: int) -> list[int]:
    """The ids the synthetic source sends (tritongen.served.synthetic, tritongen_tokensource)."""
    ids = [i for i in range(min(16, vocab_size - 1), vocab_size) if i not in (end_id, pad_id)] or [vocab_size - 1]
    return [ids[(prompt_len + i) % len(ids)] for i in range(n)]


def make_prompts(cfg: Config, server: dict) -> list[Prompt]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(server["tokenizer"])
    prompts = []
    for k in range(PROMPT_VARIANTS):
        # Text made of ordinary ids, re-encoded: the ids a server's tokenizer makes of it are what count.
        text = tok.decode(list(range(100 + k, 100 + k + cfg.input_tokens + k)), skip_special_tokens=True)
        ids = tok.encode(text, add_special_tokens=server["add_special_tokens"])
        expected_ids = expected_text = None
        if server["synthetic"]:
            expected_ids = synthetic_ids(len(ids), cfg.output_tokens, **server["synthetic"])
            expected_text = tok.decode(expected_ids, skip_special_tokens=True,
                                       clean_up_tokenization_spaces=False).encode()
        prompts.append(Prompt(text, ids, expected_ids, expected_text))
    return prompts


# ---- requests --------------------------------------------------------------------------------------------------

def _request(cfg: Config, prompt: Prompt, inputs: list[str]):
    """One prebuilt ModelInferRequest (reused for every send of this prompt)."""
    from tritonclient.grpc import service_pb2 as pb

    req = pb.ModelInferRequest(model_name=cfg.target)
    req.parameters["triton_enable_empty_final_response"].bool_param = True

    def add(name: str, datatype: str, shape: list[int], raw: bytes) -> None:
        if name not in inputs:
            return  # a target that does not declare an optional input
        t = req.inputs.add(name=name, datatype=datatype)
        t.shape.extend(shape)
        req.raw_input_contents.append(raw)

    def i32(v: int) -> bytes:
        return struct.pack("<i", v)

    true = b"\x01"
    if cfg.target == "tensorrt_llm":
        add("input_ids", "INT32", [1, len(prompt.ids)], struct.pack(f"<{len(prompt.ids)}i", *prompt.ids))
        add("input_lengths", "INT32", [1, 1], i32(len(prompt.ids)))
        add("request_output_len", "INT32", [1, 1], i32(cfg.output_tokens))
        add("streaming", "BOOL", [1, 1], true)
        outputs = ("output_ids", "num_output_tokens")
    else:
        text = prompt.text.encode()
        add("text_input", "BYTES", [1, 1], struct.pack("<I", len(text)) + text)
        add("max_tokens", "INT32", [1, 1], i32(cfg.output_tokens))
        add("stream", "BOOL", [1, 1], true)
        outputs = ("text_output", "num_output_tokens")
    add("min_tokens", "INT32", [1, 1], i32(cfg.output_tokens))  # exact counts from a real engine too
    add("exclude_input_in_output", "BOOL", [1, 1], true)
    add("return_num_output_tokens", "BOOL", [1, 1], true)
    for name in outputs:
        req.outputs.add(name=name)
    return req


def _bytes_elements(raw: bytes) -> bytes:
    out, at = [], 0
    while at + 4 <= len(raw):
        (n,) = struct.unpack_from("<I", raw, at)
        out.append(raw[at + 4: at + 4 + n])
        at += 4 + n
    return b"".join(out)


# ---- one client process ----------------------------------------------------------------------------------------

async def _process_main(cfg: Config, index: int, start: float, prompts: list[Prompt], inputs: list[str]) -> dict:
    if cfg.target == "openai":
        return await _openai_process_main(cfg, index, start, prompts, inputs)
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    w0, w1 = start + cfg.warmup_s, start + cfg.warmup_s + cfg.duration_s
    requests = [_request(cfg, p, inputs) for p in prompts]
    channel = grpc.aio.insecure_channel(cfg.url, options=[("grpc.max_receive_message_length", -1)])
    await channel.channel_ready()
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    ids_path = cfg.target == "tensorrt_llm"
    payload_name = "output_ids" if ids_path else "text_output"
    records: list[tuple] = []  # (prompt index, sent, times, counts, payload, error)
    cpu: list[float] = []

    async def user(u: int) -> None:
        call = stub.ModelStreamInfer()
        n = 0
        try:
            await asyncio.sleep(max(0.0, start - time.monotonic()))
            while time.monotonic() < w1:
                k = (index * cfg.streams + u + n) % len(requests)
                n += 1
                sent = time.monotonic()
                await call.write(requests[k])
                times, counts, chunks, error = [], [], [], None
                while True:
                    r = await call.read()
                    if r is grpc.aio.EOF:
                        error = "stream ended"
                        break
                    if r.error_message:
                        error = r.error_message
                        break
                    t = time.monotonic()
                    ir = r.infer_response
                    for i, out in enumerate(ir.outputs):
                        if out.name == "num_output_tokens":
                            times.append(t)
                            counts.append(struct.unpack_from("<i", ir.raw_output_contents[i])[0])
                        elif out.name == payload_name:
                            chunks.append(ir.raw_output_contents[i])
                    if ir.parameters["triton_final_response"].bool_param:
                        break
                records.append((k, sent, times, counts, chunks, error))
                if error:
                    return
        finally:
            call.cancel()

    async def sample_cpu() -> None:
        for at in (w0, w1):
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            t = os.times()
            cpu.append(t.user + t.system)

    users = [asyncio.ensure_future(user(u)) for u in range(cfg.streams)]
    sampler = asyncio.ensure_future(sample_cpu())
    late = max(0.0, time.monotonic() - start)
    done, pending = await asyncio.wait(users, timeout=max(0.0, w1 + END_GRACE_S - time.monotonic()))
    for task in pending:
        task.cancel()
    await sampler
    await channel.close()
    return _summarize_process(cfg, records, prompts, (w0, w1), cpu, late, len(pending), ids_path)


def _summarize_process(cfg, records, prompts, window, cpu, late, unfinished, ids_path, raw_text=False) -> dict:
    w0, w1 = window
    tokens_in_window = tokens_total = 0
    ttft, itl, gaps, errors = [], [], [], []
    checked = exact = 0
    mismatch = None
    decode: dict[int, bytes] = {}
    for k, sent, times, counts, chunks, error in records:
        tokens_total += sum(counts)
        tokens_in_window += sum(c for t, c in zip(times, counts) if w0 <= t <= w1)
        if error:
            errors.append(error)
            continue
        for a, b, c in zip(times, times[1:], counts[1:]):
            if w0 <= b <= w1 and c:
                gaps.append((b - a) / c)
        firsts = [t for t, c in zip(times, counts) if c]
        if w0 <= sent <= w1 and firsts:
            ttft.append(firsts[0] - sent)
            later = sum(counts) - next(c for c in counts if c)
            if later > 0:
                itl.append((times[-1] - firsts[0]) / later)
        expected = prompts[k]
        if expected.expected_ids is None:
            continue
        checked += 1
        if ids_path:
            got = b"".join(chunks)
            ok = got == struct.pack(f"<{len(expected.expected_ids)}i", *expected.expected_ids)
        else:
            got = b"".join(chunks) if raw_text else b"".join(_bytes_elements(c) for c in chunks)
            ok = got == expected.expected_text
        exact += ok
        if ok and ids_path and len(decode) < PROMPT_VARIANTS:
            decode.setdefault(k, got)  # the ids path's text is decoded by the client, once per prompt, after the run
        if not ok and mismatch is None:
            mismatch = {"prompt": k, "got": got[:200].hex() if ids_path else got[:200].decode(errors="replace")}
    return {"tokens_in_window": tokens_in_window, "tokens_total": tokens_total, "requests": len(records),
            "errors": errors[:5], "error_count": len(errors),
            "refused_count": sum(1 for e in errors if "queue size" in str(e) or "429" in str(e)), "ttft": ttft, "itl": itl, "gaps": gaps,
            "cpu_s": cpu[1] - cpu[0] if len(cpu) == 2 else None, "late_s": late, "unfinished": unfinished,
            "checked": checked, "exact": exact, "mismatch": mismatch, "decode": decode}


# ---- the OpenAI target: raw HTTP/1.1 + SSE over asyncio streams ------------------------------------------------

def _openai_body(cfg: Config, model: str, prompt: Prompt) -> bytes:
    host = cfg.openai_url or ""
    body = json.dumps({"model": model, "prompt": prompt.text, "max_tokens": cfg.output_tokens,
                       "min_tokens": cfg.output_tokens, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    auth = f"Authorization: Bearer {cfg.api_key}\r\n" if cfg.api_key else ""
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\n{auth}Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def _read_response(reader) -> tuple[int, bool, list[tuple[float, bytes]]]:
    """One HTTP/1.1 response: (status, connection closes, [(arrival, body piece)]); a piece per HTTP chunk."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip().lower()
    pieces: list[tuple[float, bytes]] = []
    close = headers.get(b"connection") == b"close"
    if headers.get(b"transfer-encoding") == b"chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                    pass
                break
            data = await reader.readexactly(size + 2)
            pieces.append((time.monotonic(), data[:-2]))
    elif b"content-length" in headers:
        pieces.append((time.monotonic(), await reader.readexactly(int(headers[b"content-length"]))))
    else:
        pieces.append((time.monotonic(), await reader.read()))
        close = True
    return status, close, pieces


def _openai_events(pieces: list[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
    """SSE `data:` payloads with the arrival of the piece that completed each."""
    events, buf = [], b""
    for t, data in pieces:
        buf += data.replace(b"\r\n", b"\n")
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            payload = b"\n".join(line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:"))
            if payload:
                events.append((t, payload))
    return events


def _openai_record(k: int, sent: float, status: int, pieces: list[tuple[float, bytes]]) -> tuple:
    """(prompt, sent, times, counts, texts, error, content chunks) from one response, as the gRPC records."""
    if status != 200:
        return k, sent, [], [], [], f"HTTP {status}: {b''.join(p for _, p in pieces)[:300]!r}", 0
    times, texts, usage, error, done = [], [], None, None, False
    for t, payload in _openai_events(pieces):
        if payload == b"[DONE]":
            done = True
            continue
        event = json.loads(payload)
        if "error" in event:
            error = f"stream error: {event['error']}"
            continue
        for choice in event.get("choices") or ():
            if choice.get("text"):
                times.append(t)
                texts.append(choice["text"].encode())
        if event.get("usage"):
            usage = event["usage"]["completion_tokens"]
    if error is None and not done:
        error = "stream ended without [DONE]"
    if error is None and usage is None:
        error = "no usage chunk"
    counts = [1] * len(times)
    if usage is not None:
        rest = usage - len(times)
        if times and rest > 0:
            counts[-1] += rest
        elif not times and usage:
            times, counts = [pieces[-1][0]], [usage]
    return k, sent, times, counts, texts, error, len(texts)


async def _openai_process_main(cfg: Config, index: int, start: float, prompts: list[Prompt], inputs) -> dict:
    w0, w1 = start + cfg.warmup_s, start + cfg.warmup_s + cfg.duration_s
    host, _, port = (cfg.openai_url or "").rpartition(":")
    model = inputs  # for this target, the process gets the model name in place of the input names
    requests = [_openai_body(cfg, model, p) for p in prompts]
    raw: list[tuple] = []  # (prompt index, sent, status, pieces) or (prompt index, sent, error)
    cpu: list[float] = []

    async def user(u: int) -> None:
        n = 0
        reader = writer = None
        try:
            await asyncio.sleep(max(0.0, start - time.monotonic()))
            while time.monotonic() < w1:
                k = (index * cfg.streams + u + n) % len(requests)
                n += 1
                if writer is None:
                    reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 20)
                sent = time.monotonic()
                try:
                    writer.write(requests[k])
                    status, close, pieces = await _read_response(reader)
                except (OSError, asyncio.IncompleteReadError, ValueError) as err:
                    raw.append((k, sent, f"{type(err).__name__}: {err}"))
                    return
                raw.append((k, sent, status, pieces))
                if status != 200:
                    return
                if close:
                    writer.close()
                    reader = writer = None
        finally:
            if writer is not None:
                writer.close()

    async def sample_cpu() -> None:
        for at in (w0, w1):
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            t = os.times()
            cpu.append(t.user + t.system)

    users = [asyncio.ensure_future(user(u)) for u in range(cfg.streams)]
    sampler = asyncio.ensure_future(sample_cpu())
    late = max(0.0, time.monotonic() - start)
    done, pending = await asyncio.wait(users, timeout=max(0.0, w1 + END_GRACE_S - time.monotonic()))
    for task in pending:
        task.cancel()
    await sampler
    # Everything below happens after the window: parsing costs the client nothing inside it.
    records, chunks_equal = [], 0
    for item in raw:
        if len(item) == 3:
            records.append((item[0], item[1], [], [], [], item[2]))
            continue
        k, sent, times, counts, texts, error, n_chunks = _openai_record(*item)
        chunks_equal += error is None and n_chunks == sum(counts)
        records.append((k, sent, times, counts, texts, error))
    out = _summarize_process(cfg, records, prompts, (w0, w1), cpu, late, len(pending), False, raw_text=True)
    out["openai_chunks_equal_usage"] = chunks_equal
    return out


def _process_entry(cfg: Config, index: int, start: float, prompts, inputs, queue) -> None:
    try:
        queue.put((index, asyncio.run(_process_main(cfg, index, start, prompts, inputs))))
    except BaseException as err:  # the parent must learn why, not wait forever
        queue.put((index, {"failed": f"{type(err).__name__}: {err}"}))


# ---- the run ---------------------------------------------------------------------------------------------------

def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 2)


def prepare(cfg: Config) -> tuple[dict, list[Prompt]]:
    """Read the server's configs and make the prompts (slow: loads the tokenizer), before any timing starts."""
    server = discover(cfg)
    return server, make_prompts(cfg, server)


def run(cfg: Config, server: dict, prompts: list[Prompt], start_in: float = 3.0,
        on_start=None) -> dict:
    """Run the load; `on_start(start, window)` is called (in this process) once the start time is fixed, so a
    caller can sample server-side counters over exactly the same window."""
    if cfg.target not in TARGETS:
        raise ValueError(f"--target: {cfg.target!r} is not one of {', '.join(TARGETS)}")
    ctx = multiprocessing.get_context("spawn")  # no fork after gRPC has started threads in this process
    queue = ctx.Queue()
    # Spawned processes need time to import grpc and connect: the common start leaves room for that.
    start = time.monotonic() + start_in + 0.2 * cfg.processes
    window = (start + cfg.warmup_s, start + cfg.warmup_s + cfg.duration_s)
    inputs = server["model"] if cfg.target == "openai" else server["inputs"]
    procs = [ctx.Process(target=_process_entry, args=(cfg, i, start, prompts, inputs, queue), daemon=True)
             for i in range(cfg.processes)]
    for p in procs:
        p.start()
    if on_start is not None:
        on_start(start, window)
    parts = {}
    deadline = window[1] + END_GRACE_S + 60
    while len(parts) < len(procs):
        try:
            index, part = queue.get(timeout=max(1.0, deadline - time.monotonic()))
        except Exception:
            raise RuntimeError("streamclient: a client process did not report (see its traceback above)") from None
        parts[index] = part
    for p in procs:
        p.join(timeout=10)
    failed = [p["failed"] for p in parts.values() if "failed" in p]
    if failed:
        raise RuntimeError(f"streamclient: client process failed: {failed[0]}")
    result = aggregate(cfg, server, list(parts.values()))
    if cfg.target == "tensorrt_llm":
        result["ids_decoded_exact"] = _decode_check(server, prompts, list(parts.values()))
    return result


def _decode_check(server: dict, prompts: list[Prompt], parts: list[dict]) -> bool | None:
    """The ids path: the client decodes the streamed ids (once per prompt) and compares with the expected text."""
    from transformers import AutoTokenizer

    received = {k: ids for p in parts for k, ids in p["decode"].items()}
    if not received:
        return None
    tok = AutoTokenizer.from_pretrained(server["tokenizer"])
    for k, raw in received.items():
        ids = list(struct.unpack(f"<{len(raw) // 4}i", raw))
        text = tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False).encode()
        if text != prompts[k].expected_text:
            return False
    return True


def aggregate(cfg: Config, server: dict, parts: list[dict]) -> dict:
    ttft = [x for p in parts for x in p["ttft"]]
    itl = [x for p in parts for x in p["itl"]]
    gaps = [x for p in parts for x in p["gaps"]]
    tokens = sum(p["tokens_in_window"] for p in parts)
    cpu = [p["cpu_s"] for p in parts if p["cpu_s"] is not None]
    checked = sum(p["checked"] for p in parts)
    return {
        "config": asdict(cfg), "source_backend": server["backend"],
        "concurrency": cfg.processes * cfg.streams, "window_s": cfg.duration_s,
        "tokens_in_window": tokens, "tok_per_s": round(tokens / cfg.duration_s, 1),
        "tokens_total": sum(p["tokens_total"] for p in parts),
        "requests": sum(p["requests"] for p in parts), "errors": sum(p["error_count"] for p in parts),
        "refused": sum(p["refused_count"] for p in parts),
        "error_samples": [e for p in parts for e in p["errors"]][:5],
        "ttft_ms_p50": _ms(pct(ttft, 50)), "ttft_ms_p99": _ms(pct(ttft, 99)),
        "itl_ms_p50": _ms(pct(itl, 50)), "itl_ms_p99": _ms(pct(itl, 99)),
        "gap_ms_p50": _ms(pct(gaps, 50)), "gap_ms_p99": _ms(pct(gaps, 99)), "gap_ms_p999": _ms(pct(gaps, 99.9)),
        "client_cpu_cores": round(sum(cpu) / cfg.duration_s, 2) if cpu else None,
        "client_start_late_ms": _ms(max(p["late_s"] for p in parts)),
        "unfinished_at_end": sum(p["unfinished"] for p in parts),
        "text_checked": checked, "text_exact": sum(p["exact"] for p in parts),
        "text_mismatch": next((p["mismatch"] for p in parts if p["mismatch"]), None),
        **({"openai_model": server["model"],
            "openai_chunks_equal_usage": sum(p["openai_chunks_equal_usage"] for p in parts)}
           if cfg.target == "openai" else {}),
    }


def summary_line(r: dict) -> str:
    exact = f"{r['text_exact']}/{r['text_checked']} exact" if r["text_checked"] else "text not checked"
    return (f"{r['config']['target']:>16} c={r['concurrency']:<4} {r['tok_per_s']:>10,.0f} tok/s  "
            f"TTFT p50/p99 {r['ttft_ms_p50']}/{r['ttft_ms_p99']} ms  ITL p50/p99 {r['itl_ms_p50']}/{r['itl_ms_p99']} ms"
            f"  client CPU {r['client_cpu_cores']} cores  errors {r['errors']}  {exact}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="gRPC host:port of the tritonserver")
    ap.add_argument("--openai-url", help="target openai: host:port of the OpenAI-compatible frontend")
    ap.add_argument("--model", help="target openai: model name (default: the first in /v1/models)")
    ap.add_argument("--api-key", help="target openai: bearer key, where the frontend asks for one")
    ap.add_argument("--target", choices=TARGETS, default="ensemble")
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--streams", type=int, default=8, help="concurrent streams per process")
    ap.add_argument("--duration", type=float, default=5.0, help="measured window, seconds")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds from the first send to the window")
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--tokenizer", help="tokenizer folder (default: the one the server's models name)")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args(argv)
    cfg = Config(args.url, args.target, args.processes, args.streams, args.duration, args.warmup,
                 args.output_tokens, args.input_tokens, args.tokenizer, args.openai_url, args.model, args.api_key)
    server, prompts = prepare(cfg)
    result = run(cfg, server, prompts)
    print(summary_line(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    ok = result["errors"] == 0 and result["text_exact"] == result["text_checked"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

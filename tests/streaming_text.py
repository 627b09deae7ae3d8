"""Shared material for the streaming-text tests: texts in several scripts and the shipped detokenizer module."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What the test models recite, and what their tokenizers are trained on: CJK, Cyrillic, accents, emoji
# (with a skin-tone modifier and a flag: several code points per glyph), leading spaces, tabs, newlines.
TEXT = """Привет, мир! Съешь же ещё этих мягких французских булок.
日本語のテキスト、中文文本和한국어 문장。
Café, naïve, façade, résumé, Ångström, über, señor, smörgåsbord.
Emoji: 🙂 🚀 👍🏽 🇫🇷 ok.
  Two leading spaces,\ttabs\tand
newlines.
"""
PROMPTS = ["Привет", "日本", "Café", "Emoji:", "\ttabs"]
SAMPLES = [" Привет мир", "日本語 🙂 ok", "\tcafé\n naïve", "  two  spaces", "👍🏽🇫🇷", "中文文本和한국어"]


def load_detokenizer():
    """The detokenizer module the BLS ships (tritongen.served.detokenizer) and the ids path's clients use."""
    from tritongen.served import detokenizer

    return detokenizer


def render_repo(model_dir: Path, out: Path, **serving) -> Path:
    """examples/tiny-cpu.yaml pointed at `model_dir`, with one BLS instance (it serves requests on threads)."""
    import yaml

    from specs import render_spec

    data = yaml.safe_load((ROOT / "examples" / "tiny-cpu.yaml").read_text())
    data["model"]["checkpoint"] = str(model_dir)
    data["serving"].update({"bls_instances": 1, **serving})
    spec_path = out.parent / f"{out.name}.yaml"
    spec_path.write_text(yaml.safe_dump(data, sort_keys=False))
    render_spec(spec_path, out)
    return out


def start_server(repo: Path, log: Path, grace_s: float = 5.0):
    """A tritonserver for a test module. Its exit timeout is 5 s, not the 30 s default: while the test process
    still holds client connections, tritonserver 2.51 keeps the entry-point models (ensemble, tensorrt_llm_bls)
    UNLOADING until its exit timeout, even with no request in flight (a stop took 30-32 s that way, 4-7 s once the
    client process was gone). Tests of the stop itself pass their own grace period."""
    from tritongen.serve import TritonServer

    server = TritonServer(repo, log_path=log, grace_s=grace_s)
    try:
        server.start(timeout=300)
    except Exception:
        print(server.log_tail(80))
        raise
    return server


def grpc_tensor(name: str, value):
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    value = np.asarray(value)
    t = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
    t.set_data_from_numpy(value)
    return t


def grpc_responses(url: str, model: str, inputs: dict, timeout: float = 120.0) -> list:
    """Every response of one ModelStreamInfer request (InferResult), or raise the server's error."""
    import queue

    import tritonclient.grpc as grpcclient

    results: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(url)
    c.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        c.async_stream_infer(model, [grpc_tensor(k, v) for k, v in inputs.items()], enable_empty_final_response=True)
        out = []
        while True:
            result, error = results.get(timeout=timeout)
            if error is not None:
                raise RuntimeError(str(error))
            final = result.get_response().parameters.get("triton_final_response")
            if result.get_response().outputs:
                out.append(result)
            if final is not None and final.bool_param:
                return out
    finally:
        c.stop_stream(cancel_requests=True)
        c.close()

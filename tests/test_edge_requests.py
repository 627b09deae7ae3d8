"""Edge requests answered right at every entry point: one FINAL response, an error that names the input, no work
spent on a request that cannot run.

Its own tritonserver serves a copy of the tiny model whose first token after one prompt is certainly its end token,
so that prompt yields an empty generation through every path.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from streaming_text import grpc_responses, render_repo, start_server

pytestmark = pytest.mark.integration

openai = pytest.importorskip("openai")
MODEL = "tiny-cpu"
MESSAGES = [{"role": "user", "content": "Say nothing."}]


def _end_at_once(model_dir: Path, prompt: str) -> None:
    """Make the end token the model's certain first choice after `prompt`: its output-embedding row becomes the
    direction of the final hidden state there, so its logit outweighs every other by orders of magnitude (a random
    tiny model's logits are otherwise so close that another attention kernel picks another token)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        hidden = model(torch.tensor([tokenizer.encode(prompt)]), output_hidden_states=True).hidden_states[-1][0, -1]
        model.lm_head.weight[tokenizer.eos_token_id] = 1000 * hidden / hidden.norm()
    model.save_pretrained(model_dir)


@pytest.fixture(scope="module")
def served(tiny_model, tmp_path_factory):
    """(triton, frontend, prompt): a server where `prompt` (the chat template applied to MESSAGES) ends at once."""
    from transformers import AutoTokenizer

    from tritongen.frontend.server import FrontendServer
    from tritongen.plan.frontend import FrontendPlan

    tmp = tmp_path_factory.mktemp("edge")
    model_dir = tmp / "model"
    shutil.copytree(tiny_model, model_dir)
    prompt = AutoTokenizer.from_pretrained(model_dir).apply_chat_template(MESSAGES, tokenize=False,
                                                                          add_generation_prompt=True)
    _end_at_once(model_dir, prompt)
    repo = render_repo(model_dir, tmp / "repo")
    triton = start_server(repo, tmp / "tritonserver.log")
    try:
        plan = FrontendPlan.read(repo).model_copy(update={"port": 0})
        with FrontendServer(plan, triton.grpc_url) as frontend:
            yield triton, frontend, prompt
    finally:
        triton.stop()


def _inputs(prompt: str, stream: bool, **extra) -> dict:
    return {"text_input": np.array([[prompt]], dtype=object), "max_tokens": np.array([[8]], np.int32),
            "stream": np.array([[stream]]), "return_num_input_tokens": np.array([[True]]),
            "return_num_output_tokens": np.array([[True]]), **extra}


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
@pytest.mark.parametrize("stream", [False, True])
def test_empty_generation_is_one_empty_answer_with_counts(served, model, stream):
    triton, _, prompt = served
    responses = grpc_responses(triton.grpc_url, model, _inputs(prompt, stream))
    assert b"".join(r.as_numpy("text_output").reshape(-1)[0] for r in responses) == b""
    assert sum(int(r.as_numpy("num_output_tokens").reshape(-1)[0]) for r in responses) == 0
    assert int(responses[0].as_numpy("num_input_tokens").reshape(-1)[0]) > 0


def test_empty_generation_through_openai(served):
    _, frontend, prompt = served
    client = openai.OpenAI(base_url=frontend.base_url, api_key="unused", max_retries=0, timeout=60)
    out = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8)
    assert out.choices[0].text == "" and out.choices[0].finish_reason == "stop"
    assert out.usage.completion_tokens == 0 and out.usage.prompt_tokens > 0
    chat = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8)
    assert chat.choices[0].message.content == "" and chat.usage.completion_tokens == 0
    for stream in (client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, stream=True,
                                             stream_options={"include_usage": True}),
                   client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, stream=True,
                                                  stream_options={"include_usage": True})):
        usage = [c.usage for c in stream if c.usage is not None]
        assert len(usage) == 1 and usage[0].completion_tokens == 0 and usage[0].prompt_tokens > 0


def test_empty_generation_through_the_cli(served, capsys):
    from tritongen.cli import main

    triton, _, prompt = served
    for flags in ([], ["--stream"]):
        assert main(["generate", prompt, "--url", triton.grpc_url, "--max-tokens", "8", *flags]) == 0
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("missing", ["text_input", "max_tokens"])
@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_a_missing_required_input_is_one_error_naming_it(served, model, missing):
    triton = served[0]
    inputs = _inputs("Hello", False)
    del inputs[missing]
    with pytest.raises(RuntimeError, match=rf"{missing}: required|missing required input\(s\) \['{missing}'\]"):
        grpc_responses(triton.grpc_url, model, inputs, timeout=30)


@pytest.mark.parametrize("model, name", [("ensemble", "text_input"), ("tensorrt_llm_bls", "text_input"),
                                         ("preprocessing", "QUERY")])
def test_an_oversized_prompt_is_refused_before_it_is_tokenized(served, model, name):
    triton = served[0]
    text = "word " * 2_000_000  # 10 MB: tokenizing it takes many seconds and GBs on this machine
    inputs = ({"QUERY": np.array([[text]], dtype=object), "REQUEST_OUTPUT_LEN": np.array([[8]], np.int32)}
              if model == "preprocessing" else _inputs(text, False))
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=rf"{name}: 10000000 bytes exceed the limit of \d+ bytes \(at most 4096 "
                                           r"prompt tokens"):
        grpc_responses(triton.grpc_url, model, inputs, timeout=60)
    assert time.monotonic() - started < 10


def test_a_prompt_over_the_token_limit_is_400_through_openai(served):
    _, frontend, _ = served
    client = openai.OpenAI(base_url=frontend.base_url, api_key="unused", max_retries=0, timeout=60)
    for prompt in ("hello " * 10_000, "word " * 2_000_000):  # over the token limit; over the byte cap too
        with pytest.raises(openai.BadRequestError) as info:
            client.completions.create(model=MODEL, prompt=prompt, max_tokens=4)
        assert re.search(r"(input_ids|text_input): \d+ (tokens|bytes) exceed the .*limit of \d+",
                         info.value.body["message"]), info.value.body

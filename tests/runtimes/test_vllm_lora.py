"""LoRA adapters on the vllm runtime: model.json's enable_lora / max_lora_rank / max_loras and multi_lora.json in
the spelling of Triton's vLLM backend (r26.01, tests/fixtures/nvidia/vllm_backend-r26.01.json: lora_setup,
lora_verify), served by its test double (tests/doubles/vllm, which applies the adapters with PEFT); the adapter is
chosen by `lora_name` in sampling_parameters, and by the OpenAI `model` through tritongen's frontend. An unknown
adapter gets the backend's own error, and the server serves on."""

from __future__ import annotations

import json

import pytest

from streaming_text import grpc_responses
from tritongen.runtimes.vllm.dialect import DIALECT
from vllm_double import backends_with_double, render_with_double, start

pytestmark = pytest.mark.integration
MODEL = "tensorrt_llm"
ADAPTERS = ("alpha", "beta", "gamma")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from tritongen.demo.adapters import make_demo_adapters
    from tritongen.demo.model import make_demo_model

    tmp = tmp_path_factory.mktemp("vllm-lora")
    model = make_demo_model(tmp / "tiny-llama")
    paths = make_demo_adapters(model, len(ADAPTERS))
    adapters = [{"name": n, "path": str(p)} for n, p in zip(ADAPTERS, paths)]
    repo = render_with_double(tmp, model, **{"model.adapters": adapters})
    server = start(repo, tmp / "tritonserver.log", backends_with_double(tmp / "backends"), itl_ms=0)
    server.paths = paths
    yield server
    server.stop()


def _text(served, prompt: str, **sampling) -> str:
    inputs = {name: value for name, _, value in
              DIALECT.request_inputs(prompt, 12, stream=False, temperature=0, min_tokens=12, **sampling)}
    (whole,) = grpc_responses(served.grpc_url, MODEL, inputs)
    return whole.as_numpy("text_output")[0].decode("utf-8")


def test_model_json_and_multi_lora_json_in_the_backends_spelling(served):
    version = served.repository / MODEL / "1"
    engine = json.loads((version / "model.json").read_text())
    # Ranks 4, 8, 4: the largest, 8, is one of vLLM's max_lora_rank values; every adapter fits one batch.
    assert (engine["enable_lora"], engine["max_lora_rank"], engine["max_loras"]) == (True, 8, 3)
    loras = json.loads((version / "multi_lora.json").read_text())
    assert list(loras.items()) == [(n, str(p)) for n, p in zip(ADAPTERS, served.paths)]  # task ids 1, 2, 3


def test_lora_name_chooses_the_adapter(served):
    texts = [_text(served, "Once upon")] + [_text(served, "Once upon", lora_name=n) for n in ADAPTERS]
    assert len(set(texts)) == len(texts), texts
    assert _text(served, "Once upon", lora_name="beta") == texts[2]


def test_an_unknown_adapter_gets_the_backends_error_and_the_server_serves_on(served):
    with pytest.raises(RuntimeError) as err:
        _text(served, "Hi", lora_name="delta")
    assert "LoRA delta is not supported, we currently support ['alpha', 'beta', 'gamma']" in str(err.value)
    assert _text(served, "Once upon", lora_name="alpha")


def test_openai_model_is_the_adapter(served):
    openai = pytest.importorskip("openai")
    from tritongen.frontend.server import FrontendServer
    from tritongen.plan.frontend import FrontendPlan

    config = FrontendPlan.read(served.repository).model_copy(update={"port": 0})
    with FrontendServer(config, served.grpc_url) as frontend:
        client = openai.OpenAI(base_url=frontend.base_url, api_key="unused", max_retries=0, timeout=120)
        models = client.models.list().data
        assert [m.id for m in models][1:] == list(ADAPTERS) and models[2].parent == models[0].id
        text = client.completions.create(model="gamma", prompt="Once upon", max_tokens=12, temperature=0,
                                         extra_body={"min_tokens": 12}).choices[0].text
        assert text == _text(served, "Once upon", lora_name="gamma")
        with pytest.raises(openai.NotFoundError):
            client.completions.create(model="delta", prompt="Hi", max_tokens=4)

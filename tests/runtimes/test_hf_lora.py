"""LoRA adapters on the hf runtime, on a real tritonserver: the demo model with 3 adapters made locally with PEFT.

The served greedy tokens of each adapter (chosen by `lora_task_id`) equal PEFT's own `generate()` for that adapter,
token for token, alone and with requests for every adapter and the base in flight at once (one step holds them
all: the model's step metric says so). The four references differ from each other, so a served model that swaps
or ignores adapters fails. The task id reaches the model through the BLS (native and python) and the ensemble;
an unknown id is an error naming `lora_task_id` and the known ids, and the server serves on.
"""

from __future__ import annotations

import concurrent.futures
import urllib.request

import numpy as np
import pytest
import yaml

from streaming_text import ROOT, grpc_responses, start_server

pytestmark = pytest.mark.integration

PROMPT = [1, 40, 41, 42, 43, 44]
NEW = 12
ADAPTERS = ("alpha", "beta", "gamma")


@pytest.fixture(scope="module")
def lora_model(tmp_path_factory):
    from tritongen.demo.adapters import make_demo_adapters
    from tritongen.demo.model import make_demo_model

    model = make_demo_model(tmp_path_factory.mktemp("lora") / "tiny-llama")
    return model, make_demo_adapters(model, len(ADAPTERS))


@pytest.fixture(scope="module")
def references(lora_model):
    """PEFT's greedy tokens for the base (task id 0) and each adapter (task ids 1..3)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model_dir, paths = lora_model
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    peft = PeftModel.from_pretrained(base, str(paths[0]), adapter_name=ADAPTERS[0])
    for name, path in zip(ADAPTERS[1:], paths[1:]):
        peft.load_adapter(str(path), adapter_name=name)
    peft.eval()
    out = {}
    ids = torch.tensor([PROMPT])
    for task_id, name in enumerate(("__base__", *ADAPTERS)):
        with torch.no_grad():
            tokens = peft.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW,
                                   min_new_tokens=NEW, do_sample=False, adapter_names=[name])
        out[task_id] = tokens[0, len(PROMPT):].tolist()
    return out


@pytest.fixture(scope="module", params=["native", "python"])
def server(request, lora_model, tmp_path_factory):
    from specs import render_spec

    model_dir, paths = lora_model
    data = yaml.safe_load((ROOT / "examples" / "tiny-cpu.yaml").read_text())
    data["model"].update(checkpoint=str(model_dir),
                         adapters=[{"name": n, "path": str(p)} for n, p in zip(ADAPTERS, paths)])
    data["serving"].update(bls_instances=1, bls=request.param)
    folder = tmp_path_factory.mktemp(f"lora-{request.param}")
    spec = folder / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    plan = render_spec(spec, folder / "repo")
    assert plan.bls_backend == request.param
    server = start_server(folder / "repo", folder / "tritonserver.log")
    yield server
    server.stop()


def _tokens(server, task_id: int | None) -> list[int]:
    inputs = {"input_ids": np.array([PROMPT], np.int32), "input_lengths": np.array([[len(PROMPT)]], np.int32),
              "request_output_len": np.array([[NEW]], np.int32), "exclude_input_in_output": np.array([[True]]),
              "min_tokens": np.array([[NEW]], np.int32)}
    if task_id is not None:
        inputs["lora_task_id"] = np.array([[task_id]], np.uint64)
    responses = grpc_responses(server.grpc_url, "tensorrt_llm", inputs)
    return [int(t) for r in responses for t in r.as_numpy("output_ids").reshape(-1)]


def _text(server, model: str, task_id: int) -> str:
    inputs = {"text_input": np.array([["x"]], object), "max_tokens": np.array([[NEW]], np.int32),
              "min_tokens": np.array([[NEW]], np.int32), "lora_task_id": np.array([[task_id]], np.uint64),
              "stream": np.array([[True]])}
    responses = grpc_responses(server.grpc_url, model, inputs)
    return "".join(r.as_numpy("text_output").reshape(-1)[0].decode() for r in responses)


def _step_max(server) -> int:
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    return max(int(float(line.split()[-1])) for line in text.splitlines()
               if line.startswith("tritongen_llm_step_requests_max"))


def test_the_references_differ(references):
    assert len({tuple(tokens) for tokens in references.values()}) == 1 + len(ADAPTERS), references


def test_each_adapter_alone_equals_peft_generate(server, references):
    assert _tokens(server, None) == references[0]
    for task_id, expected in references.items():
        assert _tokens(server, task_id) == expected, f"lora_task_id {task_id}"


def test_all_adapters_and_the_base_in_one_batch_equal_peft_generate(server, references):
    order = [0, 1, 2, 3] * 3
    # Each adapter is asked 3 times, so a step of 4 or more requests held two adapters: mixed, not one adapter at a
    # time. On a loaded host the 12 requests may arrive too spread to meet in a step: up to 3 rounds.
    for _ in range(3):
        with concurrent.futures.ThreadPoolExecutor(len(order)) as pool:
            got = list(pool.map(lambda task_id: _tokens(server, task_id), order))
        for task_id, tokens in zip(order, got):
            assert tokens == references[task_id], f"lora_task_id {task_id} in a mixed batch"
        if _step_max(server) >= 4:
            break
    assert _step_max(server) >= 4  # the requests shared steps, not one adapter at a time


def test_the_task_id_goes_through_the_bls_and_the_ensemble(server, references):
    texts = {model: [_text(server, model, task_id) for task_id in references]
             for model in ("tensorrt_llm_bls", "ensemble")}
    assert texts["tensorrt_llm_bls"] == texts["ensemble"]
    assert len(set(texts["ensemble"])) == len(references), texts  # each adapter's text is its own


def test_an_unknown_task_id_is_refused_and_the_server_serves_on(server, references):
    with pytest.raises(RuntimeError) as err:
        _tokens(server, 9)
    message = str(err.value)
    assert "lora_task_id: 9 is not a LoRA adapter of this deployment; known ids: 0 (the base model), 1 (alpha), " \
           "2 (beta), 3 (gamma)" in message, message
    with pytest.raises(RuntimeError, match="lora_task_id: 7 is not a LoRA adapter"):
        _text(server, "ensemble", 7)
    assert _tokens(server, 2) == references[2]


@pytest.fixture(scope="module")
def client(server):
    openai = pytest.importorskip("openai")
    from tritongen.frontend.server import FrontendServer
    from tritongen.plan.frontend import FrontendPlan

    config = FrontendPlan.read(server.repository).model_copy(update={"port": 0})
    with FrontendServer(config, server.grpc_url) as frontend:
        yield openai.OpenAI(base_url=frontend.base_url, api_key="unused", max_retries=0, timeout=120)


def test_openai_model_names_an_adapter(server, client, lora_model):
    import openai

    _, paths = lora_model
    models = client.models.list().data
    assert [m.id for m in models] == ["tiny-cpu", *ADAPTERS]
    assert (models[0].root, getattr(models[0], "parent", None)) == ("tiny-cpu", None)
    assert [(m.parent, m.root) for m in models[1:]] == [("tiny-cpu", str(p)) for p in paths]
    assert client.models.retrieve("beta").parent == "tiny-cpu"
    texts = [client.completions.create(model=name, prompt="x", max_tokens=NEW, temperature=0,
                                       extra_body={"min_tokens": NEW}).choices[0].text
             for name in ("tiny-cpu", *ADAPTERS)]
    assert texts == [_text(server, "ensemble", task_id) for task_id in range(len(ADAPTERS) + 1)]
    with pytest.raises(openai.NotFoundError) as err:
        client.completions.create(model="delta", prompt="x", max_tokens=4)
    assert err.value.code == "model_not_found" and "delta" in err.value.message

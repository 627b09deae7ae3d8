"""The hf model's batched LoRA (tritongen.served.hf_adapters) without a server: every LoRA layer's output, for a
step whose tokens belong to different adapters and the base, equals PEFT's own mixed-adapter forward for the same
adapter per token; a step that uses some adapters gathers just those; a base-only step is the base model; an
adapter PEFT runs through a variant (DoRA) keeps PEFT's path and its results."""

from __future__ import annotations

import pytest
import torch

ADAPTERS = ("alpha", "beta", "gamma")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from tritongen.demo.adapters import make_demo_adapters
    from tritongen.demo.model import make_demo_model

    model = make_demo_model(tmp_path_factory.mktemp("adapters") / "tiny-llama")
    return model, make_demo_adapters(model, len(ADAPTERS))


def _base(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def _reference(model_dir, paths):
    """PEFT's model with the adapters, whose mixed-adapter forward takes one adapter name per batch row."""
    from peft import PeftModel

    peft = PeftModel.from_pretrained(_base(model_dir), str(paths[0]), adapter_name=ADAPTERS[0])
    for name, path in zip(ADAPTERS[1:], paths[1:]):
        peft.load_adapter(str(path), adapter_name=name)
    return peft.eval()


def _served(model_dir, paths):
    from tritongen.served.hf_adapters import Adapters

    model = _base(model_dir)
    return model, Adapters(model, {k: (n, str(p)) for k, (n, p) in enumerate(zip(ADAPTERS, paths), 1)})


def _logits(model, adapters, ids, names):
    """Every token as its own sequence of one (rows of [T, 1]): the packed order the served layers flatten to."""
    adapters.begin_step(names)
    with torch.no_grad():
        return model(input_ids=ids[:, None]).logits[:, 0]


def _peft_logits(peft, ids, names):
    with torch.no_grad():
        return peft(input_ids=ids[:, None], adapter_names=names).logits[:, 0]


@pytest.mark.parametrize("names", [
    ["__base__", "alpha", "beta", "gamma"] * 4,          # all adapters and the base: no gather
    ["beta", "__base__", "gamma", "beta", "gamma"],       # two of three: the gather path
    ["alpha"] * 6,                                        # one adapter for the whole step
], ids=["all", "some", "one"])
def test_each_token_gets_its_own_adapter_as_pefts_mixed_forward(demo, names):
    model_dir, paths = demo
    model, adapters = _served(model_dir, paths)
    assert adapters.batched
    peft = _reference(model_dir, paths)
    ids = torch.arange(40, 40 + len(names))
    got, want = _logits(model, adapters, ids, names), _peft_logits(peft, ids, names)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    # and the adapters matter: the base's logits differ at every adapter token
    base = _peft_logits(peft, ids, ["__base__"] * len(names))
    for i, name in enumerate(names):
        assert torch.equal(got[i], base[i]) == (name == "__base__"), (i, name)


def test_a_base_step_is_the_base_model_and_padding_tokens_are_base(demo):
    model_dir, paths = demo
    model, adapters = _served(model_dir, paths)
    ids = torch.arange(50, 58)
    base = _peft_logits(_reference(model_dir, paths), ids, ["__base__"] * 8)
    assert torch.equal(_logits(model, adapters, ids, ["__base__"] * 8), base)
    # names for the first 3 tokens only: the rest are padding, run as the base
    got = _logits(model, adapters, ids, ["gamma", "alpha", "beta"])
    assert torch.equal(got[3:], base[3:])
    assert not torch.equal(got[:3], base[:3])


def test_an_adapter_with_a_lora_bias_keeps_pefts_path_and_its_results(demo, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    from tritongen.served.hf_adapters import Adapters

    model_dir, paths = demo
    model = get_peft_model(_base(model_dir), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                        lora_bias=True, init_lora_weights=False))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.3)
    model.save_pretrained(tmp_path / "biased")
    served = _base(model_dir)
    adapters = Adapters(served, {1: ("alpha", str(paths[0])), 2: ("biased", str(tmp_path / "biased"))})
    assert not adapters.batched
    peft = PeftModel.from_pretrained(_base(model_dir), str(paths[0]), adapter_name="alpha")
    peft.load_adapter(str(tmp_path / "biased"), adapter_name="biased")
    peft.eval()
    names = ["biased", "__base__", "alpha", "biased"]
    ids = torch.arange(60, 64)
    # PEFT's path sees the step packed as one row ([1, T]), as continuous batching runs it
    adapters.begin_step(names)
    with torch.no_grad():
        got = served(input_ids=ids[None]).logits[0]
        want = torch.stack([peft(input_ids=ids[None, : i + 1], adapter_names=[name]).logits[0, i]
                            for i, name in enumerate(names)])
    # the first token has no earlier tokens, so its logits are PEFT's for that adapter alone; the later ones see
    # earlier tokens' keys and values made by other adapters (next test)
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-4)
    assert not torch.equal(got[0], want[1])


def test_pefts_path_and_the_batched_path_agree_on_a_packed_step(demo, monkeypatch):
    from tritongen.served import hf_adapters

    model_dir, paths = demo
    names = ["gamma", "__base__", "alpha", "beta", "alpha", "gamma", "__base__"]
    ids = torch.arange(70, 70 + len(names))
    steps = {}
    for batched in (True, False):
        if not batched:
            monkeypatch.setattr(hf_adapters, "_plain", lambda module: False)
        model, adapters = _served(model_dir, paths)
        assert adapters.batched == batched
        adapters.begin_step(names)
        with torch.no_grad():
            steps[batched] = model(input_ids=ids[None]).logits[0]
    torch.testing.assert_close(steps[True], steps[False], rtol=1e-4, atol=1e-4)

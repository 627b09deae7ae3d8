"""The planner sizes the KV budget: the deployment's need, bounded by the machine's memory, and says how."""

from __future__ import annotations

import pytest
import yaml

from tritongen.errors import SpecError
from tritongen.plan.kv import size_kv
from tritongen.spec import parse_spec

MIB = 1 << 20


def _spec(tiny_model, **serving):
    """A spec as written from `validate --explain` defaults: hf on CPU, nothing else set (plus `serving`)."""
    data = {"version": 1, "name": "mine", "runtime": "hf", "model": {"checkpoint": str(tiny_model)},
            "placement": {"device": "cpu"}}
    if serving:
        data["serving"] = serving
    return parse_spec(data)


def test_default_budget_is_batch_times_sequence_rounded_to_blocks(tiny_model):
    sized = size_kv(_spec(tiny_model, kv_cache={"block_size": 32}), tiny_model, 8, 250, available=16 << 30)
    assert sized.tokens == 2016  # 8 x 250 = 2000, up to whole blocks of 32 (63 blocks)
    assert sized.how.startswith("2016 = 8 sequences (max_batch_size) x max_seq_len 250, rounded up to blocks of 32")
    assert "host memory (RAM on placement.device cpu" in sized.how


def test_plan_of_explained_defaults_on_cpu_is_bounded_and_says_how(tiny_model, tmp_path):
    from tritongen.plan import plan_from_file

    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "name": "mine", "runtime": "hf",
                                    "model": {"checkpoint": str(tiny_model)}, "placement": {"device": "cpu"}}))
    _, plan = plan_from_file(path)
    assert plan.kv_tokens == 8 * 256  # not None: the runtime no longer sizes it from 0.9 of free host memory
    assert plan.kv_sizing.startswith("2048 = 8 sequences")


def test_small_host_caps_the_default_budget(tiny_model):
    # The tiny model's KV is 512 bytes a token; a host with little free memory holds fewer than the 2048 needed.
    spec = _spec(tiny_model)
    unbounded = size_kv(spec, tiny_model, 8, 256, available=1 << 34)
    from tritongen.placement.memory import load_memory_model

    fixed = load_memory_model(tiny_model).host_fixed_bytes_per_instance
    sized = size_kv(spec, tiny_model, 8, 256, available=fixed + int(1000 * 512 / 0.9) + 512)
    assert unbounded.tokens == 2048 and sized.tokens == 992  # 1,000 tokens rounded down to blocks of 32
    assert "capped to 992 by host memory" in sized.how


def test_an_explicit_budget_the_host_cannot_hold_is_refused_naming_the_field(tiny_model):
    with pytest.raises(SpecError) as err:
        size_kv(_spec(tiny_model, kv_cache={"max_tokens": 10_000_000}), tiny_model, 8, 256, available=512 * MIB)
    assert err.value.problems[0].startswith("serving.kv_cache.max_tokens: 10000000 tokens")
    assert "lower it to at most" in err.value.problems[0]


def test_a_host_without_room_for_one_sequence_is_refused_naming_the_fraction(tiny_model):
    with pytest.raises(SpecError) as err:
        size_kv(_spec(tiny_model), tiny_model, 8, 256, available=1 * MIB)
    assert err.value.problems[0].startswith("serving.kv_cache.free_gpu_mem_fraction: not even one sequence")


def test_cli_refuses_an_unfittable_budget_with_exit_2(tiny_model, tmp_path, capsys):
    from tritongen.cli import main

    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "name": "big", "runtime": "hf",
                                    "model": {"checkpoint": str(tiny_model)}, "placement": {"device": "cpu"},
                                    "serving": {"kv_cache": {"max_tokens": 10 ** 12}}}))
    assert main(["validate", str(path)]) == 2
    assert "error: serving.kv_cache.max_tokens: 1000000000000 tokens" in capsys.readouterr().err


def test_gpu_without_inventory_is_bounded_by_the_need_and_says_the_runtime_caps_it(tiny_model):
    spec = parse_spec({"version": 1, "name": "g", "runtime": "hf", "model": {"checkpoint": str(tiny_model)},
                       "placement": {"device": "gpu"}})
    sized = size_kv(spec, tiny_model, 16, 1024)
    assert sized.tokens == 16 * 1024 and "the runtime's free_gpu_mem_fraction 0.9 caps it at load" in sized.how


def test_prefix_reuse_on_gpu_lifts_the_batch_bound_but_not_on_cpu(tiny_model):
    data = {"version": 1, "name": "g", "runtime": "hf", "model": {"checkpoint": str(tiny_model)},
            "serving": {"kv_cache": {"enable_reuse": True}}}
    gpu = size_kv(parse_spec({**data, "placement": {"device": "gpu"}}), tiny_model, 16, 1024)
    cpu = size_kv(parse_spec({**data, "placement": {"device": "cpu"}}), tiny_model, 16, 1024, available=16 << 30)
    assert gpu.tokens is None and "enable_reuse" in gpu.how
    assert cpu.tokens == 16 * 1024


def test_a_runtime_that_sizes_its_batch_from_the_budget_gets_none(tiny_model):
    spec = parse_spec({"version": 1, "name": "s", "runtime": "synthetic", "model": {"checkpoint": str(tiny_model)},
                       "placement": {"device": "cpu"}})
    assert size_kv(spec, tiny_model, 8, 256).tokens is None


def test_explain_says_what_the_fraction_applies_to_on_cpu_and_gpu():
    from tritongen.spec import explain

    doc = {path: text for path, _, _, text in explain()}["serving.kv_cache.free_gpu_mem_fraction"]
    assert "placement.device gpu: of the GPU's memory" in doc and "placement.device cpu: of the host memory" in doc

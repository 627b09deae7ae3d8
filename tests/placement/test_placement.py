"""Placement: MIG and full-GPU server groups, KV budgets, refusals, and properties over random inventories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tritongen.errors import SpecError, TritongenError
from tritongen.placement.inventory import CATALOGUE, inventory_from_mapping, load_inventory
from tritongen.placement.memory import QUANT_WEIGHT_BYTES, MemoryModel, ModelShape, load_memory_model, memory_from_hf_config
from tritongen.placement import place

FIXTURES = Path(__file__).parents[1] / "fixtures"
ENGINE_8B = FIXTURES / "models" / "llama-3.1-8b-bf16-tp1-engine"
ENGINE_70B = FIXTURES / "models" / "llama-3.1-70b-fp8-tp4-engine"


def _used_bytes(device) -> int:
    """What a device's instances take: weights, runtime headroom and their KV budget each."""
    return device.instances * (device.weight_bytes + device.headroom_bytes + device.kv_bytes)


def inventory(name: str):
    return load_inventory(str(FIXTURES / "inventories" / name))


def _70b_bf16() -> MemoryModel:
    config = json.loads((FIXTURES / "models" / "llama-3.1-8b-hf" / "config.json").read_text())
    return memory_from_hf_config({**config, "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64,
                                  "intermediate_size": 28672})


def test_8b_lands_on_3g_and_2g_and_is_refused_on_1g():
    plan = place(inventory("h200-all-balanced.yaml"), load_memory_model(ENGINE_8B), max_seq_len=8192)
    verdicts = {d.profile: (d.fits, d.reason) for d in plan.devices}
    assert verdicts == {
        "3g.71gb": (True, ""), "2g.35gb": (True, ""),
        "1g.18gb": (False, "needs 17.97 GiB for 1 instance at max_seq_len 8192, has 16.00 GiB")}
    mig3, mig2 = plan.server_groups
    assert (mig3.name, mig3.env, mig3.gpu_metrics, mig3.ports, mig3.world_size, mig3.gpu_device_ids) == (
        "gpu0-mig1", {"CUDA_VISIBLE_DEVICES": "MIG-5a9c1e3b-7d2f-5e8a-9c4b-1f6d3a8e2c70"}, False,
        (8000, 8001, 8002), 1, "0")
    assert (mig2.name, mig2.mig_profile, mig2.ports) == ("gpu0-mig5", "2g.35gb", (8010, 8011, 8012))
    # The bigger slice gets the bigger absolute budget; both hold whole 32-token blocks and at least one sequence.
    assert mig3.kv_tokens > mig2.kv_tokens >= 8192
    assert mig3.kv_tokens % 32 == mig2.kv_tokens % 32 == 0
    assert (mig3.max_batch_size, mig2.max_batch_size) == (mig3.kv_tokens // 8192, mig2.kv_tokens // 8192)


def test_table_of_the_balanced_layout():
    plan = place(inventory("h200-all-balanced.yaml"), load_memory_model(ENGINE_8B), max_seq_len=8192)
    assert plan.to_table() == """\
device                  memory     fits  inst  weights/inst  kv tokens/inst  batch@8192  server group  reason
GPU 0 MIG 1 (3g.71gb)   66.50 GiB  yes   1     14.96 GiB     365,952         44          gpu0-mig1
GPU 0 MIG 5 (2g.35gb)   32.50 GiB  yes   1     14.96 GiB     115,264         14          gpu0-mig5
GPU 0 MIG 13 (1g.18gb)  16.00 GiB  no    0     -             -               -           -             needs 17.97 GiB for 1 instance at max_seq_len 8192, has 16.00 GiB
GPU 0 MIG 14 (1g.18gb)  16.00 GiB  no    0     -             -               -           -             needs 17.97 GiB for 1 instance at max_seq_len 8192, has 16.00 GiB

server group  devices                CUDA_VISIBLE_DEVICES                      http/grpc/metrics  world  gpu metrics
gpu0-mig1     GPU 0 MIG 1 (3g.71gb)  MIG-5a9c1e3b-7d2f-5e8a-9c4b-1f6d3a8e2c70  8000/8001/8002     1      off
gpu0-mig5     GPU 0 MIG 5 (2g.35gb)  MIG-8e2d4f6a-1c3b-5a7e-9d8c-4b2f6e1a3d95  8010/8011/8012     1      off
"""


def test_to_dict_is_json():
    plan = place(inventory("h200-all-balanced.yaml"), load_memory_model(ENGINE_8B), max_seq_len=8192)
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["server_groups"][0]["env"] == {"CUDA_VISIBLE_DEVICES": "MIG-5a9c1e3b-7d2f-5e8a-9c4b-1f6d3a8e2c70"}
    assert [d["fits"] for d in data["devices"]] == [True, True, False, False]
    assert (data["tp"], data["max_seq_len"], data["kv_fraction"]) == (1, 8192, 0.9)


def test_70b_fp8_tp4_is_refused_on_mig():
    with pytest.raises(SpecError) as info:
        place(inventory("h200-all-balanced.yaml"), load_memory_model(ENGINE_70B), max_seq_len=8192)
    assert str(info.value) == (
        "engine.tp_size: tp_size 4 x pp_size 1 cannot run on MIG instances (no P2P or NCCL between them); build the "
        "engine with tp_size 1 and pp_size 1 to run one replica per MIG instance, or disable MIG on 4 GPUs "
        "(nvidia-smi -i <index> -mig 0)")


def test_70b_fp8_tp4_on_full_gpus():
    plan = place(inventory("a100-80gb-x8.yaml"), load_memory_model(ENGINE_70B), max_seq_len=8192)
    first, second = plan.server_groups
    assert (first.name, first.env, first.world_size, first.gpu_device_ids, first.gpu_metrics) == (
        "gpu0-1-2-3", {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 4, "0,1,2,3", True)
    assert (second.gpu_indices, second.ports) == ((4, 5, 6, 7), (8010, 8011, 8012))
    assert first.max_batch_size == 128  # the KV budget holds more; the engine's max_batch_size caps it
    assert all(d.fits and d.server_group in ("gpu0-1-2-3", "gpu4-5-6-7") for d in plan.devices)


def test_70b_tp4_on_four_full_gpus_only():
    plan = place(inventory("a100-80gb-x8.yaml"), load_memory_model(ENGINE_70B), max_seq_len=8192,
                 gpu_ids=[0, 1, 2, 3, 4, 5])
    assert [g.name for g in plan.server_groups] == ["gpu0-1-2-3"]
    assert [(d.label, d.reason) for d in plan.devices if not d.fits] == [
        ("GPU 4", "left over: server groups take 4 GPUs each"), ("GPU 5", "left over: server groups take 4 GPUs each")]


def test_mixed_node_tp1_uses_mig_and_full_gpus():
    plan = place(inventory("mixed-h200-node.yaml"), load_memory_model(ENGINE_8B), max_seq_len=8192,
                 instances_per_device=2)
    assert [(g.name, g.cuda_visible_devices, g.gpu_metrics, g.instances, g.gpu_device_ids)
            for g in plan.server_groups] == [
        ("gpu0-mig0", "MIG-1e5a9c3d-7b2f-5a8e-9c4d-2f6b8e0a1c37", False, 2, "0;0"),
        ("gpu0-mig1", "MIG-9d3b7f1a-5e8c-5b2d-a4f6-8c1e3a7d5b90", False, 2, "0;0"),
        ("gpu1", "1", True, 2, "0;0"), ("gpu2", "2", True, 2, "0;0"), ("gpu3", "3", True, 2, "0;0")]


def test_mixed_node_tp4_not_enough_full_gpus():
    with pytest.raises(SpecError) as info:
        place(inventory("mixed-h200-node.yaml"), load_memory_model(ENGINE_70B), max_seq_len=8192)
    assert str(info.value) == (
        "engine.tp_size: tp_size 4 x pp_size 1 needs 4 full GPUs but 3 are available (GPU 0 is in MIG mode and "
        "cannot join a tensor-parallel group); add GPUs, disable MIG, or build the engine with a smaller tp_size")


def test_tp_group_mixing_mig_and_full_gpus():
    with pytest.raises(SpecError) as info:
        place(inventory("mixed-h200-node.yaml"), load_memory_model(ENGINE_70B), max_seq_len=8192,
              gpu_ids=[0, 1, 2, 3])
    assert str(info.value) == (
        "placement.gpu_ids: GPU 0 is in MIG mode and GPUs 1, 2, 3 not; a tensor-parallel group cannot mix MIG "
        "instances and full GPUs; list only full GPUs, or disable MIG on GPU 0")


def test_8b_fits_no_1g_slice_names_the_profile():
    with pytest.raises(SpecError) as info:
        place(inventory("h200-7x1g.yaml"), load_memory_model(ENGINE_8B), max_seq_len=8192)
    assert str(info.value) == (
        "placement: the model fits no device: it needs 17.97 GiB for 1 instance at max_seq_len 8192 (14.96 GiB "
        "weights + 1.91 GiB runtime per instance), the largest device is GPU 0 MIG 0 (1g.18gb) with 16.00 GiB; use a "
        "MIG profile of at least 1g.35gb (H200 141GB), or a full GPU")


def test_70b_bf16_names_the_number_of_full_gpus():
    with pytest.raises(SpecError) as info:
        place(inventory("h100-80gb-2x3g.json"), _70b_bf16(), max_seq_len=8192)
    assert str(info.value).endswith(
        "the largest device is GPU 0 MIG 1 (3g.40gb) with 39.50 GiB; build the engine with tp_size 2 and run it on "
        "2 full GPUs (MIG off), or quantise it (engine.quantization)")


def test_too_many_instances_names_how_many_fit():
    with pytest.raises(SpecError, match=r"; lower the instances per device to 2$"):
        place(inventory("h100-80gb-2x3g.json"), load_memory_model(ENGINE_8B), max_seq_len=8192,
              instances_per_device=3)


def test_instances_share_the_device_budget():
    model, node = load_memory_model(ENGINE_8B), inventory("a100-80gb-x8.yaml")
    one = place(node, model, max_seq_len=8192, gpu_ids=[0]).devices[0]
    two = place(node, model, max_seq_len=8192, gpu_ids=[0], instances_per_device=2).devices[0]
    assert two.instances == 2 and two.kv_tokens < one.kv_tokens // 2
    assert _used_bytes(two) <= two.memory_bytes


def test_mig_without_uuid_leaves_selection_to_the_target():
    model = memory_from_hf_config({**json.loads((FIXTURES / "models" / "llama-3.1-8b-hf" / "config.json").read_text()),
                                   "hidden_size": 2048, "num_hidden_layers": 16, "intermediate_size": 8192,
                                   "tie_word_embeddings": True})  # Llama-3.2-1B shape
    plan = place(inventory("h200-7x1g.yaml"), model, max_seq_len=8192)
    assert len(plan.server_groups) == 7
    assert all(g.cuda_visible_devices is None and g.env == {} for g in plan.server_groups)
    assert "(set by the deployment target)" in plan.to_table()


def test_smi_inventory_places_on_mig_and_full_gpu():
    plan = place(inventory("h100-node.nvidia-smi-L.txt"), load_memory_model(ENGINE_8B), max_seq_len=4096)
    assert [g.name for g in plan.server_groups] == ["gpu0-mig0", "gpu1"]
    assert [d.reason for d in plan.devices if not d.fits] == [
        "needs 17.42 GiB for 1 instance at max_seq_len 4096, has 9.75 GiB"] * 2


def test_longer_sequences_than_the_engine_supports():
    with pytest.raises(SpecError) as info:
        place(inventory("a100-80gb-x8.yaml"), load_memory_model(ENGINE_8B), max_seq_len=16384)
    assert str(info.value) == (f"engine.max_seq_len: 16384 is more than the engine in {ENGINE_8B / 'config.json'} "
                               "was built for (8192); lower it or rebuild the engine")


def test_no_device_at_all():
    node = inventory_from_mapping({"gpus": [{"name": "NVIDIA H200", "mig": []}]})
    with pytest.raises(SpecError) as info:
        place(node, load_memory_model(ENGINE_8B), max_seq_len=8192)
    assert str(info.value) == ("placement: no device to run on (GPU 0 has MIG on but no MIG instances); create MIG "
                               "instances, disable MIG, or list other GPUs")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"gpu_ids": [3]}, "placement.gpu_ids: GPU 3 not in the inventory ({source}); use indices from 0"),
    ({"base_ports": (8000, 8001, 8010)},
     "base_ports: (8000, 8001, 8010) must be three distinct ports less than 10 apart; use e.g. 8000,8001,8002"),
    ({"base_ports": (65530, 65531, 65532)},
     "base_ports: 2 server groups from (65530, 65531, 65532) run past port 65535; start from lower ports"),
])
def test_bad_arguments(kwargs, message):
    node = inventory("h200-all-balanced.yaml")
    with pytest.raises(SpecError) as info:
        place(node, load_memory_model(ENGINE_8B), max_seq_len=8192, **kwargs)
    assert str(info.value) == message.format(source=node.source)


# ---------------------------------------------------------------------------------------------------- properties

_NAMES = {"H200 141GB": "NVIDIA H200", "H100 94GB": "NVIDIA H100 NVL", "H100 80GB": "NVIDIA H100 80GB HBM3",
          "A100 80GB": "NVIDIA A100-SXM4-80GB", "A100 40GB": "NVIDIA A100-SXM4-40GB"}


@st.composite
def inventories(draw):
    gpus = []
    for _ in range(draw(st.integers(1, 8))):
        product = draw(st.sampled_from(CATALOGUE))
        entry = {"name": _NAMES[product.key]}
        if draw(st.booleans()):
            # Any layout within the profiles' instance limits and the GPU's 7 compute slices.
            layout, slices = [], 0
            for profile in draw(st.lists(st.sampled_from(product.profiles), max_size=7)):
                size = int(profile.name[0])
                if layout.count(profile.name) < profile.max_instances and slices + size <= 7:
                    layout.append(profile.name)
                    slices += size
            entry["mig"] = layout
        gpus.append(entry)
    return inventory_from_mapping({"gpus": gpus})


@st.composite
def models(draw):
    heads = draw(st.sampled_from([8, 16, 32, 64]))
    head_dim = draw(st.sampled_from([64, 128]))
    kv_heads = draw(st.sampled_from([h for h in (1, 2, 4, 8) if heads % h == 0]))
    shape = ModelShape("LlamaForCausalLM", draw(st.integers(1000, 160000)), heads * head_dim,
                       draw(st.integers(1, 96)), heads, kv_heads, head_dim, draw(st.integers(256, 32768)),
                       gated_mlp=draw(st.booleans()), tie_word_embeddings=draw(st.booleans()))
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if heads % t == 0]))
    return MemoryModel("(drawn)", "hf", shape, draw(st.sampled_from(["bfloat16", "float16", "float32"])),
                       draw(st.sampled_from([None, *QUANT_WEIGHT_BYTES])), draw(st.sampled_from([None, "FP8", "INT8"])),
                       tp=tp, pp=draw(st.sampled_from([1, 1, 2])), max_batch_size=draw(st.sampled_from([None, 8, 256])),
                       max_num_tokens=draw(st.sampled_from([512, 8192, 16384])),
                       tokens_per_block=draw(st.sampled_from([16, 32, 64])))


@settings(max_examples=300, deadline=None)
@given(node=inventories(), model=models(), max_seq_len=st.integers(128, 65536), kv_fraction=st.floats(0.05, 1.0),
       instances=st.integers(1, 3))
def test_plans_never_overcommit_and_groups_never_share(node, model, max_seq_len, kv_fraction, instances):
    try:
        plan = place(node, model, max_seq_len=max_seq_len, kv_fraction=kv_fraction, instances_per_device=instances)
    except TritongenError as refusal:
        assert isinstance(refusal, SpecError) and refusal.problems
        return
    for device in plan.devices:
        assert _used_bytes(device) <= device.memory_bytes
        if device.fits:
            assert device.instances == instances and device.kv_tokens >= max_seq_len
            assert device.kv_tokens % model.tokens_per_block == 0 and device.server_group
        else:
            assert device.instances == 0 and device.reason and device.server_group is None
    device_sets = [set(g.devices) for g in plan.server_groups]
    assert sum(map(len, device_sets)) == len(set().union(*device_sets))
    ports = [p for g in plan.server_groups for p in g.ports]
    assert len(ports) == len(set(ports))
    # A full GPU belongs to one server group; MIG groups of one GPU share its index but not their instance.
    full_gpus = [i for g in plan.server_groups if g.mig_profile is None for i in g.gpu_indices]
    mig_gpus = {i for g in plan.server_groups if g.mig_profile is not None for i in g.gpu_indices}
    assert len(full_gpus) == len(set(full_gpus)) and not mig_gpus & set(full_gpus)
    for group in plan.server_groups:
        assert len(group.devices) == model.world_size and group.gpu_metrics == (group.mig_profile is None)
        assert {d.label for d in plan.devices if d.server_group == group.name} == set(group.devices)

"""Inventory: catalogue, inventory files, `nvidia-smi -L` text, and NVML discovery (fake and, on a GPU, real)."""

from __future__ import annotations

import re
import shutil
import sys
import types
from pathlib import Path

import pytest

from tritongen.errors import EnvironmentMissing, SpecError
from tritongen.placement.inventory import (CATALOGUE, GIB, discover_nvml, inventory_from_mapping, load_inventory,
                                 parse_nvidia_smi_list, product_for)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "inventories"


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA H200", "H200 141GB"), ("NVIDIA H200 NVL", "H200 141GB"), ("NVIDIA H100 80GB HBM3", "H100 80GB"),
    ("NVIDIA H100 PCIe", "H100 80GB"), ("NVIDIA H100 NVL", "H100 94GB"), ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
])
def test_product_for_matches_product_names(name, key):
    assert product_for(name).key == key


def test_product_for_unknown_gpu():
    assert product_for("Tesla T4") is None


def test_catalogue_reference_values():
    h200 = product_for("NVIDIA H200")
    assert [(p.name, p.memory_gib, p.sm_count, p.max_instances) for p in h200.profiles if "+" not in p.name] == [
        ("1g.18gb", 16.0, 16, 7), ("1g.35gb", 32.5, 26, 4), ("2g.35gb", 32.5, 32, 3), ("3g.71gb", 66.5, 60, 2),
        ("4g.71gb", 66.5, 64, 1), ("7g.141gb", 140.0, 132, 1)]
    h100 = product_for("NVIDIA H100 80GB HBM3")
    assert (h100.profile("3g.40gb").memory_gib, h100.profile("1g.10gb").sm_count) == (39.5, 16)


@pytest.mark.parametrize("product", CATALOGUE, ids=lambda p: p.key)
def test_catalogue_is_consistent(product):
    # A profile never exceeds the GPU; max instances x compute slices never exceeds the 7 slices of a GPU.
    for profile in product.profiles:
        slices = int(re.match(r"(\d)g\.", profile.name)[1])
        assert profile.memory_gib <= product.memory_gib
        assert profile.max_instances * slices <= 7
    assert product.profiles[-1].name.startswith("7g.")


def test_h200_all_balanced_file():
    inventory = load_inventory(str(FIXTURES / "h200-all-balanced.yaml"))
    (gpu,) = inventory.gpus
    assert (gpu.index, gpu.name, gpu.mig_enabled, gpu.sm_count) == (0, "NVIDIA H200", True, 132)
    assert [(m.mig_index, m.profile, m.memory_bytes / GIB, m.sm_count) for m in gpu.mig_devices] == [
        (1, "3g.71gb", 66.5, 60), (5, "2g.35gb", 32.5, 32), (13, "1g.18gb", 16.0, 16), (14, "1g.18gb", 16.0, 16)]
    assert gpu.mig_devices[0].uuid == "MIG-5a9c1e3b-7d2f-5e8a-9c4b-1f6d3a8e2c70"
    assert gpu.mig_devices[0].label == "GPU 0 MIG 1 (3g.71gb)"


def test_shorthand_profiles_have_no_uuid():
    (gpu,) = load_inventory(str(FIXTURES / "h200-7x1g.yaml")).gpus
    assert [(m.mig_index, m.profile, m.uuid) for m in gpu.mig_devices] == [(i, "1g.18gb", None) for i in range(7)]


def test_json_file():
    (gpu,) = load_inventory(str(FIXTURES / "h100-80gb-2x3g.json")).gpus
    assert [(m.profile, m.memory_bytes) for m in gpu.mig_devices] == [("3g.40gb", int(39.5 * GIB))] * 2


def test_eight_a100_mig_off():
    inventory = load_inventory(str(FIXTURES / "a100-80gb-x8.yaml"))
    assert [g.index for g in inventory.gpus] == list(range(8))
    assert all(not g.mig_enabled and g.mig_devices == () and g.memory_bytes == 80 * GIB for g in inventory.gpus)


def test_mixed_node():
    gpus = load_inventory(str(FIXTURES / "mixed-h200-node.yaml")).gpus
    assert [(g.index, g.mig_enabled, len(g.mig_devices)) for g in gpus] == [(0, True, 2), (1, False, 0),
                                                                           (2, False, 0), (3, False, 0)]


def test_nvidia_smi_list_text():
    inventory = load_inventory(str(FIXTURES / "h100-node.nvidia-smi-L.txt"))
    gpu0, gpu1 = inventory.gpus
    assert gpu0.uuid == "GPU-c08d91cb-2f4e-4b7a-9e1d-5a3c7f9b2e64" and gpu0.mig_enabled
    assert [(m.mig_index, m.profile, m.uuid, m.memory_bytes, m.sm_count) for m in gpu0.mig_devices] == [
        (0, "3g.40gb", "MIG-c788539f-c1ea-5a36-8b4d-9b07d024b1bb", int(39.5 * GIB), 60),
        (3, "1g.10gb", "MIG-b4b2228d-6933-5839-bc0e-41ab9edb61c6", int(9.75 * GIB), 16),
        (4, "1g.10gb", "MIG-3f9e1c5a-7b2d-5e8f-a6c4-9d1b3e7f5a28", int(9.75 * GIB), 16)]
    assert (gpu1.mig_enabled, gpu1.memory_bytes, gpu1.sm_count) == (False, int(79.65 * GIB), 132)


def test_nvidia_smi_list_old_driver_mig_uuid():
    text = ("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f)\n"
            "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0)\n")
    (gpu,) = parse_nvidia_smi_list(text).gpus
    assert gpu.mig_devices[0].uuid == "MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0"


def _spec_error(data) -> str:
    with pytest.raises(SpecError) as info:
        inventory_from_mapping(data)
    return str(info.value)


def test_unknown_profile_is_refused():
    assert _spec_error({"gpus": [{"name": "NVIDIA H100 80GB HBM3", "mig": ["3g.71gb"]}]}) == (
        "gpus.0.mig.0: '3g.71gb' is not a MIG profile of NVIDIA H100 80GB HBM3 (known: 1g.10gb, 1g.10gb+me, "
        "1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb); fix the name, or give memory_gib and sm_count")


def test_too_many_instances_of_a_profile():
    assert _spec_error({"gpus": [{"name": "NVIDIA H200", "mig": ["3g.71gb"] * 3}]}) == (
        "gpus.0.mig: 3 x 3g.71gb but a H200 141GB holds at most 2; fix the MIG layout")


def test_unknown_gpu_needs_memory():
    assert _spec_error({"gpus": [{"name": "Tesla T4"}]}) == (
        "gpus.0: GPU 'Tesla T4' is not in the catalogue; give memory_gib and sm_count for it in an inventory file "
        "(docs/inventory.md)")
    (gpu,) = inventory_from_mapping({"gpus": [{"name": "Tesla T4", "memory_gib": 15, "sm_count": 40}]}).gpus
    assert gpu.memory_bytes == 15 * GIB


def test_uncatalogued_profile_with_numbers():
    (gpu,) = inventory_from_mapping({"gpus": [{"name": "NVIDIA H200", "mig": [
        {"profile": "2g.36gb", "memory_gib": 33, "sm_count": 32}]}]}).gpus
    assert (gpu.mig_devices[0].profile, gpu.mig_devices[0].memory_bytes) == ("2g.36gb", 33 * GIB)


def test_schema_errors_name_the_field():
    assert _spec_error({"gpus": [{"name": "NVIDIA H200", "mig": [{"profile": "1g.18gb", "uuid": "GPU-1"}],
                                  "memroy_gib": 1}]}).splitlines() == [
        "gpus.0.mig.0.uuid: string should match pattern '^MIG-'; see the inventory file format in docs/inventory.md",
        "gpus.0.memroy_gib: extra inputs are not permitted; did you mean `memory_gib`?"]


def test_schema_error_without_close_match():
    assert _spec_error({"gpu": []}).splitlines() == [
        "gpus: field required; see the inventory file format in docs/inventory.md",
        "gpu: extra inputs are not permitted; did you mean `gpus`?"]


def test_repeated_indices():
    assert _spec_error({"gpus": [{"name": "NVIDIA H200", "index": 1}, {"name": "NVIDIA H200", "index": 1}]}) == (
        "gpus: GPU indices repeat ([1, 1]); give every GPU its own index")
    assert _spec_error({"gpus": [{"name": "NVIDIA H200", "mig": [{"profile": "1g.18gb", "index": 2},
                                                                  {"profile": "1g.18gb", "index": 2}]}]}) == (
        "gpus.0.mig: MIG indices repeat ([2, 2]); give every MIG instance its own index")


def test_unrecognised_smi_line(tmp_path):
    path = tmp_path / "smi.txt"
    path.write_text("GPU 0: NVIDIA H200 (UUID: GPU-1)\nNo devices were found\n")
    with pytest.raises(SpecError) as info:
        load_inventory(str(path))
    assert str(info.value) == (f"{path}:2: unrecognised line 'No devices were found'; "
                               "pass the unmodified output of `nvidia-smi -L`")


def test_missing_source():
    with pytest.raises(SpecError) as info:
        load_inventory("/nonexistent/inventory.yaml")
    assert str(info.value) == ("--inventory: /nonexistent/inventory.yaml is not a file; pass 'nvml', an inventory "
                               "YAML/JSON file or saved `nvidia-smi -L` output (formats: docs/inventory.md)")


# ------------------------------------------------------------------------------------------ NVML with a fake pynvml


class _Attributes:
    def __init__(self, sms: int):
        self.multiprocessorCount = sms


def _fake_pynvml(gpus: list[dict], *, init_error: bool = False) -> types.ModuleType:
    """A stand-in for nvidia-ml-py that answers from `gpus`; handles are ("gpu", i) or ("mig", i, slot)."""
    nvml = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    class NVMLError_NotFound(NVMLError):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    nvml.NVMLError, nvml.NVMLError_NotFound, nvml.NVMLError_NotSupported = NVMLError, NVMLError_NotFound, \
        NVMLError_NotSupported
    nvml.NVML_DEVICE_MIG_ENABLE = 1
    nvml.calls = []

    def init():
        nvml.calls.append("init")
        if init_error:
            raise NVMLError("Driver Not Loaded")

    def record(handle):
        return gpus[handle[1]] if handle[0] == "gpu" else gpus[handle[1]]["mig"][handle[2]]

    def mig_mode(handle):
        if "mig_mode" not in gpus[handle[1]]:
            raise NVMLError_NotSupported("Not Supported")
        return gpus[handle[1]]["mig_mode"], gpus[handle[1]]["mig_mode"]

    def mig_handle(handle, slot):
        if slot not in gpus[handle[1]]["mig"]:
            raise NVMLError_NotFound("Not Found")
        return ("mig", handle[1], slot)

    def attributes(handle):
        if record(handle).get("sms") is None:
            raise NVMLError_NotSupported("Not Supported")
        return _Attributes(record(handle)["sms"])

    nvml.nvmlInit = init
    nvml.nvmlSystemGetDriverVersion = lambda: b"590.48.01"  # bytes, as older nvidia-ml-py returns it
    nvml.nvmlShutdown = lambda: nvml.calls.append("shutdown")
    nvml.nvmlDeviceGetCount = lambda: len(gpus)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)
    nvml.nvmlDeviceGetName = lambda h: record(h)["name"]
    nvml.nvmlDeviceGetUUID = lambda h: record(h)["uuid"]
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=record(h)["memory"], free=0, used=0)
    nvml.nvmlDeviceGetAttributes = attributes
    nvml.nvmlDeviceGetMigMode = mig_mode
    nvml.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7 if gpus[h[1]].get("mig_mode") else 0
    nvml.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
    return nvml


H200_MIG = {"name": "NVIDIA H200", "uuid": "GPU-aaaa", "memory": 150754820096, "sms": None, "mig_mode": 1, "mig": {
    0: {"name": "NVIDIA H200 MIG 3g.71gb", "uuid": "MIG-1111", "memory": 71 * 10**9, "sms": 60},
    # Bytes from an old nvidia-ml-py, and a name without the profile: the catalogue decides (32 SMs -> 2g.35gb).
    3: {"name": b"NVIDIA H200 MIG", "uuid": b"MIG-2222", "memory": 34 * 10**9, "sms": 32}}}


def test_nvml_discovery(monkeypatch):
    fake = _fake_pynvml([
        H200_MIG,
        {"name": "NVIDIA H200", "uuid": "GPU-bbbb", "memory": 150754820096, "sms": 132, "mig_mode": 0, "mig": {}},
        {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-cccc", "memory": 85899345920, "sms": None, "mig": {}},
    ])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    inventory = discover_nvml()
    assert (inventory.source, inventory.driver) == ("nvml", "590.48.01")
    mig_gpu, full_gpu, old_gpu = inventory.gpus
    assert (mig_gpu.mig_enabled, mig_gpu.sm_count) == (True, 132)  # attributes NOT_SUPPORTED: catalogue SMs
    assert [(m.mig_index, m.uuid, m.profile, m.memory_bytes, m.sm_count) for m in mig_gpu.mig_devices] == [
        (0, "MIG-1111", "3g.71gb", 71 * 10**9, 60), (3, "MIG-2222", "2g.35gb", 34 * 10**9, 32)]
    assert (full_gpu.mig_enabled, full_gpu.mig_devices, full_gpu.sm_count) == (False, (), 132)
    assert (old_gpu.mig_enabled, old_gpu.memory_bytes, old_gpu.uuid) == (False, 85899345920, "GPU-cccc")
    assert fake.calls == ["init", "shutdown"]


def test_nvml_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with pytest.raises(EnvironmentMissing) as info:
        load_inventory("nvml")
    assert info.value.exit_code == 3
    assert str(info.value) == ("inventory: nvidia-ml-py is not installed; pip install nvidia-ml-py, or pass an "
                               "inventory file")


def test_nvml_without_driver(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([], init_error=True))
    with pytest.raises(EnvironmentMissing) as info:
        discover_nvml()
    assert str(info.value) == ("inventory: NVML could not start (Driver Not Loaded); install the NVIDIA driver, or "
                               "plan from an inventory file or saved `nvidia-smi -L` output")


def test_nvml_no_gpu(monkeypatch):
    fake = _fake_pynvml([])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with pytest.raises(EnvironmentMissing, match=r"^inventory: NVML reports no GPU; "):
        discover_nvml()
    assert fake.calls == ["init", "shutdown"]


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs an NVIDIA GPU and driver")
def test_real_nvml_discovery():
    inventory = discover_nvml()
    assert inventory.gpus
    for gpu in inventory.gpus:
        assert gpu.uuid.startswith("GPU-") and gpu.memory_bytes > GIB and gpu.sm_count > 0
        assert all(m.uuid.startswith("MIG-") and m.memory_bytes < gpu.memory_bytes for m in gpu.mig_devices)

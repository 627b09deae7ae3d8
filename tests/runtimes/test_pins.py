"""Each runtime's pinned container, its facts' provenance, and NVIDIA's driver rule on the documented examples."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tritongen.cli import main
from tritongen.runtimes import RUNTIMES
from tritongen.runtimes.pins import MATRIX, R580_CUDA13, SERVER, DriverRule, Fact, Source, datacenter_gpus
from tritongen.runtimes.tensorrtllm.release import TRTLLM, TRTLLM_BACKEND_COMMIT, TRTLLM_PIN, TRTLLM_SUBMODULE
from tritongen.runtimes.vllm.release import VLLM_BACKEND_COMMIT, VLLM_PIN, VLLM_VERSION, VLLM_WHEEL_SHA256

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia"
DOUBLES = Path(__file__).resolve().parent.parent / "doubles"
PINS = {"tensorrtllm": TRTLLM_PIN, "vllm": VLLM_PIN}

# 26.02, a release whose notes state a number: "575 or later" (issue 38, quoting the 26.02 release notes), while the
# matrix's trtllm row (server r26.08 6fa22ae0) lists CUDA 13.0.2.006 with its bundled driver 580.95.05.
_NOTES_2602 = Source("docs.nvidia.com", "deeplearning/triton-inference-server/release-notes/rel-26-02.html", None,
                     "quoted in issue 38")
_MATRIX_2602 = Source(SERVER, MATRIX, "6fa22ae028e60f03170a8a07ebc8a54587c8581d", "trtllm-python-py3 row 26.02")
RULE_2602 = DriverRule(cuda=Fact("13.0.2.006", _MATRIX_2602), bundled=Fact("580.95.05", _MATRIX_2602),
                       stated_minimum=Fact("575", _NOTES_2602), datacenter=(R580_CUDA13,))


def test_a_575_driver_runs_a_release_whose_notes_say_575_whatever_the_gpu():
    for datacenter in (True, False, None):
        decision = RULE_2602.decide("575.57.08", datacenter)
        assert decision.verdict == "ok"
        assert decision.rule.startswith("the release notes' minimum: 575 or later (docs.nvidia.com ")


def test_an_older_consumer_driver_is_refused_below_the_stated_minimum():
    decision = RULE_2602.decide("570.172.08", datacenter_gpus(["NVIDIA GeForce RTX 4090"]))
    assert decision.verdict == "refuse"
    assert decision.rule == "below the release notes' minimum 575; data-center compatibility (R580) does not " \
                            "apply: R570 is not such a branch"


def test_an_r580_datacenter_driver_runs_the_vllm_image_under_compatibility_with_a_warning():
    vllm = RUNTIMES["vllm"]
    refuse, message = vllm.driver_problem("580.95.05", datacenter_gpus(["NVIDIA H100 80GB HBM3"] * 8))
    assert not refuse
    assert message.startswith("NVIDIA driver 580.95.05 runs nvcr.io/nvidia/tritonserver:26.01-vllm-python-py3 (vLLM "
                              "0.13.0 under Triton 26.01's vllm_backend) under data-center compatibility (data-center "
                              "GPUs): NVIDIA lists R580 as supporting CUDA 13.x through CUDA minor version "
                              "compatibility, below the 590.48.01 bundled with CUDA 13.1.1.006")
    assert "supported-drivers-and-cuda-toolkit-versions.html" in message  # the rule names its source
    # GPUs the inventory does not classify: the same warning, saying it holds on data-center GPUs only.
    refuse, message = vllm.driver_problem("580.65.06", None)
    assert not refuse and "(on data-center GPUs only; check the nodes' GPUs)" in message


def test_the_same_r580_driver_on_consumer_gpus_is_refused_naming_the_rule():
    refuse, message = RUNTIMES["vllm"].driver_problem("580.95.05", datacenter_gpus(["NVIDIA GeForce RTX 5090"]))
    assert refuse
    assert message.endswith(": below the 590.48.01 bundled with CUDA 13.1.1.006 (the release notes state no minimum); "
                            "data-center compatibility (R580) does not apply: the GPUs are not data-center GPUs")
    refuse, message = RUNTIMES["trtllm"].driver_problem("575.57.08", True)  # R575: no CUDA 13 compatibility branch
    assert refuse and message.endswith("R575 is not such a branch")


def test_the_bundled_driver_or_newer_runs_every_pinned_image():
    for name, pin in PINS.items():
        assert RUNTIMES[name].driver_problem(pin.driver.bundled.value, False) is None
        assert RUNTIMES[name].driver_problem("1000.1", False) is None  # compared as numbers, not as text


@pytest.mark.parametrize("names, datacenter", [
    (["NVIDIA H200", "NVIDIA A100-SXM4-80GB", "Tesla T4", "NVIDIA L40S"], True),
    (["NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"], False),
    (["NVIDIA RTX A6000"], False),
    (["NVIDIA H100 80GB HBM3", "Some Future GPU"], None),
    ([], None),
])
def test_datacenter_gpus_are_told_from_their_product_names(names, datacenter):
    assert datacenter_gpus(names) is datacenter


def test_each_runtime_owns_its_pin():
    assert RUNTIMES["vllm"].upstream.pin is VLLM_PIN and RUNTIMES["vllm"].image() == VLLM_PIN.image.value
    for name in ("tensorrtllm", "trtllm"):
        assert RUNTIMES[name].upstream.pin is TRTLLM_PIN and RUNTIMES[name].image() == TRTLLM_PIN.image.value
    assert VLLM_PIN.release != TRTLLM_PIN.release  # the vllm line moved on; TensorRT-LLM's stopped at 26.07
    assert RUNTIMES["hf"].upstream.pin is None and RUNTIMES["hf"].driver_problem("450.80.02") is None


def test_every_upstream_fact_names_the_file_and_commit_it_came_from():
    for name, pin in PINS.items():
        for what, fact in pin.facts():
            source = fact.source
            assert fact.value and source.repo and source.path, (name, what)
            if source.commit is not None:
                assert re.fullmatch(r"[0-9a-f]{40}", source.commit), (name, what, source.commit)
            else:  # a web page: it says how it was read
                assert source.note, (name, what)


def _facts_by_release() -> dict[tuple[str, str], set[str]]:
    """(image, attribute) -> every value recorded for it, by the pins, the release constants and the fixtures."""
    seen: dict[tuple[str, str], set[str]] = {}

    def record(image: str, what: str, value: str) -> None:
        seen.setdefault((image, what), set()).add(value)

    for pin in PINS.values():
        image = pin.image.value
        record(image, "release", pin.release)
        record(image, "release", image.rsplit(":", 1)[1].split("-", 1)[0])
        record(image, "cuda", pin.driver.cuda.value)
        record(image, "bundled driver", pin.driver.bundled.value)
    record(TRTLLM.container, "release", TRTLLM.release)
    record(TRTLLM.container, "engine", f"TensorRT-LLM {TRTLLM.version}")
    record(TRTLLM.container, "engine", TRTLLM_PIN.engine.value)
    record(TRTLLM.container, "cuda major.minor", TRTLLM.cuda)
    record(TRTLLM.container, "cuda major.minor", ".".join(TRTLLM_PIN.driver.cuda.value.split(".")[:2]))
    record(TRTLLM.container, "backend commit", TRTLLM_BACKEND_COMMIT)
    record(TRTLLM.container, "tensorrt_llm submodule", TRTLLM_SUBMODULE)
    assert TRTLLM_SUBMODULE[:8] in TRTLLM_PIN.backend.value and TRTLLM_BACKEND_COMMIT == TRTLLM_PIN.backend.source.commit

    trtllm = json.loads((FIXTURES / "trtllm-1.2.1.json").read_text())["release"]
    image = trtllm["container"]
    record(image, "engine", f"TensorRT-LLM {trtllm['tensorrt_llm']}")
    record(image, "engine", f"TensorRT-LLM {trtllm['pairing_source']['rows'][image.rsplit(':', 1)[1][:5]]}")
    record(image, "cuda", trtllm["pairing_source"]["cuda"])
    record(image, "bundled driver", trtllm["pairing_source"]["driver"])
    record(image, "backend commit", trtllm["backend_submodule"]["commit"])
    record(image, "tensorrt_llm submodule", trtllm["backend_submodule"]["tensorrt_llm_submodule"])
    record(image, "tensorrt_llm submodule",
           trtllm["backend_submodule"]["submodule_by_branch"][trtllm["backend_submodule"]["branch"]])
    llmapi = json.loads((DOUBLES / "llmapi" / "facts.json").read_text())["release"]
    record(llmapi["container"], "engine", f"TensorRT-LLM {llmapi['tensorrt_llm']}")
    record(llmapi["container"], "tensorrt_llm submodule", llmapi["release_branch_submodule"])

    vllm = json.loads((FIXTURES / "vllm_backend-r26.01.json").read_text())
    record(vllm["container"], "release", VLLM_PIN.release)
    image, release = VLLM_PIN.image.value, vllm["release"]
    for engine in (VLLM_PIN.engine.value.split("+", 1)[0], f"vLLM {VLLM_VERSION}", f"vLLM {release['vllm']}",
                   f"vLLM {release['build_py']['vllm_version']}", f"vLLM {release['matrix']['vllm'].split('+')[0]}"):
        record(image, "engine", engine)
    record(image, "engine build", VLLM_PIN.engine.value.split(" ", 1)[1])
    record(image, "engine build", release["matrix"]["vllm"])
    record(release["container"], "release", release["build_py"]["triton_container_version"])
    record(image, "cuda", release["matrix"]["cuda"])
    record(image, "bundled driver", release["matrix"]["driver"])
    record(image, "tritonserver", VLLM_PIN.tritonserver.value)
    record(image, "tritonserver", release["tritonserver"])
    record(image, "tritonserver", release["build_py"]["release_version"])
    record(image, "backend commit", VLLM_PIN.backend.source.commit)
    record(image, "backend commit", VLLM_BACKEND_COMMIT)
    record(image, "backend commit", vllm["vllm_backend"]["commit"])
    record(image, "server tag commit", VLLM_PIN.date.source.commit)
    record(image, "server tag commit", release["matrix"]["commit"])
    record(image, "server tag commit", release["build_py"]["commit"])
    record(image, "vllm wheel sha256", VLLM_WHEEL_SHA256)
    record(image, "vllm wheel sha256", release["vllm_source"]["sha256"])
    for entry in vllm["double_behaviours"].values():  # every citation of the wheel names the same wheel
        for cite in entry if isinstance(entry, list) else [entry]:
            if isinstance(cite, dict) and "artifact_sha256" in cite:
                record(image, "vllm wheel sha256", cite["artifact_sha256"])
    assert vllm["container"] in PINS_IMAGES, f"the vllm fixture describes {vllm['container']}, which no runtime pins"
    return seen


PINS_IMAGES = {pin.image.value for pin in PINS.values()}


def test_no_two_facts_about_one_release_disagree():
    disagree = {key: values for key, values in _facts_by_release().items() if len(values) > 1}
    assert not disagree, disagree


def test_the_pins_command_lists_every_runtime(capsys):
    assert main(["pins", "--json"]) == 0
    pins = json.loads(capsys.readouterr().out)
    assert sorted(pins) == sorted(RUNTIMES)
    assert pins["vllm"]["image"] == "nvcr.io/nvidia/tritonserver:26.01-vllm-python-py3"
    assert pins["vllm"]["driver"] == {"stated_minimum": None, "bundled": "590.48.01", "cuda": "13.1.1.006",
                                      "datacenter_branches": ["R580 (CUDA 13.x)"]}
    assert pins["hf"] is None
    facts = {f["what"]: f for f in pins["tensorrtllm"]["facts"]}
    assert facts["tritonserver"]["value"] == "2.71.0" and facts["tritonserver"]["commit"].startswith("819ee377")
    assert main(["pins"]) == 0
    text = capsys.readouterr().out
    assert "tensorrtllm: nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3" in text
    assert "the last Triton TensorRT-LLM container" in text and "newer          26.10" in text


def test_the_docs_pin_table_states_what_the_pins_record():
    rows = [line for line in (Path(__file__).resolve().parents[2] / "docs" / "runtimes.md").read_text().splitlines()
            if line.startswith("| `")]
    for pin in PINS.values():
        (row,) = [r for r in rows if f"`{pin.image.value}`" in r]
        version = pin.engine.value.split("+", 1)[0]  # "vLLM 0.13.0", "TensorRT-LLM 1.2.1"
        assert version in row and f"tritonserver {pin.tritonserver.value}" in row, row
        assert f"{pin.driver.bundled.value} (CUDA {pin.driver.cuda.value})" in row, row

"""The one pinned TensorRT-LLM release and the Triton container that carries it (both TensorRT-LLM runtimes read it).

The pair comes from the server repo's docs/introduction/compatibility.md (read on branch r26.07 at commit 819ee377,
on main at e1db8a60 and on r26.08 at 6fa22ae0): tritonserver 26.04 to 26.07 `-trtllm-python-py3` carry TensorRT-LLM
1.2.1 with TensorRT 10.14.1.48 and CUDA 13.1.0.036 (bundled CUDA driver 590.44.01); 26.03 carries 1.2.0 and 25.12 to
26.02 carry 1.1.0. 26.07 is the last Triton TensorRT-LLM container: the r26.08 matrix has no 26.08 trtllm row, and
upstream removed the TensorRT engine path (trtllm-build, the C++ inflight_batcher_llm backend and its templates) from
TensorRT-LLM main in mid-2026 (NVIDIA/TensorRT-LLM PR #15907). The LLM-API model (`all_models/llmapi`) is the path
NVIDIA maintains. `TRTLLM_PIN` records each fact with its file and commit; docs/runtimes.md lists what was read.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritongen.runtimes.pins import MATRIX, R580_CUDA13, SERVER, ContainerPin, DriverRule, Fact, Source


@dataclass(frozen=True)
class TrtllmRelease:
    """One TensorRT-LLM release and the Triton container that serves it; a new release is a new instance."""

    container: str
    """Serving (and building) image; engines must be built with the TensorRT-LLM inside it."""

    version: str
    """TensorRT-LLM version the container is expected to carry; the docker build checks it before building."""

    source_tag: str
    """NVIDIA/TensorRT-LLM git tag whose `examples/` folder provides the conversion scripts."""

    tensorrt: str
    """TensorRT version in the container (compatibility matrix)."""

    cuda: str
    """CUDA toolkit in the container."""

    convert_script: str
    """Checkpoint conversion for the Llama family, relative to `examples/`."""

    quantize_script: str
    """ModelOpt quantisation (calibrated formats), relative to `examples/`."""

    executor_worker_path: str
    """trtllmExecutorWorker inside the container (orchestrator mode spawns it)."""

    tritonserver: str
    """tritonserver binary inside the container."""

    llmapi_model_dir: str
    """The LLM-API Triton model's version folder inside the container (model.py and helpers.py live there)."""

    @property
    def release(self) -> str:
        """The Triton release of the container (`26.07`): the other images of the same line share it."""
        return self.container.rsplit(":", 1)[1].split("-", 1)[0]


TRTLLM = TrtllmRelease(
    container="nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3",
    version="1.2.1",
    source_tag="v1.2.1",
    tensorrt="10.14.1.48",
    cuda="13.1",
    convert_script="models/core/llama/convert_checkpoint.py",
    quantize_script="quantization/quantize.py",
    executor_worker_path="/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
    tritonserver="/opt/tritonserver/bin/tritonserver",
    llmapi_model_dir="/app/all_models/llmapi/tensorrt_llm/1",
)


# The server repo: r26.07 = tag v2.71.0 = 819ee377 (2026-07-24); r26.08 at 6fa22ae0 adds the 26.08 rows.
_R2607 = "819ee37770df2fcd6d799d2a5d1dacf812f7d62c"
_R2608 = "6fa22ae028e60f03170a8a07ebc8a54587c8581d"
_MATRIX_2607 = Source(SERVER, MATRIX, _R2607, "trtllm-python-py3 row 26.07")
_BACKEND = "triton-inference-server/tensorrtllm_backend"
# tensorrtllm_backend r26.07 (3bc11537): its tensorrt_llm submodule is ca88df0a, as on r26.05 and r26.06 (r26.04 pins
# 2fdb9e66); its Dockerfile builds TensorRT-LLM tag release/1.2.1.
TRTLLM_BACKEND_COMMIT = "3bc115373ce1fde1d94891964b492449402e3a68"
TRTLLM_SUBMODULE = "ca88df0a400515b8206a19eb30cd047eb7661035"

TRTLLM_PIN = ContainerPin(
    image=Fact(TRTLLM.container, _MATRIX_2607),
    release=TRTLLM.release,
    date=Fact("2026-07-24", Source(SERVER, "tag v2.71.0 (branch r26.07)", _R2607, "commit date")),
    tritonserver=Fact("2.71.0", Source(SERVER, "build.py (DEFAULT_TRITON_VERSION_MAP release_version)", _R2607)),
    backend=Fact(f"tensorrtllm_backend r26.07 {TRTLLM_BACKEND_COMMIT[:8]} (tensorrt_llm submodule "
                 f"{TRTLLM_SUBMODULE[:8]})", Source(_BACKEND, "tensorrt_llm (submodule)", TRTLLM_BACKEND_COMMIT)),
    engine=Fact(f"TensorRT-LLM {TRTLLM.version}", _MATRIX_2607),
    driver=DriverRule(cuda=Fact("13.1.0.036", _MATRIX_2607), bundled=Fact("590.44.01", _MATRIX_2607),
                      stated_minimum=None, datacenter=(R580_CUDA13,)),
    notes=(Fact("the last Triton TensorRT-LLM container: the 2.75.0 (26.11) release notes list under Known Issues "
                "\"The Triton TensorRT-LLM Backend container image is not included in this release\"",
                Source("github.com", "triton-inference-server/server/releases/tag/v2.75.0", None,
                       "Known Issues, read 2026-12-07")),
           Fact("the 26.07 release notes state no driver number: \"Release 26.07 is based on CUDA 13.3.1 which "
                "requires the NVIDIA Driver release. Please see CUDA Compatibility\" (the base container's CUDA; the "
                "trtllm-python-py3 row of the matrix gives 13.1.0.036), so the bundled driver is the rule's floor",
                Source("docs.nvidia.com", "deeplearning/triton-inference-server/release-notes/rel-26-07.html", None,
                       "Driver Requirements, read 2026-12-07")),
           Fact("the engine path (trtllm-build, the C++ inflight_batcher_llm backend) is removed on TensorRT-LLM main",
                Source("NVIDIA/TensorRT-LLM", "pull request #15907", None, "cited by number; the pull request itself was not read"))),
    newer=(Fact("none: the r26.08 matrix lists no 26.08 trtllm-python-py3 row (its newest is 26.07)",
                Source(SERVER, MATRIX, _R2608)),),
)


def upstream(what: str, checked: str):
    """The Upstream record of a runtime served by the pinned TensorRT-LLM container."""
    from tritongen.runtimes.base import Upstream

    return Upstream(release=f"{what} in TensorRT-LLM {TRTLLM.version}, Triton {TRTLLM.release}", pin=TRTLLM_PIN,
                    checked=checked)

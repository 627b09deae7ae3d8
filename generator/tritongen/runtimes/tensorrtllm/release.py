"""The one pinned TensorRT-LLM release and the Triton container that carries it (both runtimes read it).

The pair comes from the server repo's docs/introduction/compatibility.md (read on branch r26.07 at commit 819ee377
and on main at e1db8a60): tritonserver 26.04 to 26.07 `-trtllm-python-py3` carry TensorRT-LLM 1.2.1 with TensorRT
10.14.1.48 and CUDA 13.1.0.036 (CUDA driver 590.44.01); 26.03 carries 1.2.0 and 25.12 to 26.02 carry 1.1.0. The newest container of the pair is pinned.
Upstream removed the TensorRT engine path (trtllm-build, the C++ inflight_batcher_llm backend and its templates)
from TensorRT-LLM main in mid-2026; the released containers up to 26.07 still ship it. The LLM-API model
(`all_models/llmapi`) is the path NVIDIA maintains. docs/runtimes.md lists the files and commits checked.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    min_driver: str
    """NVIDIA driver the container needs (the compatibility matrix's CUDA driver version)."""

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
    min_driver="590.44.01",
    convert_script="models/core/llama/convert_checkpoint.py",
    quantize_script="quantization/quantize.py",
    executor_worker_path="/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
    tritonserver="/opt/tritonserver/bin/tritonserver",
    llmapi_model_dir="/app/all_models/llmapi/tensorrt_llm/1",
)


def upstream(what: str, checked: str):
    """The Upstream record of a runtime served by the pinned TensorRT-LLM container."""
    from tritongen.runtimes.base import Upstream

    return Upstream(release=f"{what} in TensorRT-LLM {TRTLLM.version}, Triton {TRTLLM.release}",
                    min_driver=TRTLLM.min_driver, checked=checked)

"""The vllm runtime's own pin: the newest `-vllm-python-py3` container whose vLLM version could be read at source.

The server repo's docs/introduction/compatibility.md on branch r26.08 (commit 6fa22ae0, "docs: add 26.08 rows to the
release compatibility matrix (#8935)") lists 26.08-vllm-python-py3 with vLLM 0.27.1+b1082979.nv26.8.62699174, CUDA
13.4.1.012 and the bundled CUDA driver 615.61; its build.py names release 2.72.0. No newer vllm row is in the
snapshot; the 26.10 release notes name CUDA 13.4.3.001 but no vLLM version (reference/agent-features.md section 9).
The vllm line goes on after TensorRT-LLM's stopped at 26.07, so it is pinned on its own.

Not read here, so unverified for 26.08: the vllm_backend branch of the release (the stored snapshot of
triton-inference-server/vllm_backend has branches up to r26.01 and main at 8de0c148 of 2026-01-09) and vLLM 0.27.1's
own files (vllm-project/vllm is over the snapshot limit; its file index holds one unversioned copy of each file).
The tensors, request keys and metric names tritongen uses are those read at vllm_backend r26.01 / main and the vLLM
commits that tests/fixtures/nvidia/vllm_backend-r26.01.json names; docs/runtimes.md says which rows a 0.27.1 change
would break.
"""

from __future__ import annotations

from tritongen.runtimes.pins import MATRIX, R580_CUDA13, SERVER, ContainerPin, DriverRule, Fact, Source

VLLM_VERSION = "0.27.1"
RELEASE = "26.08"
IMAGE = f"nvcr.io/nvidia/tritonserver:{RELEASE}-vllm-python-py3"

_R2608 = "6fa22ae028e60f03170a8a07ebc8a54587c8581d"
_MATRIX_2608 = Source(SERVER, MATRIX, _R2608, "vllm-python-py3 row 26.08")
_VLLM_BACKEND = "triton-inference-server/vllm_backend"

VLLM_PIN = ContainerPin(
    image=Fact(IMAGE, _MATRIX_2608),
    release=RELEASE,
    date=Fact("2026-08-20", Source(SERVER, "branch r26.08 (docs: add 26.08 rows, #8935)", _R2608,
                                   "commit date; no v2.72.0 tag in the snapshot")),
    tritonserver=Fact("2.72.0", Source(SERVER, "build.py (DEFAULT_TRITON_VERSION_MAP release_version)", _R2608)),
    backend=Fact("vllm_backend r26.08 (not read: the snapshot's branches end at r26.01; facts read at r26.01 "
                 "c70d6547 and main 8de0c148)", Source(_VLLM_BACKEND, "src/model.py", "8de0c148bda1da25de1e05ffaaf67116"
                                                       "dacc7264", "main, 2026-01-09")),
    engine=Fact(f"vLLM {VLLM_VERSION}+b1082979.nv26.8.62699174", _MATRIX_2608),
    driver=DriverRule(cuda=Fact("13.4.1.012", _MATRIX_2608), bundled=Fact("615.61", _MATRIX_2608),
                      stated_minimum=None, datacenter=(R580_CUDA13,)),
    notes=(Fact("the 26.08 release notes state no minimum driver (their sentence reads \"requires the NVIDIA Driver "
                "release.\" with the number blank) and list no data-center compatibility branches",
                Source("docs.nvidia.com", "deeplearning/triton-inference-server/release-notes/rel-26-08.html", None,
                       "as recorded in reference/agent-features.md section 9; not read here")),),
    newer=(Fact("26.10: CUDA 13.4.3.001, vLLM version not stated (release notes rel-26-10)",
                Source("docs.nvidia.com", "deeplearning/triton-inference-server/release-notes/rel-26-10.html", None,
                       "as recorded in reference/agent-features.md section 9; not read here")),),
)

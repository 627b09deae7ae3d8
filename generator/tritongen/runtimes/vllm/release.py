"""The vllm runtime's own pin: the newest `-vllm-python-py3` container whose vLLM version and vllm_backend branch
could both be read at source.

That is 26.01 (vLLM 0.13.0, tritonserver 2.65.0):
- the server repo at tag v2.65.0 (commit 91c61c5d, 2026-01-29): docs/introduction/compatibility.md lists
  26.01-vllm-python-py3 with vLLM 0.13.0+faa43dbf.nv26.1.cu131, CUDA 13.1.1.006 and the bundled CUDA driver
  590.48.01 (the r26.08 matrix, 6fa22ae0, keeps the same row); build.py names release 2.65.0 / container 26.01 and
  `vllm_version` 0.13.0, which its public build installs as `pip3 install vllm==0.13.0`;
- triton-inference-server/vllm_backend branch r26.01 (c70d6547, 2026-01-22): src/model.py, src/utils/request.py,
  src/utils/vllm_backend_utils.py and src/utils/metrics.py (the tensors, sampling_parameters, structured_outputs,
  LoRA, errors and metric names tritongen uses);
- vLLM 0.13.0 as PyPI publishes it (the package that build.py installs): the wheel
  vllm-0.13.0-cp38-abi3-manylinux_2_31_x86_64.whl (sha256 `VLLM_WHEEL_SHA256`; its vllm/_version.py names upstream
  commit 72506c983): vllm/sampling_params.py (SamplingParams, StructuredOutputsParams), vllm/lora/request.py
  (LoRARequest), vllm/engine/arg_utils.py and vllm/config/lora.py (EngineArgs, LoRAConfig),
  vllm/v1/engine/input_processor.py (request validation and its errors), vllm/v1/structured_output/ and
  vllm/v1/engine/detokenizer.py. NVIDIA's container carries its own build of 0.13.0 (`+faa43dbf.nv26.1`), whose
  changes, if any, were not read.

Newer containers exist (26.02 to 26.08 carry vLLM 0.15.1 to 0.27.1, `NEWER`), but the stored snapshot of
vllm_backend has no branch after r26.01 (its main stops at 8de0c148, 2026-01-09), so the backend that serves them
could not be read; vllm-project/vllm itself is over the snapshot's size limit (its tags are not readable there).
tests/fixtures/nvidia/vllm_backend-r26.01.json records each fact with its file and commit; docs/runtimes.md lists
them.
"""

from __future__ import annotations

from tritongen.runtimes.pins import MATRIX, R580_CUDA13, SERVER, ContainerPin, DriverRule, Fact, Source

VLLM_VERSION = "0.13.0"
RELEASE = "26.01"
IMAGE = f"nvcr.io/nvidia/tritonserver:{RELEASE}-vllm-python-py3"

# The server repo's tag v2.65.0 (= branch r26.01's release commit) and the later r26.08 branch with the newer rows.
SERVER_TAG_COMMIT = "91c61c5d942dd6bc245a9324e0b2966d5c2a877d"
_R2608 = "6fa22ae028e60f03170a8a07ebc8a54587c8581d"
_MATRIX_2601 = Source(SERVER, MATRIX, SERVER_TAG_COMMIT, "vllm-python-py3 row 26.01, tag v2.65.0")
_MATRIX_2608 = Source(SERVER, MATRIX, _R2608, "vllm-python-py3 rows, branch r26.08")
_BUILD_2601 = Source(SERVER, "build.py (DEFAULT_TRITON_VERSION_MAP)", SERVER_TAG_COMMIT, "tag v2.65.0")

VLLM_BACKEND = "triton-inference-server/vllm_backend"
VLLM_BACKEND_BRANCH = "r26.01"
VLLM_BACKEND_COMMIT = "c70d65474833bac171cc33470c5e723c604558d6"
VLLM_WHEEL = "vllm-0.13.0-cp38-abi3-manylinux_2_31_x86_64.whl"
VLLM_WHEEL_SHA256 = "12b3d0a3b91c32a0091349de64b464f1c3d499a5b3a5d0ec387fef94ed5df6ee"
VLLM_UPSTREAM_COMMIT = "72506c983"
"""vLLM's git commit as the wheel's vllm/_version.py abbreviates it (setuptools-scm `g72506c983`)."""
_WHEEL = Source("pypi.org/project/vllm/0.13.0", VLLM_WHEEL, None,
                f"sha256 {VLLM_WHEEL_SHA256[:16]}..., vllm/_version.py commit {VLLM_UPSTREAM_COMMIT}; read here")

# What `Runtime.upstream.checked` says was read.
CHECKED = (f"vllm_backend {VLLM_BACKEND_BRANCH} {VLLM_BACKEND_COMMIT[:8]} (src/model.py, src/utils/request.py, "
           f"src/utils/vllm_backend_utils.py, src/utils/metrics.py) and vLLM {VLLM_VERSION} as PyPI publishes it "
           f"(the package server v2.65.0's build.py installs; wheel sha256 {VLLM_WHEEL_SHA256[:12]}, upstream commit "
           f"{VLLM_UPSTREAM_COMMIT}): SamplingParams, StructuredOutputsParams, LoRARequest, EngineArgs, request "
           "validation (tests/fixtures/nvidia/vllm_backend-r26.01.json, docs/runtimes.md)")

# Newer vllm-python-py3 rows of the r26.08 matrix: vLLM read nowhere here, their vllm_backend branches not stored.
NEWER = (("26.02", "0.15.1+nv26.2"), ("26.03", "0.17.1+fb2e3ab6.nv26.3.46332470.cu132"),
         ("26.04", "0.19.0+6bc3197f.nv26.04.48761268"), ("26.05", "0.19.0+6bc3197f.nv26.04.48761268"),
         ("26.06", "0.22.1+7b9cb5b7.nv26.6.55098374"), ("26.07", "0.24.0+092c4842.nv26.7.57386851"),
         ("26.08", "0.27.1+b1082979.nv26.8.62699174"))

VLLM_PIN = ContainerPin(
    image=Fact(IMAGE, _MATRIX_2601),
    release=RELEASE,
    date=Fact("2026-01-29", Source(SERVER, "tag v2.65.0 (branch r26.01)", SERVER_TAG_COMMIT, "commit date")),
    tritonserver=Fact("2.65.0", _BUILD_2601),
    backend=Fact(f"vllm_backend {VLLM_BACKEND_BRANCH} {VLLM_BACKEND_COMMIT[:8]}",
                 Source(VLLM_BACKEND, "src/model.py", VLLM_BACKEND_COMMIT, f"branch {VLLM_BACKEND_BRANCH}, 2026-01-22")),
    engine=Fact(f"vLLM {VLLM_VERSION}+faa43dbf.nv26.1.cu131", _MATRIX_2601),
    driver=DriverRule(cuda=Fact("13.1.1.006", _MATRIX_2601), bundled=Fact("590.48.01", _MATRIX_2601),
                      stated_minimum=None, datacenter=(R580_CUDA13,)),
    notes=(Fact(f"vLLM {VLLM_VERSION} read at source: build.py's vllm_version ({VLLM_VERSION}) is what its public "
                f"build installs from PyPI; NVIDIA's build (+faa43dbf.nv26.1) was not read", _WHEEL),
           Fact("the 26.01 release notes' minimum driver was not read here: the bundled driver is the rule's floor "
                "(R580 data-center drivers run it under CUDA 13 minor version compatibility)",
                Source("docs.nvidia.com", "deeplearning/triton-inference-server/release-notes/rel-26-01.html", None,
                       "not read here")),
           Fact("26.02's release notes, on the same CUDA 13.1.1, say it 'requires NVIDIA Driver release 575 or later' "
                "(data-center GPUs: R470/R525/R535/R545 as listed there); not applied to 26.01, whose notes were not "
                "read: 575 is what 26.01's would say only if it follows its CUDA version",
                Source("docs.nvidia.com", "deeplearning/triton-inference-server/release-notes/rel-26-02.html", None,
                       "Driver Requirements, read 2026-12-06"))),
    newer=tuple(Fact(f"{release}: vLLM {version} (vllm_backend r{release} not readable here, so not pinned)",
                     _MATRIX_2608) for release, version in NEWER)
    + (Fact("26.10: CUDA 13.4.3.001, vLLM version not stated (release notes rel-26-10)",
            Source("docs.nvidia.com", "deeplearning/triton-inference-server/release-notes/rel-26-10.html", None,
                   "as recorded in reference/agent-features.md section 9; not read here")),),
)

"""The vllm runtime: Triton's vLLM backend (triton-inference-server/vllm_backend) serving the Hugging Face checkpoint.

The repository is one model, `tensorrt_llm` (the name every tritongen client and dashboard uses), with
`config.pbtxt` (backend "vllm") and `1/model.json`, whose keys go to vLLM's AsyncEngineArgs as they are. The
backend is a Python-based backend inside the `<release>-vllm-python-py3` container that vllm/release.py pins (its
own release, independent of the TensorRT-LLM line); it tokenizes and detokenizes itself, so there is no ensemble, and it speaks its own
tensors (CONTRACT_INPUTS / CONTRACT_OUTPUTS, read from the backend's src/model.py; tests/fixtures/nvidia names the
files and commits). config.pbtxt is built as a ModelConfig message and printed in protobuf text format.

Clients speak to the backend through the runtime's request dialect (vllm/dialect.py, `Runtime.dialect()`): the
OpenAI frontend, `tritongen loadtest` and the deploy targets' frontend and load-test services serve it as they
serve the other runtimes, with the server's token counts.

Executed here (tests/runtimes/test_vllm_served.py): the rendered repository served by the embedded tritonserver
with a test double in place of the backend (tests/doubles/vllm, written from the recorded facts; it generates with
the tiny transformers model on the CPU, and the instance group is switched to KIND_CPU). Not executed here: vLLM
itself, the backend's own model.py and the vllm-python-py3 container. What tritongen does not do for it yet:
tensor/pipeline parallelism (no spec section of its own: one GPU per server group) and a batch-level HPA signal
(the backend's own metrics are counters and histograms; the default is Triton's pending requests).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tritongen.core import GUIDE_TYPES, Locations, PlanView, SpecView
from tritongen.errors import SpecError, problem
from tritongen.runtimes.base import Dialect, ModelRepository, PlanContext, Renderer, Runtime, RuntimeSettings, Upstream
from tritongen.runtimes.vllm.dialect import DIALECT, MODEL
from tritongen.runtimes.vllm.settings import VllmPlan
from tritongen.runtimes.vllm.release import CHECKED, IMAGE, RELEASE, VLLM_PIN, VLLM_VERSION

TRITONSERVER = "/opt/tritonserver/bin/tritonserver"

# (name, data type, dims, optional) as the backend's auto_complete_config declares them. Left out on purpose, as
# for the llmapi model: `image` (multimodal) and `embedding_request` (not a text-generation request).
CONTRACT_INPUTS = (
    ("text_input", "TYPE_STRING", (1,), False),
    ("stream", "TYPE_BOOL", (1,), True),
    ("sampling_parameters", "TYPE_STRING", (1,), True),  # a JSON object of vLLM SamplingParams fields
    ("exclude_input_in_output", "TYPE_BOOL", (1,), True),
    ("return_finish_reason", "TYPE_BOOL", (1,), True),
    ("return_cumulative_logprob", "TYPE_BOOL", (1,), True),
    ("return_logprobs", "TYPE_BOOL", (1,), True),
    ("return_num_input_tokens", "TYPE_BOOL", (1,), True),
    ("return_num_output_tokens", "TYPE_BOOL", (1,), True),
)
CONTRACT_OUTPUTS = (
    ("text_output", "TYPE_STRING", (-1,)),
    ("finish_reason", "TYPE_STRING", (-1,)),
    ("cumulative_logprob", "TYPE_FP32", (-1,)),
    ("logprobs", "TYPE_STRING", (-1,)),
    ("num_input_tokens", "TYPE_UINT32", (1,)),
    ("num_output_tokens", "TYPE_UINT32", (-1,)),
)

# vLLM's own default, written out so that model.json does not depend on the release's default.
GPU_MEMORY_UTILIZATION = 0.9

# model.json keys tritongen writes: fields of vLLM 0.13.0's EngineArgs (vllm/engine/arg_utils.py; the LoRA ones'
# defaults in vllm/config/lora.py; the backend's _setup_lora reads enable_lora; tests/fixtures/nvidia cites them).
ENGINE_ARGS_KEYS = frozenset({"model", "tokenizer", "dtype", "max_model_len", "max_num_seqs", "tensor_parallel_size",
                              "gpu_memory_utilization", "enable_prefix_caching", "trust_remote_code", "enable_lora",
                              "max_lora_rank", "max_loras"})
# vLLM's LoRAConfig takes only these max_lora_rank values (vllm/config/lora.py, MaxLoRARanks, vLLM 0.13.0 as
# vllm/release.py says it was read): the plan's maximum is rounded up to one of them.
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# Next to model.json (the backend reads it from pb_utils.get_model_dir() when enable_lora is true): {name: folder};
# the backend numbers the adapters 1, 2, ... in this order (LoRARequest(str(i + 1), i + 1, path)), as the plan does.
MULTI_LORA = "multi_lora.json"

BACKEND = "vllm"
"""Triton's vLLM backend: the config.pbtxt's `backend`."""


def max_lora_rank(rank: int) -> int:
    """The smallest rank vLLM's LoRAConfig takes that holds `rank`; SpecError above its largest."""
    fits = [r for r in MAX_LORA_RANKS if r >= rank]
    if not fits:
        raise SpecError(problem("model.max_adapter_rank", f"rank {rank} is above vLLM's largest max_lora_rank "
                                f"{MAX_LORA_RANKS[-1]}", f"serve adapters of rank {MAX_LORA_RANKS[-1]} at most"))
    return fits[0]


def engine_args(plan: PlanView, checkpoint: str, tokenizer: str) -> dict[str, Any]:
    """model.json as a mapping; `checkpoint`/`tokenizer` are the paths the server sees."""
    v = RUNTIME.own(plan)
    args: dict[str, Any] = {"model": checkpoint}
    if v.separate_tokenizer:
        args["tokenizer"] = tokenizer
    # vLLM's max_num_seqs is the Triton batch: the requests one engine serves at once.
    args.update({"dtype": v.dtype, "max_model_len": v.max_model_len, "max_num_seqs": plan.max_batch_size,
                 "tensor_parallel_size": 1, "gpu_memory_utilization": v.gpu_memory_utilization,
                 "enable_prefix_caching": v.enable_prefix_caching, "trust_remote_code": False})
    if v.max_lora_rank is not None:
        args.update({"enable_lora": True, "max_lora_rank": v.max_lora_rank, "max_loras": v.max_loras})
    return args


def model_config(plan: PlanView, header: str) -> bytes:
    """config.pbtxt: the backend, the decoupled policy it requires, the contract's tensors and the instances."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    config = pb.ModelConfig(name=MODEL, backend=BACKEND, max_batch_size=0,
                            model_transaction_policy=pb.ModelTransactionPolicy(decoupled=True))
    for name, dtype, dims, optional in CONTRACT_INPUTS:
        config.input.add(name=name, data_type=pb.DataType.Value(dtype), dims=dims, optional=optional)
    for name, dtype, dims in CONTRACT_OUTPUTS:
        config.output.add(name=name, data_type=pb.DataType.Value(dtype), dims=dims)
    group = plan.llm_instance_group
    config.instance_group.add(kind=pb.ModelInstanceGroup.Kind.Value(group.kind), count=group.count,
                              gpus=list(group.gpus))
    # The backend's vllm:* metrics (TTFT, time per output token, token counters) next to Triton's own.
    config.parameters["REPORT_CUSTOM_METRICS"].string_value = "true"
    return f"{header}\n{text_format.MessageToString(config)}".encode()


class VllmRuntime(Runtime[VllmPlan]):
    name = "vllm"
    output_token_counter = "vllm:generation_tokens_total"  # the backend's own (REPORT_CUSTOM_METRICS)
    settings = VllmPlan
    summary = f"Triton's vLLM backend (model.json = vLLM engine args; {IMAGE}), one GPU per server group"
    choice = ("Triton's vLLM backend, one GPU per server group; pick it to serve a checkpoint with vLLM in "
              "Triton's vllm-python-py3 container")
    executed_here = ("with a stand-in: the rendered config.pbtxt and model.json served by the embedded tritonserver "
                     "with a test double of the vLLM backend generating with the tiny transformers model "
                     "(tests/doubles/vllm; streamed, unstreamed, server token counts, stop strings, bad requests, "
                     "load test, OpenAI completions and chat, cancellation); vLLM, the backend's model.py and its "
                     "container never ran here")
    upstream = Upstream(
        release=f"vLLM {VLLM_VERSION} under Triton {RELEASE}'s vllm_backend", pin=VLLM_PIN,
        checked=CHECKED)
    ensemble = False
    runs_on_cpu = False
    honours_stream_interval = False
    group_configs = False  # one model.json for every server group
    serves_adapters = True
    embedded = False

    def guided_decoding(self, spec: SpecView) -> tuple[tuple[str, ...], str]:
        return GUIDE_TYPES, ("the guide goes to vLLM as sampling_parameters[\"structured_outputs\"] (a JSON-encoded "
                             "StructuredOutputsParams: json_object, json, regex or grammar); vLLM compiles it with "
                             "its own structured-output backend")

    def instances_per_device(self, spec: SpecView) -> int:
        return 1  # one engine takes the GPU (gpu_memory_utilization is a share of the whole device)

    def llm_instance_group(self, spec: SpecView, placed: bool) -> dict[str, Any]:
        # KIND_GPU is the backend's documented choice for a one-GPU model: it pins vLLM to that device. With a
        # placement each server group sees its own device as 0.
        gpus = (0,) if placed else tuple(spec.placement.gpu_ids[:1] or [0])
        return {"kind": "KIND_GPU", "count": 1, "gpus": gpus}

    def plan_settings(self, ctx: PlanContext, prepared: VllmPlan | None) -> VllmPlan:
        spec = ctx.spec
        if not spec.serving.streaming:
            raise SpecError(problem("serving.streaming", "is false, and the vLLM backend requires a decoupled model",
                                    "set serving.streaming: true (a client may still ask for one response)"))
        max_model_len = ctx.max_seq_len
        if ctx.kv_tokens is not None and ctx.kv_tokens < max_model_len:
            raise SpecError(problem("serving.kv_cache.max_tokens", f"({ctx.kv_tokens}) holds less than one request "
                                    f"of {max_model_len} tokens", "raise it, or lower the load's token counts"))
        return VllmPlan(checkpoint_dir=str(ctx.checkpoint), separate_tokenizer=spec.model.tokenizer is not None,
                        dtype=spec.model.dtype, max_model_len=max_model_len,
                        gpu_memory_utilization=GPU_MEMORY_UTILIZATION,
                        enable_prefix_caching=spec.serving.kv_cache.enable_reuse,
                        **({"max_lora_rank": max_lora_rank(ctx.max_adapter_rank or 1), "max_loras": len(ctx.adapters)}
                           if ctx.adapters else {}))

    def model_repository(self, plan: PlanView, where: Locations, render: Renderer) -> ModelRepository:
        body = json.dumps(engine_args(plan, where.checkpoint, where.tokenizer), indent=2) + "\n"
        # JSON has no comments, so model.json cannot carry the generated-file header; config.pbtxt does.
        files = {f"{MODEL}/config.pbtxt": model_config(plan, render.header), f"{MODEL}/1/model.json": body.encode()}
        if plan.adapters:
            loras = {a.name: a.path for a in plan.adapters}
            files[f"{MODEL}/1/{MULTI_LORA}"] = (json.dumps(loras, indent=2) + "\n").encode()
        return ModelRepository(files, {MODEL: BACKEND})

    def check_repository(self, repo: Path) -> list[tuple[str, str]]:
        """Every key of a vLLM model's 1/model.json is an EngineArgs field tritongen checked."""
        findings = []
        for path in sorted(repo.glob("*/1/model.json")):
            rel = str(path.relative_to(repo))
            try:
                data = json.loads(path.read_text())
            except ValueError as err:
                findings.append((rel, f"is not valid JSON: {err}"))
                continue
            if not isinstance(data, dict) or "model" not in data:
                findings.append((rel, "names no model (the checkpoint vLLM loads)"))
                continue
            findings += [(rel, f"{key!r} is not a vLLM EngineArgs field tritongen checked") for key in data
                         if key not in ENGINE_ARGS_KEYS]
        return findings

    def image(self) -> str:
        return IMAGE

    def server_command(self, plan: PlanView, world_size: int, repository: str, ports: tuple[int, int, int],
                       extra_args: Sequence[str]) -> list[str]:
        http, grpc, metrics = ports
        return [TRITONSERVER, f"--model-repository={repository}", f"--http-port={http}", f"--grpc-port={grpc}",
                f"--metrics-port={metrics}", *extra_args]

    def weights_in_container(self, settings: RuntimeSettings, checkpoint: str, engine: str,
                             models: str) -> RuntimeSettings:
        return settings.model_copy(update={"checkpoint_dir": checkpoint})

    def not_embedded(self) -> str:
        return f"vllm serves Triton's vLLM backend, which only {IMAGE} carries; the embedded tritonserver has no vLLM"

    def dialect(self) -> Dialect:
        return DIALECT


RUNTIME = VllmRuntime()

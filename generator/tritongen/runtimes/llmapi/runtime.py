"""The trtllm runtime: NVIDIA's llmapi Triton model (TensorRT-LLM's LLM API, PyTorch backend, no engine build),
the whole repository on its own. The runtime object; model.yaml, parameters and launch are in __init__."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tritongen.core import Locations, PlanView, SpecView
from tritongen.errors import SpecError, problem
from tritongen.runtimes.llmapi import contract, model as llmapi_model
from tritongen.runtimes.base import (Dialect, Knob, ModelRepository, PlanContext, Renderer, Runtime, Signal, quantity,
                                     serving_knobs)
from tritongen.runtimes.llmapi.dialect import DIALECT
from tritongen.runtimes.llmapi.settings import LlmApiPlan, make_llmapi_plan
from tritongen.runtimes.llmapi.spec import LlmApiSection
from tritongen.runtimes.tensorrtllm.release import TRTLLM, upstream


_KV_QUANT_ALGO = {"auto": None, "fp8": "FP8", "int8": "INT8"}


def llmapi_instances(spec: SpecView) -> int:
    """Model instances per server group: one. Several instances in one server need the llmapi model's
    gpu_device_ids parameter, which TensorRT-LLM 1.2.1 is not known to have (it came to main as a feature in
    February 2026: tests/doubles/llmapi/facts.json); each GPU or MIG slice gets a server instead."""
    if spec.placement.instances_per_gpu > 1:
        raise SpecError(problem(
            "placement.instances_per_gpu", f"is {spec.placement.instances_per_gpu}, and NVIDIA's llmapi model in "
            f"TensorRT-LLM {TRTLLM.version} runs one instance per tritonserver (several need its gpu_device_ids "
            "parameter, which this release is not known to have)",
            "set it to 1: placement runs one tritonserver per GPU (or MIG slice); raise llmapi.runtime_max_batch_size for "
            "more requests per GPU"))
    return 1


BACKEND = "python"
"""NVIDIA's llmapi model is a python model (its code comes from the serving container)."""


class LlmApiRuntime(Runtime[LlmApiPlan]):
    name = "trtllm"

    def adapters_refused(self, spec: SpecView) -> str | None:
        # tests/fixtures/nvidia/trtllm-1.2.1.json: the llmapi model.py read (044a90d2) passes no LoRA request to
        # generate_async; the lora_id/lora_name/lora_path inputs appear only with a later helpers.py.
        return (f"the LLM-API Triton model of TensorRT-LLM {TRTLLM.version} passes no LoRA request to the LLM "
                "(its model.py calls generate_async without lora_request; per-request lora_id/lora_name/lora_path "
                "came with a later release), so no adapter could be chosen per request")
    settings = LlmApiPlan
    spec_section = LlmApiSection
    summary = (f"NVIDIA's llmapi model (LLM API, PyTorch backend, no engine build; TensorRT-LLM {TRTLLM.version}, "
               f"{TRTLLM.container})")
    executed_here = ("with a stand-in: the rendered config.pbtxt and model.yaml served by the embedded tritonserver "
                     "with a test double in place of NVIDIA's model code (tests/doubles/llmapi; streamed, unstreamed, "
                     "cancellation, bad requests, OpenAI chat, load-test sweep, verify --load); NVIDIA's model.py "
                     "and TensorRT-LLM never ran here")
    upstream = upstream("NVIDIA's llmapi model (triton_backend/all_models/llmapi)",
                        "model.py, helpers.py, config.pbtxt, llm_args.py and sampling_params.py of NVIDIA/TensorRT-LLM "
                        "at the commits in tests/doubles/llmapi/facts.json (the v1.2.1 tag is over the snapshot "
                        "limit); image and driver: server docs/introduction/compatibility.md, r26.07 at 819ee377")
    choice = ("NVIDIA's LLM-API model, maintained upstream; no engine build; pick it on GPUs with the TensorRT-LLM "
              "container")
    ensemble = False
    runs_on_cpu = False
    honours_stream_interval = False
    group_configs = False  # one model.yaml for every group (the smallest budget)
    embedded = False

    def guided_decoding(self, spec: SpecView) -> tuple[tuple[str, ...], str]:
        # agent-features.md section 2: model.py builds SamplingParams from sampling_param_* inputs only, and none
        # carries a guide (tests/doubles/llmapi/facts.json).
        return (), (f"refused: NVIDIA's llmapi model of TensorRT-LLM {TRTLLM.version} ({TRTLLM.container}) has no "
                    "guided-decoding input; use runtime tensorrtllm, vllm or hf")

    def max_seq_len(self, spec: SpecView) -> int | None:
        return spec.llmapi.max_seq_len

    def context_length(self, checkpoint_config: dict[str, Any]) -> int | None:
        # The model serves what the checkpoint supports, so a real request is never refused for a length the
        # load profile happened not to use; llmapi.max_seq_len lowers it.
        value = checkpoint_config.get("max_position_embeddings")
        return int(value) if value else None

    def instances_per_device(self, spec: SpecView) -> int:
        return llmapi_instances(spec)

    def kv_sequences(self, spec: SpecView, max_batch_size: int) -> int | None:
        # Unset, its batch is sized from the KV budget (as trtllm-bench does), not the other way round.
        return spec.llmapi.runtime_max_batch_size

    def memory_model(self, spec: SpecView, plan: PlanView) -> tuple[Path, dict[str, Any]]:
        s = spec.llmapi
        dtype = None if spec.model.dtype == "auto" else spec.model.dtype
        return Path(plan.paths.checkpoint), {"dtype": dtype, "kv_cache_quant_algo": _KV_QUANT_ALGO[s.kv_cache_dtype],
                                             "tp": s.tp_size, "pp": s.pp_size, "max_batch_size": s.runtime_max_batch_size}

    def llm_instance_group(self, spec: SpecView, placed: bool) -> dict[str, Any]:
        # The llmapi model places itself on the devices its server sees; Triton sees a CPU instance.
        return {"kind": "KIND_CPU", "count": llmapi_instances(spec)}

    def plan_settings(self, ctx: PlanContext, prepared: LlmApiPlan | None) -> LlmApiPlan:
        assert ctx.tokenizer is not None
        # One model.yaml serves every server group, so it holds the budget every group can hold.
        return make_llmapi_plan(ctx.spec, str(ctx.checkpoint), ctx.tokenizer.dir if ctx.spec.model.tokenizer else None,
                                max_seq_len=ctx.max_seq_len, kv_tokens=ctx.kv_tokens)

    def model_repository(self, plan: PlanView, where: Locations, render: Renderer) -> ModelRepository:
        settings = self.own(plan)
        tokenizer = where.tokenizer if settings.tokenizer_dir else None
        config = render.template("llmapi/config.pbtxt.j2", plan, inputs=contract.INPUTS,
                                 outputs=contract.OUTPUTS, params={}, backend=BACKEND,
                                 group=plan.llm_instance_group, model_dir=TRTLLM.llmapi_model_dir)
        model_yaml = llmapi_model.model_yaml_text(plan, render.header, where.checkpoint, tokenizer)
        return ModelRepository({"tensorrt_llm/1/model.yaml": model_yaml, "tensorrt_llm/config.pbtxt": config},
                               {"tensorrt_llm": BACKEND})

    def completes_own_config(self, repo: Path) -> bool:
        return llmapi_model.completes_own_config(repo)

    def missing_model_code(self, repo: Path) -> tuple[str, str, str] | None:
        if not self.completes_own_config(repo) or (repo / "tensorrt_llm" / "1" / "model.py").is_file():
            return None
        return (f"{repo}/tensorrt_llm/1/model.py",
                "missing: NVIDIA's llmapi model code is not part of the rendered repository (the TensorRT-LLM "
                "container adds it at launch)",
                "copy model.py and helpers.py from the container's llmapi model folder into tensorrt_llm/1/ to load "
                "it here (it needs TensorRT-LLM), or deploy it")

    def check_repository(self, repo: Path) -> list[tuple[str, str]]:
        """Every key of an llmapi model's 1/model.yaml is one the pinned release's LLM(...) and model.py accept."""
        import yaml

        c = contract
        nested = {"kv_cache_config": c.KV_CACHE_CONFIG_KEYS, "cuda_graph_config": c.CUDA_GRAPH_CONFIG_KEYS,
                  "triton_config": c.TRITON_CONFIG_KEYS}
        findings = []
        for path in sorted(repo.glob("*/1/model.yaml")):
            rel = str(path.relative_to(repo))
            try:
                data = yaml.safe_load(path.read_text())
            except yaml.YAMLError as err:
                findings.append((rel, f"is not valid YAML: {err}"))
                continue
            if not isinstance(data, dict) or "triton_config" not in data:
                findings.append((rel, "has no triton_config block (max_batch_size, decoupled)"))
                continue
            for key, value in data.items():
                if key not in c.LLM_ARGS_KEYS | {"triton_config"}:
                    findings.append((rel, f"{key!r} is not an LlmArgs field tritongen checked for the release"))
                elif key in nested and isinstance(value, dict):
                    findings += [(rel, f"{key}.{k!r} is not a field of {key}") for k in value if k not in nested[key]]
        return findings

    def knobs(self, spec: SpecView) -> list[Knob]:
        return serving_knobs(self, spec) + [Knob("llmapi.max_num_tokens", 256, 16384, log=True,
                                                 why="tokens per forward pass: prefill throughput vs ITL",
                                                 admits=True)]

    def image(self) -> str:
        return TRTLLM.container

    def server_command(self, plan: PlanView, world_size: int, repository: str, ports: tuple[int, int, int],
                       extra_args: Sequence[str]) -> list[str]:
        return llmapi_model.launch_command(repository, ports, extra_args=tuple(extra_args))

    def hpa_signals(self, plan: PlanView) -> list[Signal]:
        """The model hands each request to its engine inside execute and returns, so Triton's pending count stays
        0 and its success counter counts arrivals (docs/deploy.md); it exports no gauge. The per-pod arrival rate
        moves with the load."""
        return [Signal("tritongen_request_rate", 'nv_inference_request_success{model="tensorrt_llm",pod!=""}',
                       'sum by (<<.GroupBy>>) (rate(nv_inference_request_success{<<.LabelMatchers>>,'
                       'model="tensorrt_llm"}[1m]))',
                       quantity(plan.deploy.hpa_requests_per_s), "requests per second arriving at the model")]

    def not_embedded(self) -> str:
        return (f"trtllm serves NVIDIA's llmapi model, which needs TensorRT-LLM {TRTLLM.version} inside "
                f"{TRTLLM.container}; the embedded tritonserver cannot load it")

    def dialect(self) -> Dialect:
        return DIALECT


RUNTIME = LlmApiRuntime()

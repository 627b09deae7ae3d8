"""The trtllm runtime: NVIDIA's llmapi Triton model (TensorRT-LLM's LLM API, PyTorch backend, no engine build),
the whole repository on its own. The runtime object; model.yaml, parameters and launch are in __init__."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritongen.runtimes import llmapi
from tritongen.runtimes.base import LoadTarget, PlanContext, Renderer, Runtime, RuntimeSettings
from tritongen.runtimes.llmapi.plan import LlmApiPlan, make_llmapi_plan
from tritongen.runtimes.tensorrtllm.release import TRTLLM

if TYPE_CHECKING:
    from tritongen.plan.model import Plan
    from tritongen.render import Locations
    from tritongen.spec import Spec

_KV_QUANT_ALGO = {"auto": None, "fp8": "FP8", "int8": "INT8"}


def llmapi_instances(spec: Spec) -> int:
    """Model instances per server group: a tensor/pipeline-parallel model takes the group."""
    return 1 if spec.llmapi.tp_size * spec.llmapi.pp_size > 1 else spec.placement.instances_per_gpu


class LlmApiRuntime(Runtime):
    name = "trtllm"
    settings = LlmApiPlan
    summary = (f"NVIDIA's llmapi model (LLM API, PyTorch backend, no engine build; TensorRT-LLM {TRTLLM.version}, "
               f"{TRTLLM.container})")
    executed_here = "no: rendered and checked against the release's files (tests/fixtures/nvidia); not served here"
    choice = ("NVIDIA's LLM-API model, maintained upstream; no engine build; pick it on GPUs with the TensorRT-LLM "
              "container")
    ensemble = False
    runs_on_cpu = False
    honours_stream_interval = False
    group_configs = False  # one model.yaml for every group (the smallest budget)
    embedded = False

    def max_seq_len(self, spec: Spec) -> int | None:
        return spec.llmapi.max_seq_len

    def instances_per_device(self, spec: Spec) -> int:
        return llmapi_instances(spec)

    def memory_model(self, spec: Spec, checkpoint: Path, engine_dir: Path | None) -> tuple[Path, dict[str, Any]]:
        s = spec.llmapi
        dtype = None if spec.model.dtype == "auto" else spec.model.dtype
        return checkpoint, {"dtype": dtype, "kv_cache_quant_algo": _KV_QUANT_ALGO[s.kv_cache_dtype],
                            "tp": s.tp_size, "pp": s.pp_size, "max_batch_size": s.max_batch_size}

    def llm_instance_group(self, spec: Spec, placed: bool) -> dict[str, Any]:
        # The llmapi model places itself (gpu_device_ids per instance); Triton sees CPU instances.
        return {"kind": "KIND_CPU", "count": llmapi_instances(spec)}

    def plan_settings(self, ctx: PlanContext, prepared: RuntimeSettings | None) -> LlmApiPlan:
        assert ctx.tokenizer is not None
        # One model.yaml serves every server group, so it holds the budget every group can hold.
        return make_llmapi_plan(ctx.spec, str(ctx.checkpoint), ctx.tokenizer.dir if ctx.spec.model.tokenizer else None,
                                max_seq_len=ctx.max_seq_len, kv_tokens=ctx.kv_tokens,
                                instances=llmapi_instances(ctx.spec))

    def model_files(self, plan: Plan, where: Locations, render: Renderer) -> dict[str, bytes]:
        settings = plan.runtime_settings
        assert isinstance(settings, LlmApiPlan)
        tokenizer = where.tokenizer if settings.tokenizer_dir else None
        config = render.template("llmapi/config.pbtxt.j2", plan, inputs=llmapi.contract.INPUTS,
                                 outputs=llmapi.contract.OUTPUTS, params=llmapi.parameters(plan),
                                 group=plan.llm_instance_group, model_dir=TRTLLM.llmapi_model_dir)
        return {"tensorrt_llm/1/model.yaml": llmapi.model_yaml_text(plan, render.header, where.checkpoint, tokenizer),
                "tensorrt_llm/config.pbtxt": config}

    def check_repository(self, repo: Path) -> list[tuple[str, str]]:
        """Every key of an llmapi model's 1/model.yaml is one the pinned release's LLM(...) and model.py accept."""
        import yaml

        c = llmapi.contract
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

    def image(self) -> str:
        return TRTLLM.container

    def server_command(self, plan: Plan, world_size: int, repository: str, ports: tuple[int, int, int],
                       extra_args: Sequence[str]) -> list[str]:
        return llmapi.launch_command(repository, ports, extra_args=tuple(extra_args))

    def not_embedded(self) -> str:
        return (f"trtllm serves NVIDIA's llmapi model, which needs TensorRT-LLM {TRTLLM.version} inside "
                f"{TRTLLM.container}; the embedded tritonserver cannot load it")

    def load_target(self) -> LoadTarget:
        return LoadTarget(model="tensorrt_llm", dialect="llmapi",
                          why="the trtllm runtime is load-tested through NVIDIA's LLM-API model tensorrt_llm alone")


RUNTIME = LlmApiRuntime()

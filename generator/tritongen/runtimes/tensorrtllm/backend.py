"""The C++ tensorrtllm backend for one pinned release: engine build commands, tensorrt_llm model parameters, launch
argv.

Everything here is pure (the Plan or its tensorrtllm section in, argv / strings out) so it can be golden-tested
without TensorRT-LLM. The spec becomes the section (settings.py) while planning (runtime.py); running the build and
caching engines is in generator/tritongen/runtimes/tensorrtllm/build.py; engine-vs-plan checks are in
generator/tritongen/runtimes/tensorrtllm/checks.py.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from collections.abc import Sequence
from typing import Literal, cast

from tritongen.core import PlanView, Ports
from tritongen.runtimes.tensorrtllm.lora import build_flags
from tritongen.runtimes.tensorrtllm.lora_cache import cache_parameters
from tritongen.runtimes.tensorrtllm.release import TRTLLM
from tritongen.runtimes.tensorrtllm.settings import BuildSettings, TensorrtllmPlan
from tritongen.runtimes.tensorrtllm import xgrammar_info

# Where the docker build mounts the TensorRT-LLM checkout's examples folder (see trtllm_build).
CONTAINER_EXAMPLES = "/tritongen/examples"

# Architectures whose HF checkpoints examples/models/core/llama/convert_checkpoint.py converts.
LLAMA_FAMILY = ("LlamaForCausalLM", "MistralForCausalLM")

DEFAULT_MAX_NUM_TOKENS = 8192

# quantize.py --qformat for each spec quantisation; used whenever calibration is needed
# (BuildSettings.needs_calibration).
_QFORMAT = {
    "none": "full_prec",
    "fp8": "fp8",
    "int8_weight_only": "int8_wo",
    "int4_weight_only": "int4_wo",
    "int4_awq": "int4_awq",
    "smoothquant": "int8_sq",
}
_WEIGHT_ONLY_PRECISION = {"int8_weight_only": "int8", "int4_weight_only": "int4"}


def build_commands(s: BuildSettings, checkpoint_dir: str | os.PathLike[str], output_dir: str | os.PathLike[str], *,
                   converted_dir: str | os.PathLike[str] | None = None, examples_dir: str = CONTAINER_EXAMPLES,
                   python: str = "python3", calibration_dir: str | os.PathLike[str] | None = None) -> list[list[str]]:
    """argv of the checkpoint conversion and the trtllm-build that turn a HF checkpoint into an engine.

    Paths are used as given (container paths for the docker build, host paths for a local one). The converted
    TensorRT-LLM checkpoint goes to `converted_dir` (default: `tllm_checkpoint` next to `output_dir`).
    `calibration_dir` is the local calibration dataset quantize.py reads (None: its hub default).
    """
    out = os.fspath(output_dir)
    converted = (os.fspath(converted_dir) if converted_dir is not None
                 else str(PurePosixPath(out).parent / "tllm_checkpoint"))
    source = ["--model_dir", os.fspath(checkpoint_dir), "--output_dir", converted, "--dtype", s.dtype,
              "--tp_size", str(s.tp_size), "--pp_size", str(s.pp_size)]
    if s.needs_calibration:
        convert = [python, f"{examples_dir}/{TRTLLM.quantize_script}", *source, "--qformat", _QFORMAT[s.quantization]]
        if s.kv_cache_dtype != "auto":
            convert += ["--kv_cache_dtype", s.kv_cache_dtype]
        if calibration_dir is not None:
            convert += ["--calib_dataset", os.fspath(calibration_dir)]
    else:
        convert = [python, f"{examples_dir}/{TRTLLM.convert_script}", *source]
        if s.quantization in _WEIGHT_ONLY_PRECISION:
            convert += ["--use_weight_only", "--weight_only_precision", _WEIGHT_ONLY_PRECISION[s.quantization]]
    build = [
        "trtllm-build", "--checkpoint_dir", converted, "--output_dir", out,
        "--max_batch_size", str(s.max_batch_size),
        "--max_input_len", str(s.max_input_len),
        "--max_seq_len", str(s.max_seq_len),
        "--max_num_tokens", str(s.max_num_tokens),
        "--max_beam_width", str(s.max_beam_width),
        "--gemm_plugin", s.gemm_plugin,
        # `--paged_kv_cache enable` is the deprecated spelling of this flag in the 1.x build command.
        "--kv_cache_type", s.kv_cache_type,
        "--remove_input_padding", "enable",
        "--use_paged_context_fmha", "enable" if s.use_paged_context_fmha else "disable",
    ]
    if s.lora is not None:
        build += build_flags(s.lora, s.dtype)
    if s.world_size > 1:
        # One build process per rank engine instead of building the ranks one after another.
        build += ["--workers", str(s.world_size)]
    return [convert, build]


def _flag(value: bool) -> str:
    return "true" if value else "false"


def id_groups(groups: Sequence[Sequence[int]] | None) -> str:
    # The backend splits instances on ';' and the ids of one instance on ','.
    return ";".join(",".join(str(i) for i in group) for group in groups) if groups else ""


def tensorrt_llm_parameters(plan: PlanView, engine_dir: str | os.PathLike[str], gpu_device_ids: str,
                            kv_tokens: int | None, participant_ids: str = "",
                            free_gpu_bytes: int | None = None, lora_dir: str | None = None) -> dict[str, str]:
    """The `parameters` of the tensorrt_llm model (C++ backend), every key of the pinned release, as literals.

    Everything comes from the Plan; `engine_dir` is where the server sees the engine (a host or container path),
    `gpu_device_ids` and `kv_tokens` are the server group's (or the plan's defaults); `free_gpu_bytes` the GPU
    memory its smallest device has free after the engine loads (the placement's; None without one), of which the
    LoRA cache takes its planned share; `lora_dir` where the server sees the converted adapters (None: the plan's
    prefetch folder).
    An empty string means "not set": the backend then logs that the parameter is not specified and uses its
    own default, exactly as for a template placeholder left unfilled. Values the backend defaults are written
    out where the default is documented, so a rendered config does not depend on the backend version's defaults
    (enable_kv_cache_reuse flipped from false to true in v0.19).
    """
    trt = cast(TensorrtllmPlan, plan.runtime_settings)
    beam = trt.build.max_beam_width
    return {
        "max_beam_width": str(beam),
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "gpt_model_type": trt.batching_strategy,
        "gpt_model_path": os.fspath(engine_dir),
        "encoder_model_path": "",
        "max_tokens_in_paged_kv_cache": str(kv_tokens) if kv_tokens is not None else "",
        "max_attention_window_size": "",
        "sink_token_length": "",
        "batch_scheduler_policy": trt.batch_scheduler_policy,
        "kv_cache_free_gpu_mem_fraction": str(trt.kv_cache_free_gpu_mem_fraction),
        "cross_kv_cache_fraction": "",
        "kv_cache_host_memory_bytes": str(trt.kv_cache_host_memory_bytes),
        "kv_cache_onboard_blocks": "true",
        "enable_trt_overlap": "false",
        "exclude_input_in_output": _flag(plan.exclude_input_in_output),
        "cancellation_check_period_ms": "100",
        "stats_check_period_ms": "100",
        "iter_stats_max_iterations": "1000",
        "request_stats_max_iterations": "0",
        "enable_kv_cache_reuse": _flag(trt.enable_kv_cache_reuse),
        "normalize_log_probs": "true",
        "enable_chunked_context": _flag(trt.enable_chunked_context),
        "gpu_device_ids": gpu_device_ids,
        "participant_ids": participant_ids,
        "num_nodes": "1",
        "lora_cache_optimal_adapter_size": "8",
        "lora_cache_max_adapter_size": "64",
        "lora_cache_gpu_memory_fraction": "0.05",
        "lora_cache_host_memory_bytes": str(1 << 30),
        "lora_prefetch_dir": "",
        **(cache_parameters(trt.lora, free_gpu_bytes, lora_dir) if trt.lora is not None else {}),
        "decoding_mode": "top_k_top_p" if beam == 1 else "beam_search",
        "executor_worker_path": TRTLLM.executor_worker_path,
        "lookahead_window_size": "",
        "lookahead_ngram_size": "",
        "lookahead_verification_set_size": "",
        "medusa_choices": "",
        "eagle_choices": "",
        "gpu_weights_percent": "1.0",
        "enable_context_fmha_fp32_acc": "false",
        "multi_block_mode": "true",
        "cuda_graph_mode": "false",
        "cuda_graph_cache_size": "0",
        "speculative_decoding_fast_logits": "false",
        # Guided decoding (docs/structured-output.md): the C++ backend ignores tokenizer_dir and builds XGrammar's
        # vocabulary from the tokenizer-info file, which the engine build writes next to the engine.
        "tokenizer_dir": "",
        "guided_decoding_backend": plan.structured_output.backend,
        "xgrammar_tokenizer_info_path": str(PurePosixPath(os.fspath(engine_dir)) / xgrammar_info.FILE),
        "recv_poll_period_ms": "0",
    }


def launch_command(world_size: int, repo_dir: str | os.PathLike[str], ports: Ports, *,
                   mode: Literal["leader", "orchestrator"] = "leader", tritonserver: str = TRTLLM.tritonserver,
                   llm_model_name: str = "tensorrt_llm") -> list[str]:
    """argv that serves a model repository whose tensorrt_llm engine spans `world_size` GPUs.

    Leader mode (as NVIDIA's scripts/launch_triton_server.py): one tritonserver per MPI rank in one mpirun, each
    its own app context (`-n 1 ... :`) because ranks differ: rank 0 loads the whole repository and serves; other
    ranks load only the LLM model (explicit model control) and sit in the executor as workers. Each rank needs its
    own python-backend shared-memory prefix. All ranks get the same ports; only rank 0 binds them.

    Orchestrator mode: one tritonserver without mpirun, started with `orchestrator_env()`; the backend spawns
    trtllmExecutorWorker processes itself. Its instances must carry `gpu_device_ids`, and `participant_ids` when
    spawning is disabled. A single-GPU engine needs neither MPI nor an orchestrator.
    """
    repo = os.fspath(repo_dir)

    def rank_argv(rank: int) -> list[str]:
        argv = [tritonserver, f"--model-repository={repo}", f"--grpc-port={ports.grpc}",
                f"--http-port={ports.http}", f"--metrics-port={ports.metrics}"]
        if rank != 0:
            argv += ["--model-control-mode=explicit", f"--load-model={llm_model_name}"]
        return argv + ["--disable-auto-complete-config",
                       f"--backend-config=python,shm-region-prefix-name=prefix{rank}_"]

    if world_size == 1 or mode == "orchestrator":
        return rank_argv(0)
    argv = ["mpirun", "--allow-run-as-root"]
    for rank in range(world_size):
        argv += [*([":"] if rank else []), "-n", "1", *rank_argv(rank)]
    return argv


def orchestrator_env(spawn_processes: bool = True) -> dict[str, str]:
    """Environment of a tritonserver in orchestrator mode (launch_command(mode="orchestrator"))."""
    return {"TRTLLM_ORCHESTRATOR": "1", "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES": "1" if spawn_processes else "0"}


def ensemble_server_command(world_size: int, repository: str, ports: Sequence[int],
                            extra_args: Sequence[str]) -> list[str]:
    """launch_command for a repository with the C++ model's tensors, `extra_args` given to every tritonserver."""
    out = []
    for arg in launch_command(world_size, repository, Ports(*ports)):
        out.append(arg)
        if arg == TRTLLM.tritonserver:
            out.extend(extra_args)
    return out

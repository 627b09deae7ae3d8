"""NVIDIA's llmapi Triton model for the LLM-API runtime (`trtllm`), configured through `1/model.yaml`.

Pure: a Plan in, the model.yaml mapping and the launch argv out. The model tokenizes and detokenizes itself, so
the repository holds this one model (no preprocessing, postprocessing or ensemble), and no engine is built: the
PyTorch backend loads the Hugging Face checkpoint named in model.yaml.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, cast

import yaml

from tritongen.core import PlanView
from tritongen.runtimes.llmapi import contract
from tritongen.runtimes.llmapi.settings import LlmApiPlan
from tritongen.runtimes.tensorrtllm.release import TRTLLM



def model_yaml(plan: PlanView, checkpoint: str | None = None, tokenizer: str | None = None) -> dict[str, Any]:
    """model.yaml as a mapping: LlmArgs fields of the pinned release plus the model's triton_config block.

    `checkpoint`/`tokenizer` are the paths the server sees (default: the plan's host paths).
    """
    p = cast(LlmApiPlan, plan.runtime_settings)
    kv: dict[str, Any] = {"free_gpu_memory_fraction": p.kv_free_gpu_memory_fraction,
                          "enable_block_reuse": p.enable_block_reuse, "dtype": p.kv_cache_dtype}
    if plan.kv_tokens is not None:
        # With both set, the LLM API takes the smaller budget; the absolute one is what placement sized.
        kv["max_tokens"] = plan.kv_tokens
    data: dict[str, Any] = {"model": checkpoint or p.checkpoint_dir}
    if p.tokenizer_dir:
        data["tokenizer"] = tokenizer or p.tokenizer_dir
    data.update({
        "backend": "pytorch",
        "dtype": p.dtype,
        "trust_remote_code": p.trust_remote_code,
        "tensor_parallel_size": p.tp,
        "pipeline_parallel_size": p.pp,
        **({"max_batch_size": p.max_batch_size} if p.max_batch_size else {}),
        **({"max_num_tokens": p.max_num_tokens} if p.max_num_tokens else {}),
        "max_seq_len": p.max_seq_len,
        "enable_chunked_prefill": p.enable_chunked_prefill,
        "kv_cache_config": kv,
        "cuda_graph_config": (None if not p.cuda_graphs else
                              {"batch_sizes": list(p.cuda_graph_batch_sizes), "enable_padding": p.cuda_graph_padding}
                              if p.cuda_graph_batch_sizes else {"enable_padding": p.cuda_graph_padding}),
        "triton_config": {"max_batch_size": contract.TRITON_MAX_BATCH_SIZE, "decoupled": plan.decoupled},
    })
    return data


def model_yaml_text(plan: PlanView, header: str, checkpoint: str | None = None, tokenizer: str | None = None) -> bytes:
    body = yaml.safe_dump(model_yaml(plan, checkpoint, tokenizer), sort_keys=False, default_flow_style=None,
                          width=120)
    return f"{header}\n{body}".encode()


def completes_own_config(repo: str | Path) -> bool:
    """True for a repository holding the llmapi model: its config.pbtxt leaves decoupled and max_batch_size to
    the model's auto_complete_config (from 1/model.yaml), so tritonserver must run with auto-completion on."""
    return (Path(repo) / "tensorrt_llm" / "1" / "model.yaml").is_file()


def launch_command(repo_dir: str, ports: tuple[int, int, int], *, tritonserver: str = TRTLLM.tritonserver,
                   extra_args: tuple[str, ...] = ()) -> list[str]:
    """argv of one tritonserver for a trtllm repository, inside the pinned container.

    The repository is copied to a writable folder and NVIDIA's model.py/helpers.py are added from the container,
    so the rendered repository stays the reviewable part and the model code is the release's own. No mpirun: a
    tensor-parallel LLM spawns its workers itself. One model instance per server (runtime.py llmapi_instances
    says why). Auto-complete stays on: the model takes decoupled and max_batch_size from model.yaml there.
    """
    http, grpc, metrics = ports
    work = "/tmp/tritongen-repository"
    server = [tritonserver, f"--model-repository={work}", f"--http-port={http}", f"--grpc-port={grpc}",
              f"--metrics-port={metrics}", *extra_args]
    script = (f"rm -rf {work} && cp -r {shlex.quote(repo_dir)} {work} && "
              f"cp {TRTLLM.llmapi_model_dir}/model.py {TRTLLM.llmapi_model_dir}/helpers.py {work}/tensorrt_llm/1/ && "
              f"exec {shlex.join(server)}")
    return ["bash", "-c", script]

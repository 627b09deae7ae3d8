"""LoRA adapters on the TensorRT engine path: the build's LoRA plugin flags, and each adapter converted into the
two tensors TensorRT-LLM's LoRA cache takes, written where the tensorrt_llm model prefetches them at load.

Facts (reference/agent-features.md section 5: tensorrtllm_backend docs/lora.md at 0b9d7d5, the backend's
config.pbtxt; NVIDIA/TensorRT-LLM examples/hf_lora_convert.py as stored at 05316d33, not tied to the 1.2.1 tag):
- trtllm-build takes `--lora_plugin <dtype> --lora_target_modules <modules...> --max_lora_rank <r>`;
- hf_lora_convert.py writes `model.lora_weights.npy` [1, rows, width] (each row one module of one layer: lora_A
  [r, in] flattened, then lora_B [out, r] times alpha / r (alpha / sqrt(r) with use_rslora) flattened, rows padded
  with zeros to the widest) and `model.lora_config.npy` [1, rows, 3] int32 rows [module id, layer, r];
- module ids: attn_qkv 0, attn_q 1, attn_k 2, attn_v 3, attn_dense 4, mlp_h_to_4h 5, mlp_4h_to_h 6, mlp_gate 7,
  and Llama's HF modules map q/k/v_proj -> attn_q/k/v, o_proj -> attn_dense, gate_proj -> mlp_h_to_4h,
  down_proj -> mlp_4h_to_h, up_proj -> mlp_gate;
- the model parameter `lora_prefetch_dir` names a folder of sub-folders named by numeric task id, each holding
  the two files, loaded when the model loads; a request then sends only `lora_task_id`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tritongen.core import AdapterPlan
from tritongen.errors import SpecError, problem

HF_TO_TRTLLM = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_dense",
                "gate_proj": "mlp_h_to_4h", "down_proj": "mlp_4h_to_h", "up_proj": "mlp_gate"}
MODULE_IDS = {"attn_qkv": 0, "attn_q": 1, "attn_k": 2, "attn_v": 3, "attn_dense": 4, "mlp_h_to_4h": 5,
              "mlp_4h_to_h": 6, "mlp_gate": 7}
WEIGHTS, CONFIG = "model.lora_weights.npy", "model.lora_config.npy"
STORAGE_DTYPE = "float16"
"""The tensorrt_llm model declares lora_weights TYPE_FP16; NVIDIA's conversion defaults to float16 storage too."""
_KEY = re.compile(r".*\.layers\.([0-9]+)\.(?:self_attn|mlp)\.([a-z_]+)\.lora_(A|B)\.weight.*")


class LoraBuild(BaseModel):
    """The engine's LoRA plugin: part of the build settings, so of the engine cache key."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    target_modules: tuple[str, ...]
    """TensorRT-LLM module names (attn_q, ...), the union over the adapters, in module-id order."""
    max_rank: int
    """--max_lora_rank: the plan's largest rank accepted."""


def lora_build(adapters: Sequence[AdapterPlan], max_rank: int | None) -> LoraBuild | None:
    """The build's LoRA settings for the plan's adapters; None without adapters. A module the engine path has no
    LoRA slot for is a SpecError naming the adapter."""
    if not adapters:
        return None
    modules = set()
    for adapter in adapters:
        where = f"model.adapters.{adapter.task_id - 1}.path"
        for target in adapter.target_modules:
            if target not in HF_TO_TRTLLM:
                raise SpecError(problem(where, f"target module {target!r} has no TensorRT-LLM LoRA module (the "
                                        f"engine path maps {', '.join(HF_TO_TRTLLM)})",
                                        "serve it with runtime hf or vllm, or use an adapter of those modules"))
            modules.add(HF_TO_TRTLLM[target])
    return LoraBuild(target_modules=tuple(sorted(modules, key=MODULE_IDS.__getitem__)),
                     max_rank=max_rank or max(a.rank for a in adapters))


def build_flags(lora: LoraBuild, dtype: str) -> list[str]:
    """The trtllm-build arguments of the LoRA plugin (its dtype: the engine's)."""
    return ["--lora_plugin", dtype, "--lora_target_modules", *lora.target_modules,
            "--max_lora_rank", str(lora.max_rank)]


def prefetch_key(adapters: Sequence[AdapterPlan]) -> str:
    """Content address of the converted adapters: their task ids and files (a changed adapter is a new folder)."""
    h = hashlib.sha256(f"schema 1 {STORAGE_DTYPE}".encode())
    for adapter in adapters:
        h.update(f"\0{adapter.task_id}\0".encode())
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            path = Path(adapter.path) / name
            h.update(name.encode())
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()[:32]


def convert_adapter(folder: str | os.PathLike[str]):
    """(lora_weights [1, rows, width] float16, lora_config [1, rows, 3] int32) of one PEFT adapter, in the layout
    of NVIDIA's hf_lora_convert.py (rows ordered by layer, then module id)."""
    import numpy as np
    from safetensors.numpy import load_file

    config = json.loads((Path(folder) / "adapter_config.json").read_text())
    rank, alpha = config["r"], config.get("lora_alpha", config["r"])
    scale = alpha / np.sqrt(rank) if config.get("use_rslora", False) else alpha / rank
    pairs: dict[tuple[int, str], dict[str, np.ndarray]] = {}
    for key, value in load_file(str(Path(folder) / "adapter_model.safetensors")).items():
        m = _KEY.match(key)
        if m is None:
            continue
        layer, module, side = int(m.group(1)), m.group(2), m.group(3)
        pairs.setdefault((layer, module), {})[side] = value.astype(np.float32)
    rows, configs = [], []
    for (layer, module), ab in sorted(pairs.items(), key=lambda kv: (kv[0][0], MODULE_IDS[HF_TO_TRTLLM[kv[0][1]]])):
        a, b = ab["A"], ab["B"]  # [r, in], [out, r]
        rows.append(np.concatenate([a.reshape(-1), (b * scale).reshape(-1)]))
        configs.append([MODULE_IDS[HF_TO_TRTLLM[module]], layer, a.shape[0]])
    width = max(len(r) for r in rows)
    weights = np.stack([np.pad(r, (0, width - len(r))) for r in rows])[np.newaxis].astype(np.float16)
    return weights, np.array(configs, dtype=np.int32)[np.newaxis]


def convert_commands(sources: dict[int, str], out: str, *, examples_dir: str) -> list[list[str]]:
    """argv that converts each PEFT folder (task id -> folder) into `out`/<task id>/ inside the serving container:
    NVIDIA's hf_lora_convert.py of the container's own TensorRT-LLM release, whose layout convert_adapter writes."""
    return [["python3", f"{examples_dir}/hf_lora_convert.py", "-i", folder, "-o", f"{out}/{task_id}",
             "--storage-type", STORAGE_DTYPE] for task_id, folder in sorted(sources.items())]


def write_prefetch(adapters: Sequence[AdapterPlan], target: str | os.PathLike[str]) -> bool:
    """Convert every adapter into `target`/<task id>/ (the lora_prefetch_dir layout), atomically; False when the
    content-addressed folder is already there."""
    import numpy as np

    target = Path(target)
    if all((target / str(a.task_id) / WEIGHTS).is_file() for a in adapters):
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for adapter in adapters:
            weights, config = convert_adapter(adapter.path)
            (work / str(adapter.task_id)).mkdir()
            np.save(work / str(adapter.task_id) / WEIGHTS, weights)
            np.save(work / str(adapter.task_id) / CONFIG, config)
        shutil.rmtree(target, ignore_errors=True)
        work.rename(target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return True

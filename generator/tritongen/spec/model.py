"""The `model` section: the checkpoint, the tokenizer and the LoRA adapters served with them."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from tritongen.errors import problem
from tritongen.spec_base import Problems, Section

ADAPTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""An adapter's name is the OpenAI `model` id that selects it: a path segment of `/v1/models/{id}` as it is, so no
`/` or `:` (Triton's OpenAI frontend puts its LoRA separator between model and adapter)."""


class AdapterSection(Section):
    """One LoRA adapter (a PEFT folder: adapter_config.json + adapter_model.safetensors) served with the base."""

    name: str
    """The adapter's public name: the OpenAI `model` that selects it and its name in vLLM's multi_lora.json. A
    letter or digit, then up to 63 letters, digits, `.`, `_`, `-`; unique, and not the base model's served name."""

    path: str
    """The PEFT adapter folder (relative paths are resolved against the spec file). Its adapter_config.json gives
    the rank and target modules; plan checks them and the weights' shapes against the base checkpoint."""


class ModelSection(Section):
    checkpoint: str
    """Local Hugging Face checkpoint folder (config.json + weights). Relative paths are resolved against the spec file."""

    tokenizer: str | None = None
    """Tokenizer folder loadable with AutoTokenizer.from_pretrained; defaults to `checkpoint`."""

    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    """Weight/activation dtype of the served model. `auto` keeps the checkpoint's dtype (float32 on CPU)."""

    add_special_tokens: bool = True
    """Passed to the tokenizer's encode in preprocessing (BOS etc.)."""

    skip_special_tokens: bool = True
    """Passed to the tokenizer's decode in postprocessing."""

    adapters: tuple[AdapterSection, ...] = ()
    """LoRA adapters served with the base model, chosen per request: Triton's `lora_task_id` input (the adapter's
    1-based position in this list, the numbering of Triton's OpenAI frontend; 0 or absent: the base model) or the
    OpenAI `model` (the adapter's name)."""

    max_adapter_rank: int | None = Field(None, ge=1, le=1024)
    """The largest LoRA rank the deployment accepts (vLLM's max_lora_rank, TensorRT-LLM's --max_lora_rank); an
    adapter of a higher rank is refused at plan. Default: the largest rank among `adapters`."""

    @model_validator(mode="after")
    def _adapter_names(self) -> ModelSection:
        problems, seen = [], {}
        for i, adapter in enumerate(self.adapters):
            where = f"model.adapters.{i}.name"
            if not ADAPTER_NAME.fullmatch(adapter.name):
                problems.append(problem(where, f"{adapter.name!r} is not usable as an OpenAI model id",
                                        "use a letter or digit, then at most 63 letters, digits, '.', '_', '-'"))
            elif adapter.name == "base":
                problems.append(problem(where, "'base' names the base model (validation.load.adapters)",
                                        "give the adapter another name"))
            elif adapter.name in seen:
                problems.append(problem(where, f"{adapter.name!r} is also the name of "
                                        f"model.adapters.{seen[adapter.name]}", "give every adapter its own name"))
            seen.setdefault(adapter.name, i)
        if self.max_adapter_rank is not None and not self.adapters:
            problems.append(problem("model.max_adapter_rank", "is set but model.adapters is empty",
                                    "remove it, or declare the adapters"))
        if problems:
            raise Problems("\n".join(problems))
        return self

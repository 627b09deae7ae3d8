"""The `model` section: the checkpoint and tokenizer."""

from __future__ import annotations

from typing import Literal

from tritongen.spec_base import Section


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

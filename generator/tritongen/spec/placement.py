"""The `placement` section: where the model runs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tritongen.spec_base import Section


class PlacementSection(Section):
    device: Literal["cpu", "gpu"] = "cpu"
    """Where the LLM model runs."""

    gpu_ids: list[int] = Field(default_factory=list)
    """GPU indices used when device is gpu; empty means [0]."""

    instances_per_gpu: int = Field(1, ge=1)
    """LLM model instances per GPU (hf runtime). trtllm: 1 (the pinned release's llmapi model runs one instance per
    server; each GPU or MIG slice gets a server)."""

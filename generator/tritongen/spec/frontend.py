"""The `frontend` section: the OpenAI-compatible frontend."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tritongen.spec_base import Section


class OpenAIFrontendSection(Section):
    enabled: bool = False
    """`serve`, `up` and deploy targets start the OpenAI-compatible frontend without being asked (`--openai`)."""

    port: int = Field(9000, ge=1, le=65535)
    """HTTP port of the OpenAI API."""

    served_model_name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
    """The public model name clients pass as `model` (the only name /v1/models lists); default: the spec's name."""

    triton_model: Literal["ensemble", "tensorrt_llm_bls"] = "tensorrt_llm_bls"
    """The Triton model the frontend calls (same tensors). tensorrt_llm_bls: a client that disconnects cancels its
    generation. `ensemble`: the same with serving.ensemble: bls (the BLS itself under that name); with
    serving.ensemble: triton, Triton's scheduler checks cancellation only between steps, so a dropped stream keeps
    generating to its end. Runtime trtllm: always tensorrt_llm (its only model)."""

    default_max_tokens: int | None = Field(None, ge=1)
    """Completion length when a request sets none; default: serving.max_tokens_default."""

    implementation: Literal["tritongen", "triton"] = "tritongen"
    """Deploy targets: tritongen's frontend (fronts any Triton, remote too), or Triton's own python/openai
    frontend inside the NGC container (in-process with the server)."""

    workers: int | None = Field(None, ge=1, le=64)
    """Worker processes of tritongen's frontend (sharing its port; each with its own gRPC channel, tokenizer and
    event loop). Unset: planned from the streams the servers carry at once (serving.max_batch_size x server
    groups), one worker per 48 streams, at most 16; `serve` lowers a planned count to half its host's cores, and
    a deployment's frontend pod requests one core per worker (docs/deploy.md, "OpenAI frontend workers").
    `tritongen serve --openai-workers N` overrides both."""


class FrontendSection(Section):
    openai: OpenAIFrontendSection = OpenAIFrontendSection()
    """The OpenAI-compatible HTTP API in front of the deployment."""

    chat_template: str | None = None
    """Jinja chat template file (relative to the spec) used instead of the tokenizer's own. The frontend applies
    it; preprocessing never does, so prompts are templated exactly once."""

    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Name of the environment variable holding the API key clients must send (`Authorization: Bearer ...`).
    Only the name is stored in rendered files, never the key."""

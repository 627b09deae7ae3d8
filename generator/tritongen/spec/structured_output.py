"""The `structured_output` section: constrained decoding (guided decoding) and tool calls, for every runtime."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tritongen.spec_base import Section


class StructuredOutputSection(Section):
    backend: Literal["xgrammar"] = "xgrammar"
    """The grammar library that turns a guide into token masks: XGrammar, the one TensorRT-LLM's Triton backend
    (`guided_decoding_backend`), vLLM and SGLang use. The hf runtime applies its masks inside its batched loop; the
    tensorrtllm runtime renders it as the tensorrt_llm model's `guided_decoding_backend`; the vllm runtime passes the
    guide to vLLM, which uses its own configured backend."""

    tool_call_format: Literal["auto", "llama3_json", "hermes", "mistral"] = "auto"
    """How the OpenAI frontend renders `tools` and parses the calls a model emits: `llama3_json` (Llama 3.x: a JSON
    object with `name` and `arguments`/`parameters`, optionally after `<|python_tag|>`), `hermes` (Hermes / Qwen:
    `<tool_call>{...}</tool_call>` blocks), `mistral` (`[TOOL_CALLS]` then a JSON array). auto: chosen from the
    tokenizer's chat template (the markers it contains)."""

    max_schema_bytes: int = Field(65536, ge=1, le=16 * 1024 * 1024)
    """Largest guide accepted (a JSON schema, regex or EBNF grammar, UTF-8 bytes). A larger one is refused with an
    error naming `guided_decoding_guide` (OpenAI: 400 naming the parameter) before it is compiled: compiling a guide
    costs CPU time that grows with its size."""

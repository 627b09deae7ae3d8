"""The synthetic runtime (a token source at a configured TTFT/ITL, no model): its tensorrt_llm model parameters."""

from __future__ import annotations

from tritongen.plan.model import Plan


NATIVE_BACKEND = "tritongen_tokensource"
"""The C++ token source (generator/native/tritongen_tokensource.cc), behaviour equal to the python model."""


def synthetic_backend(plan: Plan) -> str:
    """The Triton backend of the synthetic tensorrt_llm model (synthetic.source)."""
    assert plan.synthetic is not None
    return NATIVE_BACKEND if plan.synthetic.source == "native" else "python"


def synthetic_parameters(plan: Plan) -> dict[str, str]:
    """The `parameters` of the synthetic tensorrt_llm model (the same for both sources: see
    model_repository_templates/synthetic/model.py)."""
    syn = plan.synthetic
    assert syn is not None
    return {"ttft_ms": f"{syn.ttft_ms:g}", "itl_ms": f"{syn.itl_ms:g}", "vocab_size": str(plan.tokenizer.vocab_size),
            "end_id": str(plan.tokenizer.end_id), "pad_id": str(plan.tokenizer.pad_id),
            "stream_interval": str(plan.stream_interval)}

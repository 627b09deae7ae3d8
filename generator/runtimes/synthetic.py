"""The synthetic runtime (a token source at a configured TTFT/ITL, no model): its tensorrt_llm model parameters."""

from __future__ import annotations

from tritongen.plan.model import Plan


def synthetic_parameters(plan: Plan) -> dict[str, str]:
    """The `parameters` of the synthetic tensorrt_llm model (model_repository_templates/synthetic/model.py)."""
    syn = plan.synthetic
    assert syn is not None
    return {"ttft_ms": f"{syn.ttft_ms:g}", "itl_ms": f"{syn.itl_ms:g}", "vocab_size": str(plan.tokenizer.vocab_size),
            "end_id": str(plan.tokenizer.end_id), "pad_id": str(plan.tokenizer.pad_id),
            "stream_interval": str(plan.stream_interval)}

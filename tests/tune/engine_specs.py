"""Specs for the tune tests: the synthetic runtime with its engine model (a spec file; the engine-model evaluator
reads no checkpoint)."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

ENGINE_SPEC = {
    "version": 1, "name": "engine", "runtime": "synthetic", "model": {"checkpoint": "../build/tiny-llama"},
    "synthetic": {"engine": {"enabled": True}},
    "serving": {"max_batch_size": 4, "kv_cache": {"max_tokens": 4096}},
    "validation": {"load": {"users": 32, "spawn_rate": 1000, "duration_s": 16, "warmup_s": 4,
                            "input_tokens": {"mean": 128}, "output_tokens": {"mean": 64}},
                   "slo": {"ttft_p95_ms": 1000, "itl_p95_ms": 60}},
}


def engine_spec(tmp_path: Path, slo: dict | None = None, name: str = "engine.yaml", **load) -> Path:
    data = copy.deepcopy(ENGINE_SPEC)
    if slo is not None:
        data["validation"]["slo"] = slo
    data["validation"]["load"].update(load)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path

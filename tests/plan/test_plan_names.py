"""serving.max_batch_size and the KV-cache budget each have one name in the Plan, whatever the runtime.

The planner resolves each once (plan/make.py: max_batch_size, kv_tokens); runtimes read the Plan's value rather
than carrying a copy under a name of their own. A copy under another key (a runtime section's field, a renamed
top-level field) fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tritongen.cli import main

ROOT = Path(__file__).resolve().parents[2]
INVENTORIES = ROOT / "tests" / "fixtures" / "inventories"

BATCH = 37  # values no other plan field has by chance
KV_TOKENS = 12352

RUNTIMES = {
    "hf": {},
    "synthetic": {},
    "vllm": {"placement": {"device": "gpu"}},
    "tensorrtllm": {"placement": {"device": "gpu"}, "engine": {"gpu_arch": "sm90"}},
    "trtllm": {"placement": {"device": "gpu"}},
}


def names_holding(node, value, key: str = "") -> set[str]:
    """The keys (last path element) under which `value` occurs anywhere in a JSON document."""
    if isinstance(node, dict):
        return set().union(*(names_holding(v, value, k) for k, v in node.items()))
    if isinstance(node, list):
        return set().union(*(names_holding(v, value, key) for v in node))
    return {key} if node == value and not isinstance(node, bool) else set()


def plan_json(capsys, tmp_path: Path, tiny_spec_path: Path, runtime: str, *flags: str) -> dict:
    data = yaml.safe_load(tiny_spec_path.read_text())
    data["runtime"] = runtime
    for section, values in RUNTIMES[runtime].items():
        data[section] = {**data.get(section, {}), **values}
    data.setdefault("engine", {})["cache_dir"] = str(tmp_path / "engines")
    if runtime != "tensorrtllm":
        del data["engine"]
    data["serving"]["max_batch_size"] = BATCH
    data["serving"]["kv_cache"]["max_tokens"] = KV_TOKENS
    spec = tmp_path / f"{runtime}.yaml"
    spec.write_text(yaml.safe_dump(data))
    assert main(["plan", str(spec), "--json", *flags]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_batch_and_kv_budget_have_one_plan_name(capsys, tmp_path, tiny_spec_path, runtime, gpu_here):
    plan = plan_json(capsys, tmp_path, tiny_spec_path, runtime)
    assert (plan["max_batch_size"], plan["kv_tokens"]) == (BATCH, KV_TOKENS)
    assert names_holding(plan, BATCH) == {"max_batch_size"}
    assert names_holding(plan, KV_TOKENS) == {"kv_tokens"}


def test_with_a_placement_each_group_carries_its_budget_under_the_same_name(capsys, tmp_path, tiny_spec_path):
    plan = plan_json(capsys, tmp_path, tiny_spec_path, "vllm", "--inventory", str(INVENTORIES / "h200-2x3g.yaml"))
    assert [g["kv_tokens"] for g in plan["server_groups"]] == [KV_TOKENS, KV_TOKENS]
    assert names_holding(plan, BATCH) == {"max_batch_size"}
    assert names_holding(plan, KV_TOKENS) == {"kv_tokens"}


def test_the_check_finds_a_second_name():
    assert names_holding({"max_batch_size": BATCH, "runtime_settings": {"max_num_seqs": BATCH, "ok": [True]}},
                         BATCH) == {"max_batch_size", "max_num_seqs"}

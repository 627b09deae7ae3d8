"""Each runtime owns its section of the spec (runtimes/<name>/spec.py), and field names that moved still load for
one release: moved to their new path, with one warning naming the old and the new path, planned identically."""

from __future__ import annotations

import copy
import pkgutil
import warnings
from importlib import import_module
from pathlib import Path

import pytest
import yaml

import tritongen.spec
from tritongen.errors import SpecError
from tritongen.plan import plan_from_file
from tritongen.runtimes import RUNTIMES
from tritongen.spec import RUNTIME_SECTIONS, Spec, current_names, explain, load_spec, parse_spec
from tritongen.spec_base import RuntimeSection, SpecDeprecation

ROOT = Path(__file__).resolve().parents[2]
HF_KNOBS = {"max_batch_tokens": 128, "sampling": "greedy", "log_probs": False, "cancellation_check_period_ms": 50,
            "attention": "eager", "cuda_graphs": False, "stream_flush_ms": 20}


def moved(old: str, new: str) -> str:
    return f"{old}: is deprecated, renamed {new}; write {new} (the old name is accepted until the next release)"


def deprecations(load) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        result = load()
    return result, [str(w.message) for w in caught if issubclass(w.category, SpecDeprecation)]


def test_each_runtime_section_lives_in_its_runtime_package():
    owned = {r.spec_section: r for r in RUNTIMES.values() if r.spec_section is not None}
    assert set(owned) == set(RUNTIME_SECTIONS) and len(owned) >= 4
    for section, rt in owned.items():
        package = ".".join(type(rt).__module__.split(".")[:3])  # tritongen.runtimes.<package>
        assert section.__module__ == f"{package}.spec", (rt.name, section.__module__)
        assert Spec.model_fields[section.key].annotation is section
    # ... and none in spec/, which holds the shared sections only.
    for info in pkgutil.iter_modules(tritongen.spec.__path__):
        module = import_module(f"tritongen.spec.{info.name}")
        defined = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__]
        assert not [c for c in defined if issubclass(c, RuntimeSection)], module.__name__


def test_the_three_batch_limits_have_three_names():
    paths = [path for path, kind, _, _ in explain() if kind != "section" and path.endswith("max_batch_size")]
    assert paths == ["serving.max_batch_size", "engine.build_max_batch_size", "llmapi.runtime_max_batch_size"]


@pytest.fixture
def old_and_new_hf(tiny_spec_path, tmp_path) -> tuple[Path, Path]:
    data = yaml.safe_load(tiny_spec_path.read_text())
    new = copy.deepcopy(data)
    new["hf"] = {**new.get("hf", {}), **HF_KNOBS}
    old = copy.deepcopy(data)
    old["serving"].update({**old.pop("hf", {}), **HF_KNOBS})
    paths = tmp_path / "old.yaml", tmp_path / "new.yaml"
    for path, content in zip(paths, (old, new)):
        path.write_text(yaml.safe_dump(content, sort_keys=False))
    return paths


def test_old_hf_names_load_warn_once_and_plan_identically(old_and_new_hf):
    old, new = old_and_new_hf
    (_, old_plan), messages = deprecations(lambda: (load_spec(old), plan_from_file(old))[1])
    # Read twice (as `validate` does), each moved field is reported once, naming its old and new path.
    assert sorted(messages) == sorted(moved(f"serving.{k}", f"hf.{k}") for k in HF_KNOBS)
    (_, new_plan), none = deprecations(lambda: plan_from_file(new))
    assert none == []
    assert old_plan == new_plan
    assert old_plan.runtime_settings.sampling == "greedy" and old_plan.runtime_settings.stream_flush_ms == 20


def _move(data: dict, source: str, target: str) -> None:
    """Move the value at dotted `source` to dotted `target` in a spec mapping."""
    *parents, leaf = source.split(".")
    node = data
    for part in parents:
        node = node[part]
    value = node.pop(leaf)
    *parents, leaf = target.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


@pytest.mark.parametrize(("example", "set_new", "renames"), [
    ("llama3-8b-trtllm.yaml", {}, {"engine.build_max_batch_size": "engine.max_batch_size",
                                   "engine.batch_scheduler_policy": "serving.batch_scheduler_policy",
                                   "engine.enable_chunked_context": "serving.enable_chunked_context"}),
    ("llama3-8b-llmapi.yaml", {"runtime_max_batch_size": 32},
     {"llmapi.runtime_max_batch_size": "llmapi.max_batch_size"}),
])
def test_old_tensorrt_llm_names_warn_and_plan_identically(tmp_path, example, set_new, renames):
    new = yaml.safe_load((ROOT / "examples" / example).read_text())
    new["model"]["checkpoint"] = str(ROOT / "examples" / new["model"]["checkpoint"])
    new.setdefault("llmapi", {}).update(set_new)
    old = copy.deepcopy(new)
    for new_path, old_path in renames.items():
        _move(old, new_path, old_path)
    paths = tmp_path / "old.yaml", tmp_path / "new.yaml"
    for path, content in zip(paths, (old, new)):
        path.write_text(yaml.safe_dump(content, sort_keys=False))
    (_, old_plan), messages = deprecations(lambda: plan_from_file(paths[0]))
    assert sorted(messages) == sorted(moved(o, n) for n, o in renames.items())
    (_, new_plan), none = deprecations(lambda: plan_from_file(paths[1]))
    assert none == [] and old_plan == new_plan


def test_an_old_name_next_to_its_new_one_is_refused():
    with pytest.raises(SpecError) as err:
        parse_spec({"name": "x", "model": {"checkpoint": "."}, "serving": {"sampling": "greedy"},
                    "hf": {"sampling": "per_request"}, "engine": {"max_batch_size": 8, "build_max_batch_size": 8}})
    assert err.value.problems == [
        "serving.sampling: is the old name of hf.sampling, which is set too; remove serving.sampling",
        "engine.max_batch_size: is the old name of engine.build_max_batch_size, which is set too; remove "
        "engine.max_batch_size"]


def test_the_input_mapping_is_not_changed():
    data = {"name": "x", "model": {"checkpoint": "."}, "serving": {"sampling": "greedy"}}
    with pytest.warns(SpecDeprecation, match="serving.sampling: is deprecated, renamed hf.sampling"):
        spec = Spec.model_validate(copy.deepcopy(data))
    assert spec.hf.sampling == "greedy" and data["serving"] == {"sampling": "greedy"}
    with pytest.warns(SpecDeprecation):
        assert parse_spec(data).hf.sampling == "greedy" and data["serving"] == {"sampling": "greedy"}


def test_a_tune_trial_sets_a_moved_knob_of_a_spec_written_with_the_old_name():
    from tritongen.tune.space import trial_spec

    old = {"name": "x", "model": {"checkpoint": "."}, "serving": {"stream_flush_ms": 5}}
    # Set by its new path next to the old name, the knob would be refused on every trial ...
    assert trial_spec(old, {"hf.stream_flush_ms": 10}).startswith("serving.stream_flush_ms: is the old name")
    # ... so tune starts from the current names.
    with pytest.warns(SpecDeprecation, match="serving.stream_flush_ms: is deprecated, renamed hf.stream_flush_ms"):
        data = current_names(old)
    assert trial_spec(data, {"hf.stream_flush_ms": 10}).hf.stream_flush_ms == 10

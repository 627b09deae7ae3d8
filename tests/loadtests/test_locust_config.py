"""The load test runs the Plan's load profile: the flags give a validated copy of it, every Locust process gets it
unchanged inside its configuration, and a lock file is run as written (nothing re-resolved, no spec read)."""

from __future__ import annotations

import argparse
import json

import pytest
import yaml

from tritongen.errors import SpecError
from tritongen.loadtests.runner import LoadTest, load_from_args, locust_config, workload
from tritongen.loadtests.workload import LocustConfig
from tritongen.plan import LoadProfile, load_plan, plan_from_json


def _args(**flags) -> argparse.Namespace:
    return argparse.Namespace(**flags)


@pytest.fixture(scope="module")
def plan(tiny_spec_path):
    return load_plan(str(tiny_spec_path))


def test_locust_config_holds_the_plans_profile_unchanged(plan, tmp_path):
    load = load_from_args(_args(), plan)
    assert load == LoadTest(plan.load)  # no flags: the profile as planned, not a copy of its fields
    config = locust_config(plan, load, "127.0.0.1:8001", tmp_path, plan.load.levels()[0])
    assert config.profile == plan.load
    # The JSON the locustfile reads round-trips to the same profile, and holds it once, under `profile`.
    written = json.loads(config.to_json())
    assert LoadProfile.model_validate(written["profile"]) == plan.load
    assert LocustConfig.model_validate_json(config.to_json()) == config
    assert not set(written) & set(LoadProfile.model_fields), "a profile field restated beside `profile`"


def test_flags_replace_only_their_fields(plan):
    load = load_from_args(_args(users=3, duration=5.0, protocol="http", model="tensorrt_llm_bls"), plan)
    # -u makes one level, so the plan's sweep goes too.
    changed = {"users": 3, "duration_s": 5.0, "protocol": "http", "sweep": ()}
    assert load.profile == plan.load.model_copy(update=changed)
    assert load.model == "tensorrt_llm_bls" and load.path == "text"


@pytest.mark.parametrize(("flags", "error"), [
    ({"users": 0}, "-u: must be > 0 (got 0); pass a positive number"),
    ({"warmup": 30.0, "duration": 10.0}, "--warmup: must be >= 0 and below the run time 10s (got 30); shorten the "
                                         "warm-up or lengthen -t"),
    ({"max_concurrency": 0}, "--max-concurrency: input should be greater than or equal to 1; see "
                             "`tritongen loadtest -h`"),
])
def test_a_flag_outside_the_profiles_limits_is_refused(plan, flags, error):
    with pytest.raises(SpecError) as err:
        load_from_args(_args(**flags), plan)
    assert str(err.value) == error


def test_report_workload_keeps_its_keys(plan, tmp_path):
    config = locust_config(plan, load_from_args(_args(), plan), "h:1", tmp_path, 2.0)
    assert list(workload(config)) == [
        "url", "protocol", "tokenizer_dir", "model", "api_key_env", "input_tokens", "output_tokens", "prompts_file",
        "add_special_tokens", "skip_special_tokens", "path", "timeout_s", "seed", "request_rate", "arrival",
        "burstiness", "trace_file", "processes", "cancel_rate", "cancel_after_ms", "duration_s", "dialect"]


def test_loadtest_runs_a_lock_file_as_written(tiny_spec_path, tmp_path, capsys, monkeypatch):
    """Relative files of the spec are absolute in the lock; with the spec gone, the lock's spec_dir pointing nowhere,
    another working directory and path resolution made impossible, the load test still gets the planned files."""
    from tritongen.cli import main

    work = tmp_path / "specs"
    work.mkdir()
    (work / "prompts.jsonl").write_text('{"text_input": "Hello", "max_tokens": 4}\n')
    (work / "trace.jsonl").write_text('{"timestamp": 0, "input_length": 8, "output_length": 4}\n')
    data = yaml.safe_load(tiny_spec_path.read_text())
    data["validation"]["load"].update(prompts_file="prompts.jsonl", trace_file="trace.jsonl", sweep=[])
    spec = work / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    assert main(["plan", str(spec), "--json"]) == 0
    lock_data = json.loads(capsys.readouterr().out)
    lock_data["spec_dir"] = str(tmp_path / "nowhere")
    lock = tmp_path / "plan.json"
    lock.write_text(json.dumps(lock_data))
    spec.unlink()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")

    def no_resolving(*args):
        raise AssertionError(f"a path was resolved after planning: {args}")

    monkeypatch.setattr("tritongen.plan.make.resolve_path", no_resolving)
    monkeypatch.setattr("tritongen.plan.make.make_plan", no_resolving)
    plan = plan_from_json(lock)
    load = load_from_args(_args(), plan)
    config = locust_config(plan, load, "h:1", tmp_path / "samples", 1.0)
    assert config.profile == plan.load
    assert (config.profile.prompts_file, config.profile.trace_file) == (str(work / "prompts.jsonl"),
                                                                        str(work / "trace.jsonl"))
    # The CLI takes the same lock as far as the server (none here: exit 3, before any load).
    from tritongen.ports import free_port

    url = f"127.0.0.1:{free_port()}"
    assert main(["loadtest", str(lock), "--url", url, "--no-metrics", "--out", str(tmp_path / "report")]) == 3
    err = capsys.readouterr().err
    assert url in err and "start the deployment" in err, err

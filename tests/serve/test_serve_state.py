"""One place knows where the local server listens: `serve` writes a state file, `generate`/`loadtest` read it."""

from __future__ import annotations

import argparse
import json
import os

from tritongen.serve.state import clear_state, read_state, state_path, write_state


def test_state_is_read_while_its_writer_lives_and_cleared_by_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONGEN_STATE", str(tmp_path / "serve.json"))
    assert read_state() is None
    write_state(grpc="127.0.0.1:41001", http="127.0.0.1:41000", metrics="http://127.0.0.1:41002/metrics",
                openai=None)
    assert read_state() == {"pid": os.getpid(), "grpc": "127.0.0.1:41001", "http": "127.0.0.1:41000",
                            "metrics": "http://127.0.0.1:41002/metrics"}
    from tritongen.cli import _served_url
    from tritongen.cli.load import _endpoint_from_args

    assert _served_url("grpc") == "127.0.0.1:41001"
    args = argparse.Namespace(url=None, metrics_url=None, no_metrics=False)
    endpoint = _endpoint_from_args(args, "http")
    assert (endpoint.http_url, endpoint.metrics_url) == ("127.0.0.1:41000", "http://127.0.0.1:41002/metrics")
    clear_state()
    assert not state_path().exists()


def test_a_state_left_by_a_dead_serve_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONGEN_STATE", str(tmp_path / "serve.json"))
    (tmp_path / "serve.json").write_text(json.dumps({"pid": 2**22 + 7, "grpc": "127.0.0.1:1"}))
    assert read_state() is None


def test_loadtest_url_without_metrics_url_says_the_token_check_may_be_skipped(capsys):
    from tritongen.cli.load import _endpoint_from_args

    _endpoint_from_args(argparse.Namespace(url="10.0.0.5:8001", metrics_url=None, no_metrics=False), "grpc")
    assert "the check that client token totals equal the server's is skipped" in capsys.readouterr().err


def test_serve_starts_the_openai_frontend_when_the_repository_enables_it(tmp_path, monkeypatch):
    from tritongen.cli import _openai_enabled
    from tritongen.plan.frontend import CONFIG_FILE

    assert not _openai_enabled(tmp_path)  # no frontend settings rendered
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"enabled": True, "models": []}))
    assert _openai_enabled(tmp_path)
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"enabled": False, "models": []}))
    assert not _openai_enabled(tmp_path)


def test_loadtest_trace_on_the_shipped_example_replaces_its_sweep(tmp_path, tiny_spec_path):
    from tritongen.loadtests.runner import load_from_args
    from tritongen.plan import load_plan

    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 4}\n')
    plan = load_plan(str(tiny_spec_path))
    assert plan.load.sweep  # the example sweeps levels
    profile = load_from_args(argparse.Namespace(trace=str(trace)), plan).profile
    assert profile.mode == "trace" and profile.sweep == () and profile.processes == 1


def test_serve_spec_says_exactly_why_it_cannot(tiny_spec_path, tmp_path, capsys):
    from tritongen.cli import main

    for path, why in ((tiny_spec_path, "is a file (a spec or a plan?), not a model repository"),
                      (tmp_path / "nothing", "does not exist"), (tmp_path, "holds no model")):
        assert main(["serve", str(path)]) == 2
        err = capsys.readouterr().err
        assert why in err and "tritongen render SPEC -o DIR" in err, err

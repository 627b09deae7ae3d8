"""What a platform engineer expects of a CLI: --version, -q/-v that change the output, --json for scripts, help
for every option, shell completion, `plan` as tables a person reads, YAML errors with line and column."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

from tritongen import console
from tritongen.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
INVENTORIES = ROOT / "tests" / "fixtures" / "inventories"
LLMAPI_EXAMPLE = ROOT / "examples" / "llama3-8b-llmapi.yaml"


def _walk(parser: argparse.ArgumentParser, path: str):
    """(command path, action) for every argument of every (sub)command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{path} {name}")
        else:
            yield path, action


def test_every_option_of_every_command_has_help():
    missing = [f"{path}: {'/'.join(action.option_strings) or action.dest}"
               for path, action in _walk(build_parser(), "tritongen")
               if not (action.help or "").strip() and action.help is not argparse.SUPPRESS]
    assert not missing, f"options without help text: {missing}"


def test_version_is_the_installed_package_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"tritongen {version('tritongen')}\n"


def test_url_help_says_how_the_server_is_found(capsys):
    for command in ("generate", "loadtest"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "-h"])
        text = " ".join(capsys.readouterr().out.split())
        assert "the local `tritongen serve` that serves the spec's deployment, or the one --server names" in text, \
            command
        assert "/tritongen-<uid>/servers/" in text, command


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_prints_only_the_result(tmp_path, capsys, tiny_spec_path, where):
    argv = ["render", str(tiny_spec_path), "-o", str(tmp_path / "repo")]
    assert main(["-q", *argv] if where == "before" else [*argv, "-q"]) == 0
    out = capsys.readouterr().out
    assert out == f"model repository: {(tmp_path / 'repo').resolve()}\n"
    assert console.level() == console.QUIET


def test_default_render_prints_a_status_line_per_file(tmp_path, capsys, tiny_spec_path):
    assert main(["render", str(tiny_spec_path), "-o", str(tmp_path / "repo")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "create  ensemble/config.pbtxt" in [line.strip() for line in out], out
    assert console.level() == console.NORMAL


def test_quiet_and_verbose_together_are_refused(capsys, tiny_spec_path):
    assert main(["-q", "-v", "validate", str(tiny_spec_path)]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_verbose_validate_adds_the_plan_and_plan_adds_every_field(capsys, tiny_spec_path):
    assert main(["validate", str(tiny_spec_path)]) == 0
    short = capsys.readouterr().out
    assert main(["validate", str(tiny_spec_path), "-v"]) == 0
    verbose = capsys.readouterr().out
    assert short.startswith("ok: ") and "serving (Triton)" not in short
    assert verbose.startswith(short) and "serving (Triton)" in verbose
    assert main(["plan", str(tiny_spec_path)]) == 0
    plan = capsys.readouterr().out
    assert main(["-v", "plan", str(tiny_spec_path)]) == 0
    full = capsys.readouterr().out
    assert "load profile (every field)" not in plan and "load profile (every field)" in full
    assert "tensorrt_llm_bls parameters" in full


def test_validate_json_ok(capsys, tiny_spec_path):
    assert main(["validate", str(tiny_spec_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"ok": True, "spec": str(tiny_spec_path), "name": "tiny-cpu", "runtime": "hf",
                   "checked": "spec, checkpoint and model settings", "notes": []}


def test_validate_json_bad_spec_has_the_errors_and_exit_code(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\nmodel: {checkpoint: .}\nserving: {max_batch_sise: 8}\n")
    assert main(["validate", str(spec), "--json"]) == 2
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc == {"ok": False, "spec": str(spec), "exit_code": 2,
                   "errors": ["serving.max_batch_sise: unknown field; did you mean `max_batch_size`?"]}
    assert "error: serving.max_batch_sise: unknown field" in captured.err


def test_plan_prints_tables_without_python_reprs(capsys, tiny_spec_path):
    assert main(["plan", str(tiny_spec_path)]) == 0
    out = capsys.readouterr().out
    for header in ("serving (Triton)", "runtime hf", "load test", "SLO gate"):
        assert f"\n{header}\n" in out
    assert "{'" not in out and "'}" not in out and "[" not in out, out
    assert "KV cache            4,096 tokens per LLM instance" in out


def test_gpu_plan_explains_batch_sizes_and_the_instance_kind(capsys):
    inventory = INVENTORIES / "h200-2x3g.yaml"
    assert main(["plan", str(LLMAPI_EXAMPLE), "--inventory", str(inventory)]) == 0
    out = capsys.readouterr().out
    batch = next(line for line in out.splitlines() if line.strip().startswith("max_batch_size      "))
    assert "the trtllm runtime itself schedules up to 384" in batch, batch
    assert "KIND_CPU is how Triton runs a backend that places itself on the GPUs" in out
    assert "max batch at 131,072 tokens" in out and "batch@" not in out
    assert "sizing.kv_tokens" in out and "{'" not in out


def test_plan_json_is_still_the_lock_file(capsys, tiny_spec_path):
    assert main(["plan", str(tiny_spec_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"].startswith("tritongen-plan/")


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script_knows_commands_and_options(capsys, shell):
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    for word in ("validate", "loadtest", "deploy", "--inventory", "--sweep", "--target", "compose"):
        assert word in script, word
    if shell == "bash":
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    elif shutil.which("zsh"):
        assert subprocess.run(["zsh", "-n"], input=script, text=True).returncode == 0


def test_yaml_syntax_error_names_line_and_column_and_shows_the_line(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("version: 1\nname: x\nmodel:\n  checkpoint: a\n  dtype: b: c\n")
    assert main(["validate", str(spec)]) == 2
    assert capsys.readouterr().err == (
        f"error: {spec}: is not valid YAML at line 5, column 11: mapping values are not allowed here; "
        "fix the YAML syntax there\n"
        "       5 |   dtype: b: c\n"
        "         |           ^\n")


def test_yaml_unclosed_bracket_points_where_it_opens(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\nmodel: {checkpoint: a\n")
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "\\n" not in err
    assert err.splitlines() == [
        f"error: {spec}: is not valid YAML at line 2, column 8: a flow mapping that is never closed "
        "(expected ',' or '}', but got '<stream end>'); close it",
        "       2 | model: {checkpoint: a",
        "         |        ^"]


def test_yaml_tab_indent_says_to_use_spaces(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\n\tmodel: 1\n")
    assert main(["validate", str(spec)]) == 2
    assert "indent with spaces: YAML does not allow tabs there" in capsys.readouterr().err


def test_loadtest_json_against_no_server_prints_the_error_and_exit_code(tmp_path, capsys, tiny_spec_path):
    code = main(["loadtest", str(tiny_spec_path), "--url", "127.0.0.1:9", "--no-metrics", "--json",
                 "-o", str(tmp_path / "report")])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == 3 and doc["exit_code"] == 3 and doc["passed"] is False and doc["report"] is None
    assert doc["errors"] and "127.0.0.1:9" in doc["errors"][0]
    assert "error: " in captured.err

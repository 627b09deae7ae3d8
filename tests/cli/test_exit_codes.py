"""Exit codes everywhere (0 ok, 1 check failed, 2 bad input naming the field, 3 missing here, 70 internal error)
and abuse cases that must end in one error line, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tritongen.cli import commands
from tritongen.cli import main

ROOT = Path(__file__).resolve().parents[2]
INVENTORIES = Path(__file__).parents[1] / "fixtures" / "inventories"
TOKEN = "hf_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv"


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_non_utf8_spec_is_bad_input(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(b"name: caf\xe9\n")
    code, err = _run(capsys, "validate", str(spec))
    assert code == 2
    assert _one_line(err) == f"error: {spec}: is not UTF-8 text (byte 0xe9 at offset 9); save the spec as UTF-8"


@pytest.mark.parametrize("text", ["a: " + "[" * 20000 + "]" * 20000, "a: " + "{b: " * 20000 + "1" + "}" * 20000])
def test_yaml_nested_20000_deep_is_bad_input(tmp_path, capsys, text):
    spec = tmp_path / "deep.yaml"
    spec.write_text(text)
    code, err = _run(capsys, "validate", str(spec))
    assert code == 2
    assert _one_line(err).startswith(f"error: {spec}: line 1: nests deeper than 64 levels;")


def test_duplicate_keys_are_refused_naming_the_key(tmp_path, capsys, tiny_spec_path):
    text = tiny_spec_path.read_text().replace("  max_batch_size: 8\n", "  max_batch_size: 8\n  max_batch_size: 16\n")
    spec = tmp_path / "dup.yaml"
    spec.write_text(text)
    code, err = _run(capsys, "validate", str(spec))
    line = text.splitlines().index("  max_batch_size: 16") + 1
    assert code == 2
    assert _one_line(err) == f"error: {spec}: line {line}: duplicate key 'max_batch_size'; keep one of them"


def test_a_huge_value_is_not_echoed_whole(tmp_path, capsys, tiny_spec_path):
    data = yaml.safe_load(tiny_spec_path.read_text())
    data["model"]["dtype"] = "x" * 500_000
    spec = tmp_path / "big.yaml"
    spec.write_text(yaml.safe_dump(data))
    code, err = _run(capsys, "validate", str(spec))
    assert code == 2 and len(err) < 600
    assert _one_line(err).startswith("error: model.dtype: input should be ")
    assert "...<500,002 characters>" in err
    spec.write_text(f"name: {'y' * 10_000_000}\n")
    code, err = _run(capsys, "validate", str(spec))
    assert code == 2 and len(err) < 300
    assert "is 10,000,007 bytes; a spec or inventory is a few KB" in _one_line(err)


@pytest.mark.parametrize("field, value", [("model.dtype", TOKEN), ("name", "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2"),
                                          ("model.dtype", "ghp_" + "a" * 36)])
def test_token_like_values_are_never_echoed(tmp_path, capsys, tiny_spec_path, field, value):
    data = yaml.safe_load(tiny_spec_path.read_text())
    node = data
    *parents, leaf = field.split(".")
    for p in parents:
        node = node[p]
    node[leaf] = value
    spec = tmp_path / "secret.yaml"
    spec.write_text(yaml.safe_dump(data))
    code, err = _run(capsys, "validate", str(spec))
    assert code == 2 and value not in err and value[:8] not in err
    assert err.startswith(f"error: {field}: ") and "looks like a secret; not shown" in err


@pytest.mark.parametrize("under", [False, True])
def test_output_equal_to_or_under_a_regular_file(tmp_path, capsys, tiny_spec_path, under):
    blocker = tmp_path / "thesis.tex"
    blocker.write_text("my thesis\n")
    out = blocker / "repo" if under else blocker
    code, err = _run(capsys, "render", str(tiny_spec_path), "-o", str(out))
    assert code == 2
    what = f"is under {blocker}, which is a file" if under else "is a file"
    assert _one_line(err) == f"error: --output: {out} {what}; choose a folder path"
    assert blocker.read_text() == "my thesis\n"


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_generate_against_a_server_that_is_down_exits_3(capsys, protocol):
    code, err = _run(capsys, "generate", "hi", "--protocol", protocol, "--url", "127.0.0.1:9")
    assert code == 3
    assert _one_line(err).startswith(f"error: --url: no tritonserver answers at {protocol} 127.0.0.1:9 (")


def test_placement_refusal_exits_2(tmp_path, capsys, tiny_model):
    # Llama 3.1 8B bf16 (the shipped example's config.json) fits no 1g.18gb slice.
    data = yaml.safe_load((ROOT / "examples" / "llama3-8b-trtllm.yaml").read_text())
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_bytes((ROOT / "examples" / "checkpoints" / "llama-3.1-8b" / "config.json")
                                       .read_bytes())
    for f in tiny_model.glob("tokenizer*"):
        (ckpt / f.name).write_bytes(f.read_bytes())
    data["model"]["checkpoint"] = str(ckpt)
    data["placement"]["gpu_ids"] = []
    spec = tmp_path / "8b.yaml"
    spec.write_text(yaml.safe_dump(data))
    code, err = _run(capsys, "plan", str(spec), "--inventory", str(INVENTORIES / "h200-7x1g.yaml"))
    assert code == 2
    assert _one_line(err).startswith("error: placement: the model fits no device:")


def test_internal_error_is_one_line_with_its_own_code(capsys, monkeypatch, tiny_spec_path):
    def broken(args):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(commands, "cmd_validate", broken)
    code, err = _run(capsys, "validate", str(tiny_spec_path))
    assert code == 70
    assert _one_line(err).startswith("error: internal error ZeroDivisionError: division by zero (at ")
    assert "rerun with --debug" in err
    assert main(["validate", str(tiny_spec_path), "--debug"]) == 70
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_the_installed_command_reports_bad_input_without_a_traceback(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_bytes(b"\xff\xfe")
    proc = subprocess.run([sys.executable, "-m", "tritongen", "plan", str(spec)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("caught_by", ["the command", "main"])
def test_a_handled_ctrl_c_exits_130_under_python_m_also_after_passing_through_exec(tmp_path, caught_by):
    # A Ctrl-C that lands while a lazy import builds a dataclass passes through exec() of source text; CPython then
    # marks it unhandled and, under `python -m`, would end the process by SIGINT (-2) after the command's cleanup.
    (tmp_path / "ctrl_c_in_exec.py").write_text(f"""
import sys
from tritongen import cli

def command(args):
    try:
        exec("raise KeyboardInterrupt")  # as the signal handler's raise inside a dataclass's generated code
    except KeyboardInterrupt:
        if {caught_by!r} == "main":
            raise
        print("interrupted: the command's summary")
        return 130

cli._handler = lambda name: command
sys.exit(cli.main(["validate", "spec.yaml"]))
""")
    proc = subprocess.run([sys.executable, "-m", "ctrl_c_in_exec"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 130, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr

"""Every fix a message suggests as a `tritongen ...` command is one the CLI takes: each is parsed out of the
message, its placeholders (SPEC, DIR, REPO) filled with real paths, checked against the CLI's parser, and run
where that is cheap here (no server started)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest
import yaml

from tritongen.cli import build_parser, main

_COMMAND = re.compile(r"`(tritongen [^`]+)`")


def suggested(message: str, **values: str) -> list[list[str]]:
    """The `tritongen ...` commands in `message`, placeholders replaced, as argv lists (without `tritongen`)."""
    out = []
    for command in _COMMAND.findall(message):
        argv = shlex.split(command)[1:]
        out.append([values.get(a, a) for a in argv])
    assert out, f"no command suggested in: {message}"
    return out


def parses(argv: list[str]) -> argparse.Namespace:
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse refuses: the suggestion is not a command the CLI takes
        raise AssertionError(f"`tritongen {' '.join(argv)}` does not parse (exit {exc.code})") from None


@pytest.fixture
def spec(tiny_model, tmp_path) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "name": "mine", "runtime": "hf",
                                    "model": {"checkpoint": str(tiny_model)}, "placement": {"device": "cpu"}}))
    return path


def test_serve_of_a_spec_suggests_render_then_serve_and_both_work(spec, tmp_path, capsys):
    assert main(["serve", str(spec)]) == 2
    repo = tmp_path / "repo"
    commands = suggested(capsys.readouterr().err, SPEC=str(spec), DIR=str(repo))
    assert [c[0] for c in commands] == ["render", "serve", "up"]
    assert main(commands[0]) == 0  # render SPEC -o DIR, for real
    serve = parses(commands[1])
    from tritongen.cli.commands import _check_repository

    _check_repository(Path(serve.repo))  # what serve refused before now passes its check
    parses(commands[2])


def test_loadtest_without_a_server_suggests_commands_that_work(spec, tmp_path, capsys):
    from tritongen.ports import free_port

    code = main(["loadtest", str(spec), "--url", f"127.0.0.1:{free_port()}", "--no-metrics", "-o",
                 str(tmp_path / "out")])
    assert code == 3
    repo = tmp_path / "repo"
    commands = suggested(capsys.readouterr().err, SPEC=str(spec), DIR=str(repo))
    assert [c[0] for c in commands] == ["render", "serve"]
    assert main(commands[0]) == 0
    parses(commands[1])


def test_generate_without_a_server_suggests_serve_of_a_repository(tmp_path, capsys, tiny_repo):
    from tritongen.ports import free_port

    assert main(["generate", "hi", "--url", f"127.0.0.1:{free_port()}"]) == 3
    [command] = suggested(capsys.readouterr().err, REPO=str(tiny_repo))
    assert parses(command).repo == str(tiny_repo)


def test_kv_refusal_and_stub_death_suggest_plan_of_the_spec(spec, capsys):
    from tritongen.serve.causes import KV_FIX

    [command] = suggested(KV_FIX, SPEC=str(spec))
    assert main(command) == 0 and "kv_sizing" in capsys.readouterr().out


def test_a_spec_path_that_is_a_folder_says_so(tmp_path, spec, capsys):
    assert main(["validate", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"error: {tmp_path}: is a folder, not a spec file; pass the path of a YAML spec" in err
    assert str(spec) in err  # and names the spec it holds


def test_demo_outside_a_checkout_runs_from_the_installed_checkout_or_says_what_works(tmp_path, monkeypatch):
    from tritongen.cli.demo import DEMO_EXAMPLE, _demo_root
    from tritongen.errors import SpecError

    monkeypatch.chdir(tmp_path)
    try:
        root = _demo_root()
    except SpecError as err:  # a wheel install: refused before writing ./build, with commands that work
        assert not (tmp_path / "build").exists()
        for command in suggested(err.problems[0], SPEC="spec.yaml"):
            parses(command)
    else:  # an editable install: the checkout it comes from, whose example points at its own build/
        assert (root / "examples" / DEMO_EXAMPLE).is_file() and root != tmp_path

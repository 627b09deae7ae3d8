"""The README's "your own model in six commands" runs as written: the spec and the commands are read from the
README itself, in a fresh folder, against a real tritonserver."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tritongen.cli import main

README = Path(__file__).resolve().parents[2] / "README.md"
START, END = "<!-- walkthrough:start -->", "<!-- walkthrough:end -->"


def walkthrough() -> tuple[str, list[list[str]]]:
    """The README walkthrough's spec (my.yaml) and its commands, each an argv starting with `tritongen`."""
    text = README.read_text()
    block = text[text.index(START):text.index(END)]
    spec = re.search(r"```yaml\n(.*?)```", block, re.S).group(1)
    commands: list[list[str]] = []
    for line in re.search(r"```sh\n(.*?)```", block, re.S).group(1).splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            commands.append(words[:cut])
            words = words[cut + 1:]
    return spec, commands


def test_the_walkthrough_is_six_lines_of_tritongen_commands():
    _, commands = walkthrough()
    assert all(c[0] == "tritongen" for c in commands), commands
    assert [c[1] for c in commands] == ["demo-model", "validate", "plan", "render", "serve", "generate",
                                        "loadtest", "deploy"]


def _start_serve(argv: list[str], cwd: Path, env: dict, state: Path) -> subprocess.Popen:
    """`tritongen serve` as a user starts it; ready once it has written its state file into the folder `state`."""
    log = open(cwd / "serve.log", "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen([sys.executable, "-m", "tritongen.cli", *argv], cwd=cwd, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"serve exited with {proc.returncode}:\n{(cwd / 'serve.log').read_text()[-3000:]}")
        if any(json.loads(f.read_text() or "{}").get("pid") == proc.pid for f in state.glob("*.json")):
            return proc
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"serve not ready in 240 s:\n{(cwd / 'serve.log').read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.integration
def test_the_readme_walkthrough_runs(tmp_path, monkeypatch, capsys):
    spec, commands = walkthrough()
    (tmp_path / "my.yaml").write_text(spec)
    state = tmp_path / "servers"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRITONGEN_STATE", str(state))  # this test's server only, not one a user runs here
    env = {**os.environ, "TRITONGEN_STATE": str(state)}
    server = None
    try:
        for argv in commands:
            args = argv[1:]
            if args[0] == "serve":
                server = _start_serve(args, tmp_path, env, state)
            elif args[0] == "loadtest":
                # In a subprocess (Locust patches the process for gevent); --json: the verdict to check.
                run = subprocess.run([sys.executable, "-m", "tritongen.cli", *args, "--json"], cwd=tmp_path,
                                     env=env, capture_output=True, text=True, timeout=300, check=False)
                assert run.returncode == 0, run.stderr[-3000:]
                verdict = json.loads(run.stdout)
                assert verdict["passed"] and verdict["exit_code"] == 0, verdict
            else:
                code = main(args)
                out, err = capsys.readouterr()
                assert code == 0, f"{shlex.join(argv)} exited {code}:\n{err[-3000:]}"
                if args[0] == "validate":
                    assert out.startswith("ok: my.yaml (my-model, runtime hf)"), out
                elif args[0] == "plan":
                    assert "serving (Triton)" in out, out
                elif args[0] == "generate":
                    assert out.strip(), "generate printed no text"
        assert (tmp_path / "my-deploy" / "docker-compose.yaml").is_file()
    finally:
        if server is not None:
            _stop(server)

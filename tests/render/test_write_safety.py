"""Never lose a user's files: --force replaces only what tritongen wrote, a replacement never leaves the
destination missing, and a render killed with SIGKILL leaves no temporary folder after the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from tritongen.cli import main
from tritongen.render import MARKER, write_repository
from tritongen.render import write as writer

FILES = {"ensemble/config.pbtxt": b"name: \"ensemble\"\n", "tensorrt_llm/1/model.py": b"# v1\n"}


def test_force_refuses_a_folder_tritongen_did_not_write(tmp_path, capsys, tiny_spec_path):
    out = tmp_path / "work"
    (out / "data").mkdir(parents=True)
    (out / "thesis.tex").write_text("\\documentclass{article}\n")
    (out / "data" / "results.csv").write_text("a,b\n1,2\n")
    assert main(["render", str(tiny_spec_path), "-o", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: --output: {out} is not empty and was not written by tritongen (no {MARKER}); choose "
                   "another folder; tritongen replaces only folders it wrote\n")
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == ["data", "data/results.csv", "thesis.tex"]
    assert [p.name for p in tmp_path.iterdir()] == ["work"]


def test_force_replaces_what_tritongen_wrote(tmp_path, tiny_spec_path, capsys):
    out = tmp_path / "repo"
    assert main(["render", str(tiny_spec_path), "-o", str(out)]) == 0
    (out / "stale-model").mkdir()
    assert main(["render", str(tiny_spec_path), "-o", str(out)]) == 2  # no --force
    assert main(["render", str(tiny_spec_path), "-o", str(out), "--force"]) == 0
    assert not (out / "stale-model").exists() and (out / MARKER).is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["render", str(tiny_spec_path), "-o", str(empty)]) == 0  # an empty folder holds nothing to lose


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2-exchange", "per-file-replace"])
def test_replacing_never_leaves_the_destination_missing(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(writer, "_exchange", lambda a, b: False)
    out = tmp_path / "repo"
    write_repository(FILES, out)
    missing, reads, stop = [], [0], threading.Event()

    def reader():
        while not stop.is_set():
            if not (out / "ensemble" / "config.pbtxt").is_file() or not out.is_dir():
                missing.append(1)
            reads[0] += 1

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(24):
            write_repository({**FILES, "tensorrt_llm/1/model.py": f"# v{i}\n".encode(),
                              f"extra/{i % 2}.txt": b"x"}, out, overwrite=True)
    finally:
        stop.set()
        thread.join()
    assert reads[0] > 24 and not missing
    assert (out / "tensorrt_llm/1/model.py").read_bytes() == b"# v23\n"
    assert sorted(p.name for p in (out / "extra").iterdir()) == ["1.txt"]  # a file the new render lacks is gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]


_SLOW_WRITER = """
import pathlib, sys, time
from tritongen.render import write_repository
original = pathlib.Path.write_bytes
def slow(self, data):
    n = original(self, data)
    print("wrote", self, flush=True)
    time.sleep(60)
    return n
pathlib.Path.write_bytes = slow
write_repository({"a/x": b"new"}, pathlib.Path(sys.argv[1]), overwrite=True)
"""


def test_a_render_killed_with_sigkill_leaves_no_temporary_folder_after_the_next_run(tmp_path):
    out = tmp_path / "repo"
    write_repository({"a/x": b"old"}, out)
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, str(out)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().startswith("wrote ")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        assert (out / "a" / "x").read_bytes() == b"old"  # the killed run never touched the destination
        # Each run first removes what earlier killed runs left: at most the last one's folder remains.
        leftovers = [p.name for p in tmp_path.iterdir() if p.name != "repo"]
        assert len(leftovers) == 1 and leftovers[0].startswith(f".repo.tritongen-tmp-{proc.pid}-")
    write_repository({"a/x": b"newer"}, out, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["repo"]
    assert (out / "a" / "x").read_bytes() == b"newer"


def test_of_two_renders_into_one_new_folder_one_wins_and_the_other_says_so(tmp_path, monkeypatch):
    from tritongen.errors import SpecError

    out = tmp_path / "repo"
    mkdtemp = writer.tempfile.mkdtemp
    raced = []

    def other_render_first(*args, **kwargs):
        # The other render runs to completion between this one's check (folder missing) and its rename.
        if not raced:
            raced.append(True)
            write_repository({"a.txt": b"other"}, out)
        return mkdtemp(*args, **kwargs)

    monkeypatch.setattr(writer.tempfile, "mkdtemp", other_render_first)
    with pytest.raises(SpecError, match=r"--output: .* was written by another render while this one ran"):
        write_repository({"a.txt": b"mine"}, out)
    assert (out / "a.txt").read_bytes() == b"other"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]  # no temporary folder left

"""The native backends' build (generator/tritongen/native/build.sh, CMake) and where serve finds them.

What `make install` built (.venv/lib/tritongen/backends) is what these tests look at; none starts a server.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tritongen import contract, native


def test_the_wiring_header_is_generated_from_the_contract():
    assert (native.SOURCES / "bls" / "wiring.h").read_text() == native.bls_wiring_header()


def test_the_python_bls_forwards_what_the_contract_says(tiny_repo):
    folder = tiny_repo / "tensorrt_llm_bls" / "1"
    assert json.loads((folder / "wiring.json").read_text()) == contract.bls_wiring()
    source = (folder / "model.py").read_text()
    # No table of its own: every name it forwards comes from wiring.json.
    assert '"text_input": "QUERY"' not in source and '"top_k": "runtime_top_k"' not in source


def test_the_wiring_covers_every_input_and_output_of_the_bls():
    wiring = contract.bls_wiring()
    forwarded = {a for a, _ in wiring["to_preprocessing"]} | {a for a, _ in wiring["to_llm"]}
    assert {t.name for t in contract.BLS_INPUTS} - forwarded == {"num_draft_tokens", "use_draft_logits"}
    assert {t.name for t in contract.BLS_OUTPUTS} == {"text_output", *wiring["passed_outputs"]}
    llm_inputs = {t.name for t in contract.TENSORRT_LLM_INPUTS}
    assert {b for _, b in wiring["from_preprocessing"] + wiring["to_llm"]} <= llm_inputs


@pytest.mark.parametrize("name", native.BACKENDS)
def test_make_install_built_each_backend_outside_every_package(name):
    lib = native.library(name)
    assert lib.is_file(), f"run `make install` ({native.build_command()})"
    assert "site-packages" not in lib.parts and ".cache" not in lib.parts
    # Only Triton's entry points are exported, TRITONBACKEND_Initialize (the API version check) among them.
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                             check=True).stdout.split()
    exported = {s for s in symbols if s.startswith("TRITON")}
    assert "TRITONBACKEND_Initialize" in exported and "TRITONBACKEND_ModelInstanceExecute" in exported
    assert all(s.startswith("TRITONBACKEND_") for s in exported), exported


@pytest.mark.parametrize("args, message", [
    ([], "build.sh: --prefix DIR is required"),
    (["--prefix", "/tmp/x", "--sanitize", "memory"], "build.sh: --sanitize memory: expected address,undefined or "
                                                     "thread"),
    (["--prefix", "/tmp/x", "--triton-include", "/nonexistent"], "build.sh: --triton-include /nonexistent has no "
                                                                 "triton/core/tritonbackend.h"),
    (["--prefix", "/tmp/x", "--jobs", "4"], "build.sh: unknown argument --jobs"),
])
def test_the_build_script_refuses_bad_arguments_with_exit_2(args, message):
    done = subprocess.run([str(native.BUILD_SCRIPT), *args], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == message


def test_the_backend_directory_is_links_and_writes_nothing_into_the_wheel(tmp_path):
    from tritongen.serve import _pytriton_root, backend_dir

    wheel = _pytriton_root()
    before = {p: p.stat().st_mtime_ns for p in wheel.rglob("*") if "__pycache__" not in p.parts}
    folder = backend_dir(tmp_path / "backends", native.BACKENDS)
    for name in native.BACKENDS:
        link = folder / name / f"libtriton_{name}.so"
        assert link.is_symlink() and link.resolve() == native.library(name).resolve()
    stub = folder / "python" / "triton_python_backend_stub"
    assert stub.is_symlink() and stub.resolve().parent.parent.name == "python_backend_stubs"
    assert (folder / "python" / "libtriton_python.so").resolve().is_relative_to(wheel)
    after = {p: p.stat().st_mtime_ns for p in wheel.rglob("*") if "__pycache__" not in p.parts}
    assert after == before


def test_the_backend_folder_is_configurable(tmp_path, monkeypatch):
    monkeypatch.setenv(native.ENV_DIR, str(tmp_path))
    assert native.library("tritongen_bls") == tmp_path / "tritongen_bls" / "libtriton_tritongen_bls.so"
    monkeypatch.delenv(native.ENV_DIR)
    assert native.installed_dir() == Path(__import__("sys").prefix) / "lib" / "tritongen" / "backends"


def test_serving_needs_no_cache_folder(tmp_path, monkeypatch):
    from tritongen.serve import backend_dir

    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("TRITONGEN_CACHE", str(cache / "tritongen"))
    backend_dir(tmp_path / "backends", native.BACKENDS)
    assert not cache.exists()

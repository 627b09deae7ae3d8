"""The native backends' build (generator/tritongen/native/build.sh, CMake) and where serve finds them.

What `make install` built (the editable install's package build: .venv/lib/tritongen/backends) is what these
tests look at; none starts a server. tests/test_wheel.py builds and installs a wheel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tritongen import contract, native
from tritongen.errors import EnvironmentMissing


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
    # A virtual environment's install scheme puts the wheel's data folder at its root.
    assert native.installed_dir() == Path(sys.prefix) / "lib" / "tritongen" / "backends"
    assert native.search_dirs()[0] == native.installed_dir()


def test_missing_installed_backends_name_where_they_were_looked_for_and_the_remedy(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "search_dirs", lambda: [tmp_path / "a", tmp_path / "b"])
    assert native.installed_dir() == tmp_path / "a"
    with pytest.raises(EnvironmentMissing) as err:
        native.require(("tritongen_bls",))
    assert err.value.exit_code == 3
    assert str(err.value) == (
        f"native backend tritongen_bls: {tmp_path}/a/tritongen_bls/libtriton_tritongen_bls.so is not built (looked "
        f"in {tmp_path}/a, {tmp_path}/b); install tritongen from its wheel or sdist, or with `make install` in a "
        f"checkout, which compiles them (needs cmake, a C++17 compiler and nlohmann-json3-dev), or build them with "
        f"`{native.BUILD_SCRIPT} --prefix DIR` and set TRITONGEN_BACKEND_DIR=DIR")
    built = tmp_path / "b" / "tritongen_bls" / "libtriton_tritongen_bls.so"  # the user scheme's, say
    built.parent.mkdir(parents=True)
    built.touch()
    assert native.require(("tritongen_bls",)) == {"tritongen_bls": built}


def test_serving_needs_no_cache_folder(tmp_path, monkeypatch):
    from tritongen.serve import backend_dir

    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("TRITONGEN_CACHE", str(cache / "tritongen"))
    backend_dir(tmp_path / "backends", native.BACKENDS)
    assert not cache.exists()


@pytest.mark.parametrize("args, env, says", [
    (["-DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=TRUE"], {}, "nlohmann/json (>= 3.2, its CMake package) not found"),
    ([], {"CXX": "/nonexistent/c++"}, "no C++ compiler found"),
], ids=["no-nlohmann-json", "no-compiler"])
def test_a_build_without_its_tools_names_what_to_install(tmp_path, args, env, says):
    """pip install / pip wheel run this CMake project; a missing tool fails its configure step with the packages."""
    done = subprocess.run(["cmake", "-S", str(native.SOURCES), "-B", str(tmp_path), *args], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=120)
    message = " ".join(done.stderr.split())  # CMake wraps its messages
    assert done.returncode != 0
    assert f"{says}: tritongen's native backends need cmake (>= 3.17), a C++17 compiler and nlohmann/json " \
           "(Debian/Ubuntu: apt-get install cmake g++ nlohmann-json3-dev)" in message, done.stderr

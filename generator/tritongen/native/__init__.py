"""tritongen's native Triton backends: C++ sources in this folder, built with CMake by `build.sh`.

Why native: a python model costs an IPC round trip between tritonserver and its stub for every response, so a
per-token step in Python caps a stream at a few thousand tokens/s per host. The backends here keep the per-token
work (incremental detokenisation, relaying responses) inside tritonserver.

Built once, before serving (`make install`, CI, the serving image's builder stage), by one script:
`build.sh --prefix DIR` leaves `DIR/<name>/libtriton_<name>.so`, the layout `tritonserver --backend-directory`
searches. Nothing compiles on `serve`: `installed_dir()` says where the libraries are looked for, and `require`
fails with the build command when they are missing.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

from .. import repository_manifest
from ..errors import EnvironmentMissing

SOURCES = Path(__file__).parent
BUILD_SCRIPT = SOURCES / "build.sh"
BACKENDS = ("tritongen_bls", "tritongen_tokensource")
"""Backend names: `tritongen_bls` (the text path's BLS), `tritongen_tokensource` (an engine-speed token source)."""

ENV_DIR = "TRITONGEN_BACKEND_DIR"
"""Environment variable naming the folder build.sh installed into (its --prefix); overrides the default."""

_BACKEND_LINE = re.compile(r'^backend:\s*"([^"]+)"', re.MULTILINE)


def used_by(repository: Path) -> tuple[str, ...]:
    """The native backends that the models of a model repository name: from its render manifest, else from its
    config.pbtxt and configs/*.pbtxt files."""
    root = Path(repository)
    rendered = repository_manifest.read(root)
    if rendered is not None:
        return tuple(name for name in BACKENDS if name in rendered.backends)
    names = set()
    for config in [*root.glob("*/config.pbtxt"), *root.glob("*/configs/*.pbtxt")]:
        names.update(_BACKEND_LINE.findall(config.read_text(errors="replace")))
    return tuple(name for name in BACKENDS if name in names)


def compiler() -> str | None:
    """The C++ compiler for small test drivers of these headers (the backends themselves build with build.sh)."""
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


def installed_dir() -> Path:
    """Where build.sh installed the backends: $TRITONGEN_BACKEND_DIR, else <environment>/lib/tritongen/backends
    (the virtual environment's own folder, outside every installed package: `make install` builds there)."""
    configured = os.environ.get(ENV_DIR)
    return Path(configured) if configured else Path(sys.prefix) / "lib" / "tritongen" / "backends"


def library(name: str, root: Path | None = None) -> Path:
    return Path(root or installed_dir()) / name / f"libtriton_{name}.so"


def build_command(prefix: Path | None = None) -> str:
    return f"{BUILD_SCRIPT} --prefix {prefix or installed_dir()}"


def require(names: tuple[str, ...]) -> dict[str, Path]:
    """{name: library} of built backends; EnvironmentMissing (exit 3) naming the build command if one is missing."""
    missing = [name for name in names if not library(name).is_file()]
    if missing:
        raise EnvironmentMissing(
            f"native backend {', '.join(missing)}: {library(missing[0])} is not built; build the native backends "
            f"with `{build_command()}` (needs cmake, a C++17 compiler and nlohmann-json3-dev; `make install` runs "
            f"it) or set {ENV_DIR} to the folder they were built into")
    return {name: library(name) for name in names}


def bls_wiring_header() -> str:
    """bls/wiring.h: the BLS wiring tables of contract.bls_wiring() as C++ (tests check the file equals this)."""
    from ..contract import bls_wiring

    def pairs(rows: list[list[str]]) -> str:
        return ",\n".join(f'    {{"{a}", "{b}"}}' for a, b in rows)

    wiring = bls_wiring()
    names = ",\n".join(f'    "{n}"' for n in wiring["passed_outputs"])
    return f"""// Generated from generator/tritongen/contract.py (bls_wiring) by tritongen.native.bls_wiring_header();
// do not edit: tests/native/test_build.py checks it is current.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tritongen {{
namespace bls {{

// BLS input -> preprocessing input
inline const std::vector<std::pair<std::string, std::string>> kToPreprocessing = {{
{pairs(wiring["to_preprocessing"])}}};
// preprocessing output -> tensorrt_llm input
inline const std::vector<std::pair<std::string, std::string>> kFromPreprocessing = {{
{pairs(wiring["from_preprocessing"])}}};
// BLS input -> tensorrt_llm input
inline const std::vector<std::pair<std::string, std::string>> kToLlm = {{
{pairs(wiring["to_llm"])}}};
// tensorrt_llm outputs returned as they are
inline const std::vector<std::string> kPassedOutputs = {{
{names}}};

}}  // namespace bls
}}  // namespace tritongen
"""


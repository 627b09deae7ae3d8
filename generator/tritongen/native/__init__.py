"""tritongen's native Triton backends: C++ sources in this folder, built with CMake by `build.sh`.

Why native: a python model costs an IPC round trip between tritonserver and its stub for every response, so a
per-token step in Python caps a stream at a few thousand tokens/s per host. The backends here keep the per-token
work (incremental detokenisation, relaying responses) inside tritonserver.

Built once, before serving, by the CMake project here, with the layout `tritonserver --backend-directory`
searches (`<dir>/<name>/libtriton_<name>.so`): installing tritongen builds them (scikit-build-core runs the
project when a wheel is built, from the checkout or an sdist; `make install` is the same build, editable) into
the environment's `lib/tritongen/backends`; the serving image's builder stage and sanitizer builds run
`build.sh --prefix DIR`. Nothing compiles on `serve`: `installed_dir()` says where the libraries are looked for,
and `require` fails, naming the remedy, when they are missing (nothing falls back to the python BLS).
"""

from __future__ import annotations

import os
import re
import shutil
import site
import sysconfig
from pathlib import Path

from .. import repository_manifest
from ..errors import EnvironmentMissing

SOURCES = Path(__file__).parent
BUILD_SCRIPT = SOURCES / "build.sh"
BACKENDS = ("tritongen_bls", "tritongen_tokensource")
"""Backend names: `tritongen_bls` (the text path's BLS), `tritongen_tokensource` (an engine-speed token source)."""

ENV_DIR = "TRITONGEN_BACKEND_DIR"
"""Environment variable naming a folder build.sh installed into (its --prefix); overrides the installed ones."""

INSTALLED = Path("lib") / "tritongen" / "backends"
"""Where an installed tritongen's backends are, under its install scheme's data folder (the wheel's
`tritongen-<v>.data/data/` tree: CMakeLists.txt installs there under scikit-build-core)."""

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


def search_dirs() -> list[Path]:
    """Where installed backends are looked for, in order: the data folder of the default install scheme (a virtual
    environment's root; /usr/local on Debian's system Python), then the user scheme's (`pip install --user`)."""
    dirs = [Path(sysconfig.get_path("data")) / INSTALLED]
    if site.ENABLE_USER_SITE:
        dirs.append(Path(sysconfig.get_path("data", sysconfig.get_preferred_scheme("user"))) / INSTALLED)
    return list(dict.fromkeys(dirs))


def installed_dir() -> Path:
    """The backends' folder: $TRITONGEN_BACKEND_DIR when set (it wins, even if empty of backends), else the first
    of `search_dirs()` that holds any backend, else the first of them (where an install would have put them)."""
    configured = os.environ.get(ENV_DIR)
    if configured:
        return Path(configured)
    dirs = search_dirs()
    return next((d for d in dirs if any(library(name, d).is_file() for name in BACKENDS)), dirs[0])


def library(name: str, root: Path | None = None) -> Path:
    return Path(root or installed_dir()) / name / f"libtriton_{name}.so"


def build_command(prefix: Path | None = None) -> str:
    return f"{BUILD_SCRIPT} --prefix {prefix or installed_dir()}"


def require(names: tuple[str, ...]) -> dict[str, Path]:
    """{name: library} of built backends; EnvironmentMissing (exit 3) naming the remedy if one is missing."""
    root = installed_dir()
    missing = [name for name in names if not library(name, root).is_file()]
    if not missing:
        return {name: library(name, root) for name in names}
    head = f"native backend {', '.join(missing)}: {library(missing[0], root)} is not built"
    if os.environ.get(ENV_DIR):
        raise EnvironmentMissing(f"{head} ({ENV_DIR} names {root}); build them there with `{build_command(root)}`, "
                                 f"or unset {ENV_DIR} to use the ones installed with tritongen")
    raise EnvironmentMissing(
        f"{head} (looked in {', '.join(str(d) for d in search_dirs())}); install tritongen from its wheel or sdist, "
        f"or with `make install` in a checkout, which compiles them (needs cmake, a C++17 compiler and "
        f"nlohmann-json3-dev), or build them with `{BUILD_SCRIPT} --prefix DIR` and set {ENV_DIR}=DIR")


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


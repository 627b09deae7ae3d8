"""tritongen's native Triton backends: built from the C++ sources in this folder, installed beside the python backend.

Why native: a python model costs an IPC round trip between tritonserver and its stub for every response, so a
per-token step in Python caps a stream at a few thousand tokens/s per host. The backends here keep the per-token
work (incremental detokenisation, relaying responses) inside tritonserver.

Sources are compiled once per source digest with the machine's C++ compiler into a cache folder (no CMake, no
Triton headers: `triton_api.h` declares the API they call) and copied into a backends folder as
`<name>/libtriton_<name>.so`, where `tritonserver --backend-directory` finds them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

from ..errors import EnvironmentMissing
from ..resources import data_dir

SOURCES = Path(__file__).parent
BACKENDS = ("tritongen_bls", "tritongen_tokensource")
"""Backend names: `tritongen_bls` (the text path's BLS), `tritongen_tokensource` (an engine-speed token source)."""


_BACKEND_LINE = re.compile(r'^backend:\s*"([^"]+)"', re.MULTILINE)


def used_by(repository: Path) -> tuple[str, ...]:
    """The native backends that the models of a model repository name (config.pbtxt and configs/*.pbtxt)."""
    root = Path(repository)
    names = set()
    for config in [*root.glob("*/config.pbtxt"), *root.glob("*/configs/*.pbtxt")]:
        names.update(_BACKEND_LINE.findall(config.read_text(errors="replace")))
    return tuple(name for name in BACKENDS if name in names)


def available() -> tuple[str, ...]:
    """The backends whose source is in this installation."""
    return tuple(name for name in BACKENDS if (SOURCES / f"{name}.cc").is_file())


def _cache_root() -> Path:
    base = os.environ.get("TRITONGEN_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                            os.path.expanduser("~/.cache"), "tritongen")
    return Path(base) / "native"


def _digest(name: str) -> str:
    h = hashlib.sha256()
    for path in sorted([*SOURCES.glob("*.h"), SOURCES / f"{name}.cc"]):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


def build(name: str) -> Path:
    """The shared library of backend `name`, compiled if this source digest has not been built yet."""
    if name not in BACKENDS:
        raise ValueError(f"unknown native backend {name!r}; known: {', '.join(BACKENDS)}")
    target = _cache_root() / _digest(name) / f"libtriton_{name}.so"
    if target.is_file():
        return target
    cxx = compiler()
    if cxx is None:
        raise EnvironmentMissing(f"native backend {name}: no C++ compiler (g++/clang++) on PATH; install one "
                                 "(e.g. `apt-get install g++`) or set CXX")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    cmd = [cxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread", "-Wall",
           f"-I{SOURCES}", str(SOURCES / f"{name}.cc"), "-o", str(tmp)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise EnvironmentMissing(f"native backend {name}: the C++ build failed:\n{done.stderr[-4000:]}")
    os.replace(tmp, target)
    return target


def install(backends_root: Path, names: tuple[str, ...] = BACKENDS) -> None:
    """Copy each backend's library into `backends_root/<name>/libtriton_<name>.so` (atomically, when changed)."""
    for name in names:
        lib = build(name)
        target = Path(backends_root) / name / f"libtriton_{name}.so"
        if target.is_file() and target.read_bytes() == lib.read_bytes():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}")
        shutil.copy2(lib, tmp)
        os.replace(tmp, target)


def detok_table():
    """The detokenisation-table module that preprocessing ships (model_repository_templates/preprocessing/1/
    detok_table.py): one implementation for the planner's check, the model and the tests."""
    path = data_dir("model_repository_templates") / "preprocessing" / "1" / "detok_table.py"
    spec = importlib.util.spec_from_file_location("tritongen_detok_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prebuild() -> int:
    """Build every available backend into the cache (`make install`), so the first serve does not wait for g++.
    A machine without a compiler still serves python-only repositories: that is reported, not an error."""
    for name in available():
        try:
            print(f"native backend {name}: {build(name)}")
        except EnvironmentMissing as err:
            print(err)
    return 0

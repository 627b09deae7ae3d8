"""The tritongen image: what the load-test Job / service and tritongen's OpenAI frontend run.

`tritongen deploy` writes `Dockerfile.tritongen` and, next to it, `dist/<wheel>`: a wheel of the very tritongen that
wrote the deployment. Why a wheel in the build context rather than `pip install tritongen==X` or the source tree:
- `docker build` in the output folder then needs nothing outside it (no checkout, no private index), and the
  image runs exactly the code that rendered the manifests (the plan lock's format and the CLI flags match);
- a pinned PyPI install would depend on a release being published under that name for every version a team runs.
The wheel comes from the source checkout when tritongen runs from one (`pip wheel` on a copy, so the checkout gets
no build/ folder), else it is re-packed from the installed files listed in the distribution's RECORD. Either way it
is pure Python (py3-none-any), without the native Triton backends that `pip install` compiles: this image runs the
load generator and the frontend, never tritonserver (the serving image compiles the backends in its builder stage
against the pinned container's own Triton), so the build runs no CMake (`wheel.cmake=false`) and needs no compiler.
"""

from __future__ import annotations

import base64
import csv
import functools
import hashlib
import importlib.metadata
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import tritongen
from tritongen.errors import EnvironmentMissing, problem

# packaging is imported in constraints() only: it is no declared dependency of tritongen (pip and setuptools bring
# it), and only building the tritongen image's constraints needs it.

DOCKERFILE = "Dockerfile.tritongen"
DIST = "dist"
CONSTRAINTS = "constraints.txt"
BASE_IMAGE = "python:3.11-slim-bookworm"
KUBECTL_IMAGE = "registry.k8s.io/kubectl:v1.34.0"
"""kubectl of the Kubernetes project (registry.k8s.io keeps every release's tag; kubectl is /bin/kubectl)."""
# torch is a dependency of tritongen; the load generator and the frontend only tokenise, so the CPU build
# (about 200 MB instead of the CUDA wheels' several GB) is installed first and satisfies it.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_VERSION = "2.13.0"
"""Pinned, so every build of the image installs the same torch (tritongen's own dependency is a range)."""
# Fixed zip timestamps (bdist_wheel honours SOURCE_DATE_EPOCH): deploying twice writes the same wheel.
REPRODUCIBLE_EPOCH = "315532800"


def version() -> str:
    return importlib.metadata.version("tritongen")


def image_tag() -> str:
    return f"tritongen:{version()}"


def wheel_name() -> str:
    return f"tritongen-{version()}-py3-none-any.whl"


def _checkout() -> Path | None:
    """The source checkout this tritongen is imported from (an editable install), if any."""
    root = Path(tritongen.__file__).resolve().parents[2]  # generator/tritongen/__init__.py
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "tritongen"' in pyproject.read_text():
        return root
    return None


_SKIP = {".git", ".venv", "tests", "build", "bench", "examples", "__pycache__", ".pytest_cache", ".hypothesis",
         "demo-output", "dist"}


def _wheel_from_checkout(root: Path) -> bytes:
    with tempfile.TemporaryDirectory(prefix="tritongen-wheel-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(root, src, symlinks=True, ignore=lambda _d, names: [n for n in names if n in _SKIP
                                                            or n.endswith(".egg-info") or n.startswith("up-")])
        env = {**os.environ, "SOURCE_DATE_EPOCH": REPRODUCIBLE_EPOCH}
        # First with this environment's scikit-build-core (offline); without it, in pip's isolated build
        # environment (fetches scikit-build-core).
        for isolation in (["--no-build-isolation"], []):
            proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation,
                                   "--config-settings=wheel.cmake=false", "-w", str(Path(tmp) / "out"), str(src)],
                                  capture_output=True, text=True, timeout=600, env=env)
            if proc.returncode == 0:
                break
        wheels = list((Path(tmp) / "out").glob("tritongen-*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            last = ((proc.stderr or proc.stdout).strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
            raise EnvironmentMissing(problem(
                DOCKERFILE, f"could not build a wheel of tritongen from {root} ({last})",
                "pip install 'scikit-build-core>=1.1' into this environment (pip wheel builds the image's wheel with "
                "it)"))
        return wheels[0].read_bytes()


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel_from_installation(dist: importlib.metadata.Distribution) -> bytes:
    """Re-pack an installed (non-editable) tritongen: its RECORD lists every file the wheel installed."""
    info = f"tritongen-{dist.version}.dist-info"
    skip = {f"{info}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    entries = []
    for f in dist.files or ():
        rel = f.as_posix()
        # `..`: outside site-packages, such as the native backends in <environment>/lib/tritongen/backends.
        if rel in skip or rel.startswith("..") or rel.endswith(".pyc") or "__pycache__/" in rel:
            continue
        data = Path(f.locate()).read_bytes()
        if rel == f"{info}/WHEEL":  # what is left is pure Python, as the name wheel_name() gives it says
            data = b"".join(b"Root-Is-Purelib: true\n" if line.startswith(b"Root-Is-Purelib:") else
                            b"Tag: py3-none-any\n" if line.startswith(b"Tag:") else line
                            for line in data.splitlines(keepends=True))
        entries.append((rel, data))
    if not any(rel.startswith("tritongen/") for rel, _ in entries):
        raise EnvironmentMissing(problem(DOCKERFILE, "this tritongen installation lists no package files",
                                         "reinstall tritongen from its wheel, or run deploy from a source checkout"))
    buf, record = io.BytesIO(), io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, data in sorted(entries):
            zf.writestr(rel, data)
            writer.writerow([rel, _record_hash(data), len(data)])
        writer.writerow([f"{info}/RECORD", "", ""])
        zf.writestr(f"{info}/RECORD", record.getvalue())
    return buf.getvalue()


@functools.cache
def tritongen_wheel() -> dict[str, bytes]:
    """{dist/<wheel>: bytes, dist/constraints.txt: bytes}: the wheel Dockerfile.tritongen installs (built once per
    process) and the exact versions its dependencies get."""
    root = _checkout()
    data = _wheel_from_checkout(root) if root else _wheel_from_installation(importlib.metadata.distribution("tritongen"))
    return {f"{DIST}/{wheel_name()}": data, f"{DIST}/{CONSTRAINTS}": constraints().encode()}


def constraints() -> str:
    """`name==version` of every distribution tritongen needs, as installed here (its requirements, recursively,
    extras followed, markers evaluated for this interpreter): the image installs the versions this tritongen was
    run with rather than whatever the index offers on the day of the build. Local version labels (+cpu) are
    dropped; `==` without one matches them. torch is left to TORCH_VERSION."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    def wanted(req: Requirement, extras: set[str]) -> bool:
        return req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (extras or {""}))

    pinned: dict[str, tuple[str, set[str]]] = {}
    todo = [Requirement(r) for r in importlib.metadata.distribution("tritongen").requires or ()]
    todo = [r for r in todo if wanted(r, set())]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name == "torch":
            continue  # installed first from the CPU index at TORCH_VERSION; a CUDA build here must not decide it
        try:
            dist = importlib.metadata.distribution(req.name)
        except importlib.metadata.PackageNotFoundError:
            continue  # not needed on this platform, or optional here: the wheel's own range applies
        extras = set(req.extras)
        if name in pinned and extras <= pinned[name][1]:
            continue
        extras |= pinned.get(name, ("", set()))[1]
        pinned[name] = (dist.version.split("+")[0], extras)
        todo += [r for r in (Requirement(x) for x in dist.requires or ()) if wanted(r, extras)]
    return "".join(f"{name}=={version}\n" for name, (version, _) in sorted(pinned.items()))

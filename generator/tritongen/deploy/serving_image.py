"""The serving image: the pinned Triton container plus tritongen's native backends, built from `Dockerfile.serving`.

Every deployment whose model repository names a native backend (tritongen_bls, the text path's BLS;
tritongen_tokensource, the synthetic runtime's source), or whose runtime's models import packages the container
lacks (hf, synthetic: torch and transformers), runs this image. The Dockerfile has two stages FROM the same pinned
container, so the libraries are compiled against the glibc, libstdc++ and Triton headers they run with:
- `backends`: installs cmake, g++, make and nlohmann-json3-dev from the container's own Ubuntu release, copies
  `native/` (the backend sources, written next to the Dockerfile as its build context) and runs
  `native/build.sh` against /opt/tritonserver/include and /opt/tritonserver/lib;
- the runtime stage: the pinned python packages the runtime's models import, and the libraries copied to
  /opt/tritonserver/backends/<backend>/libtriton_<backend>.so, the directory tritonserver searches by default.
The image is tagged `tritongen-serving:<tritongen version>-<base tag>`, since both the base and the backend sources
decide what it holds.
"""

from __future__ import annotations

import re
from pathlib import Path

import tritongen.native
from tritongen.deploy.image import version
from tritongen.resources import data_dir
from tritongen.runtimes import launch

DOCKERFILE = "Dockerfile.serving"
NATIVE_CONTEXT = "native"
"""Folder of the build context that holds the backend sources (a copy of the package's tritongen/native)."""
NATIVE_BACKENDS = ("tritongen_bls", "tritongen_tokensource")
"""Every backend build.sh builds; the image carries all of them."""
TRITON_INCLUDE = "/opt/tritonserver/include"
TRITON_LIB = "/opt/tritonserver/lib"
BACKEND_DIRECTORY = "/opt/tritonserver/backends"
"""tritonserver's default --backend-directory in NGC images."""
BUILD_PREFIX = "/opt/tritongen/backends"
"""Where build.sh installs the libraries in the builder stage."""
BUILD_PACKAGES = ("cmake", "g++", "make", "nlohmann-json3-dev")
"""Debian/Ubuntu packages the backend build needs, from the base image's own release: its pinned tag fixes the
release and so the versions (an exact `=version` pin would break once the archive's -updates pocket moves)."""
PACKAGES_FILE = "serving-packages.txt"
"""The pins of what the hf and synthetic runtimes' python models import (preprocessing tokenises with
transformers; the hf model masks guided requests with xgrammar), in the deploy
templates: `make install` constrains the suite to the same file."""

_BACKEND = re.compile(r'^backend:\s*"([^"]+)"', re.MULTILINE)
_SKIP = {"__pycache__", "build", ".pytest_cache"}


def native_backends(repository: dict[str, bytes]) -> tuple[str, ...]:
    """The native backends a rendered model repository names in its config.pbtxt files."""
    named = {m.group(1) for rel, data in repository.items() if rel.endswith("config.pbtxt")
             for m in _BACKEND.finditer(data.decode(errors="replace"))}
    return tuple(b for b in NATIVE_BACKENDS if b in named)


def base_image(plan) -> str:
    """The pinned container both stages start from: the runtime's serving image, or the one its Dockerfile
    builds on (hf, synthetic: Triton's python image of the pinned release)."""
    rt = launch(plan)
    return rt.base_image if rt.builds_image and rt.base_image else rt.image()


def needed(plan, repository: dict[str, bytes]) -> bool:
    """Whether the deployment needs the image built (native backends, or python packages the container lacks)."""
    return launch(plan).builds_image or bool(native_backends(repository))


def image_tag(plan) -> str:
    base_tag = base_image(plan).rpartition(":")[2]
    return f"tritongen-serving:{version()}-{base_tag}"


def pinned_packages() -> tuple[str, ...]:
    """The `name==version` lines of PACKAGES_FILE."""
    text = (data_dir("deploy_templates") / PACKAGES_FILE).read_text()
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def python_packages(plan) -> tuple[str, ...]:
    return pinned_packages() if launch(plan).builds_image else ()


def library(backend: str, root: str) -> str:
    return f"{root}/{backend}/libtriton_{backend}.so"


def native_sources() -> dict[str, bytes]:
    """{native/<file>: bytes}: the backend sources and build.sh, the build context of the builder stage."""
    root = Path(tritongen.native.__file__).parent
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if (not path.is_file() or _SKIP & set(rel.parts) or path.suffix in (".so", ".o", ".pyc")
                or rel.as_posix() == "__init__.py"):
            continue
        files[f"{NATIVE_CONTEXT}/{rel.as_posix()}"] = path.read_bytes()
    return files

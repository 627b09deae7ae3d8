"""The installable package: an sdist made from the checkout compiles the native backends when pip builds its wheel
(scikit-build-core runs the CMake project), and that platform-tagged wheel, installed into a fresh venv outside the
checkout (dependencies reused from this environment), serves the tiny example with the native BLS loaded and no
environment variable pointing at a build."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

import psutil
import pytest

from tritongen import native

ROOT = Path(__file__).resolve().parent.parent
# What a build needs from the checkout (copied, so the build's own build/ folder never lands in the checkout).
_SOURCES = ("pyproject.toml", "README.md", "generator", "model_repository_templates", "deploy")
_INSTALLED_BACKENDS = "tritongen-0.1.0.data/data/lib/tritongen/backends"


def _run(args: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in _SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(path, src / name)
    out = tmp_path_factory.mktemp("sdist")
    # The PEP 517 hook itself (what `python -m build --sdist` calls), with this environment's scikit-build-core.
    _run([sys.executable, "-c", f"from scikit_build_core.build import build_sdist; build_sdist({str(out)!r})"],
         timeout=120, cwd=src)
    (built,) = out.glob("tritongen-*.tar.gz")
    return built


@pytest.fixture(scope="module")
def wheel(sdist, tmp_path_factory) -> Path:
    """The wheel pip builds from the sdist: the native backends compile here (about a minute on 2 cores)."""
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
          str(sdist)], timeout=900)
    (built,) = out.glob("tritongen-*.whl")
    return built


@pytest.mark.slow
def test_the_sdist_carries_the_cmake_project_and_the_templates_not_links(sdist):
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if "/" in m.name}
    for name in ("pyproject.toml", "generator/tritongen/native/CMakeLists.txt",
                 "generator/tritongen/native/bls/backend.cc",
                 "generator/tritongen/data/model_repository_templates/ensemble/config.pbtxt.j2"):
        assert name in members and members[name].isfile(), name
    assert not any(m.issym() for m in members.values())
    assert not any(n.startswith(("tests/", ".venv/", "build/")) for n in members)


@pytest.mark.slow
def test_the_wheel_is_tagged_for_the_platform_and_holds_the_built_backends(wheel):
    # py3-none: the libraries are loaded by tritonserver, not by Python, so any Python 3 on this platform will do.
    assert wheel.name.endswith(f"-py3-none-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for backend in native.BACKENDS:
        assert f"{_INSTALLED_BACKENDS}/{backend}/libtriton_{backend}.so" in names
    for init in (ROOT / "generator").rglob("__init__.py"):
        assert init.relative_to(ROOT / "generator").as_posix() in names, init
    mapped = {"model_repository_templates": "tritongen/data/model_repository_templates",
              "deploy/templates": "tritongen/data/deploy_templates"}
    for folder, installed in mapped.items():
        for f in (ROOT / folder).rglob("*"):
            if f.is_file() and f.suffix in (".j2", ".py") and "__pycache__" not in f.parts:
                assert f"{installed}/{f.relative_to(ROOT / folder).as_posix()}" in names, f
    for module in (ROOT / "generator" / "tritongen" / "served").glob("*.py"):  # what render ships, from the wheel
        assert f"tritongen/served/{module.name}" in names, module
    # The backends' sources too: the serving image's builder stage compiles them from the installed package.
    assert "tritongen/native/build.sh" in names and "tritongen/native/CMakeLists.txt" in names
    assert not any(n.startswith(("generator/", "tests/")) or "__pycache__" in n for n in names)


def test_pyproject_does_not_pin_the_cpu_torch():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch = [d for d in deps if d.replace(" ", "").startswith("torch")]
    assert torch and not any("==" in d for d in torch), torch


def _fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120)
    py = venv / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                     timeout=60).stdout.strip())
    # The dependencies come from this environment's site folders (a .pth line per folder; their own .pth files,
    # such as the editable tritongen's, are not processed there), tritongen only from the wheel.
    deps = [p for p in sys.path if p.endswith("site-packages")] + [sysconfig.get_path("purelib")]
    (site / "_deps.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")
    _run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], timeout=300)
    where = _run([str(py), "-c", "import tritongen, tritongen.native as n; print(tritongen.__file__); "
                  "print(n.installed_dir())"], timeout=60, cwd=tmp_path).stdout.split()
    assert where[0].startswith(str(site)), where
    assert where[1] == str(venv / "lib" / "tritongen" / "backends"), where
    # deploy re-packs this installation for the tritongen image (load test, frontend): pure Python, no backends.
    repack = ("import importlib.metadata as m, io, zipfile; from tritongen.deploy.image import _wheel_from_installation;"
              "z = zipfile.ZipFile(io.BytesIO(_wheel_from_installation(m.distribution('tritongen'))));"
              "print(z.read('tritongen-0.1.0.dist-info/WHEEL').decode()); print(*z.namelist())")
    repacked = _run([str(py), "-c", repack], timeout=120, cwd=tmp_path).stdout
    assert "Tag: py3-none-any" in repacked and "Root-Is-Purelib: true" in repacked
    assert ".data/" not in repacked and "tritongen/cli/__init__.py" in repacked
    return venv


@pytest.mark.integration
@pytest.mark.slow
def test_the_wheel_serves_the_native_bls_from_a_fresh_venv_outside_the_checkout(wheel, tmp_path):
    venv = _fresh_venv(tmp_path, wheel)
    work = tmp_path / "work"  # the example's layout, outside the checkout: examples/ and build/tiny-llama
    (work / "examples").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "tiny-cpu.yaml", work / "examples" / "tiny-cpu.yaml")
    tritongen = str(venv / "bin" / "tritongen")
    env = {k: v for k, v in os.environ.items() if k != native.ENV_DIR}
    env.update(PYTHONPATH="", TRITONGEN_STATE=str(tmp_path / "state"))
    _run([tritongen, "demo-model", "build/tiny-llama"], timeout=300, cwd=work, env=env)
    _run([tritongen, "render", "examples/tiny-cpu.yaml", "-o", "repo"], timeout=300, cwd=work, env=env)
    assert native.used_by(work / "repo") == native.BACKENDS[:1]  # the tiny example's tokenizer takes the native BLS
    _run([tritongen, "verify", "repo", "--load"], timeout=300, cwd=work, env=env)

    log = tmp_path / "serve.log"
    serve = subprocess.Popen([tritongen, "serve", "repo"], cwd=work, env=env, stdout=log.open("wb"),
                             stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "ready  http" not in log.read_text():
            assert serve.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        (server,) = [p for p in psutil.Process(serve.pid).children() if p.name() == "tritonserver"]
        # tritonserver mapped the BLS the wheel installed into this venv (serve links it into its backend folder).
        bls = venv / "lib" / "tritongen" / "backends" / "tritongen_bls" / "libtriton_tritongen_bls.so"
        assert str(bls.resolve()) in {m.path for m in server.memory_maps()}
        text = _run([tritongen, "generate", "hello there", "--stream", "--max-tokens", "8"], timeout=120, cwd=work,
                    env=env).stdout
        assert text.strip(), text
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()

    # Without them, serve refuses (exit 3) naming where it looked: never the python BLS in their place.
    (venv / "lib" / "tritongen" / "backends").rename(tmp_path / "moved-backends")
    refused = subprocess.run([tritongen, "serve", "repo"], cwd=work, env=env, capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode == 3, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert f"is not built (looked in {venv / 'lib' / 'tritongen' / 'backends'}" in refused.stderr

"""Small C++ drivers of the native backends' headers (tests/native/*_cli.cc), compiled once per test module."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tritongen.native import SOURCES, compiler

NATIVE_TESTS = Path(__file__).parent / "native"
STRICT = ("-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter")


def build_cli(tmp_path_factory, name: str, *sources: Path, strict: bool = True, sanitize: bool = False) -> Path:
    """Compile tests/native/<name>.cc (plus `sources`) against the native sources into a temporary folder; skip the
    test where there is no C++ compiler. sanitize: under TRITONGEN_NATIVE_SANITIZE's sanitizers when it is set
    (tests/native/test_sanitizers.py runs the drivers that way)."""
    cxx = compiler()
    if cxx is None:
        pytest.skip("no C++ compiler")
    out = tmp_path_factory.mktemp(name) / name
    chosen = os.environ.get("TRITONGEN_NATIVE_SANITIZE") if sanitize else None
    flags = [f"-fsanitize={chosen}", "-fno-sanitize-recover=all", "-g"] if chosen else []
    subprocess.run([cxx, "-std=c++17", "-O1", *(STRICT if strict else ()), *flags, f"-I{SOURCES}",
                    str(NATIVE_TESTS / f"{name}.cc"), *map(str, sources), "-o", str(out)], check=True)
    return out

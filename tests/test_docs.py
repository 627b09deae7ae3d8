"""The README's spec reference is generated from the field docs and must stay current."""

import re
from pathlib import Path

import pytest

from tritongen.spec import explain_markdown

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- spec-reference:start -->\n", "<!-- spec-reference:end -->"


def test_readme_spec_reference_is_current():
    text = README.read_text()
    current = text[text.index(START) + len(START): text.index(END)]
    assert current == explain_markdown(), "regenerate the table between the markers with `tritongen validate --markdown`"


def test_readme_keeps_the_two_setup_commands():
    text = README.read_text()
    assert "make demo" in text and "make test" in text


DOCS = [README, *sorted((README.parent / "docs").glob("*.md"))]
# A repository path: one of the checkout's top-level folders, then more path.
_REPO_PATH = re.compile(r"(?<![\w/.$-])((?:docs|generator|examples|tests|bench|loadtests|deploy|"
                        r"model_repository_templates)/[\w./*-]*[\w*])")
_UPSTREAM = re.compile(r"\b[0-9a-f]{40}\b|\b(NVIDIA|triton-inference-server|[\w-]+)/[\w.-]+ `|upstream", re.I)
_MARKDOWN_NAME = re.compile(r"(?<![\w/.-])([A-Za-z][\w-]*\.md)\b")


def test_docs_mention_only_files_that_exist():
    root = README.parent
    missing = []
    for doc in DOCS:
        # Lines citing an upstream file (with its commit, or its owner/repository) name paths of that repository.
        text = "\n".join(line for line in doc.read_text().splitlines() if not _UPSTREAM.search(line))
        for path in _REPO_PATH.findall(text):
            if not (any(root.glob(path)) if "*" in path else (root / path).exists()):
                missing.append(f"{doc.name}: {path}")
        for name in _MARKDOWN_NAME.findall(text):
            if not ((root / name).exists() or (root / "docs" / name).exists()):
                missing.append(f"{doc.name}: {name}")
    assert not missing, missing


def test_the_inventory_format_is_documented_and_errors_point_at_it(tmp_path):
    from tritongen.errors import SpecError
    from tritongen.placement.inventory import load_inventory

    doc = (README.parent / "docs" / "inventory.md").read_text()
    for field in ("memory_gib", "sm_count", "mig", "uuid", "index", "nvidia-smi -L", "nvml"):
        assert field in doc
    bad = tmp_path / "inv.yaml"
    bad.write_text("gpus:\n  - {name: NVIDIA H200, colour: red}\n")
    with pytest.raises(SpecError, match="docs/inventory.md"):
        load_inventory(str(bad))
    with pytest.raises(SpecError, match="docs/inventory.md"):
        load_inventory(str(tmp_path / "nope.yaml"))


def test_readme_runtime_table_has_every_runtime_and_says_where_it_ran():
    from tritongen.runtimes import RUNTIMES

    text = README.read_text()
    for name, rt in RUNTIMES.items():
        rows = [line for line in text.splitlines() if line.startswith(f"| `{name}` |") and line.count(" | ") == 4]
        assert len(rows) == 1, f"README's runtime table needs one row for {name}"
        assert rows[0].endswith(f"| {rt.executed_here} |"), f"{name}: the last column is Runtime.executed_here"

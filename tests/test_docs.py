"""The README stays short and points at pages that exist; the spec reference (docs/reference.md) is generated from
the field docs and must stay current; facts the README used to hold stay findable from it."""

import re
from pathlib import Path

import pytest

from tritongen.cli.flags import REFERENCE_HEAD
from tritongen.spec import explain_markdown

README = Path(__file__).resolve().parent.parent / "README.md"
REFERENCE = README.parent / "docs" / "reference.md"
GUIDE = README.parent / "docs" / "guide.md"
MAINTAINERS = README.parent / "docs" / "maintainers.md"


def _section(text: str, heading: str) -> str:
    """The body of the `## heading` section of a Markdown text."""
    start = text.index(f"\n## {heading}\n") + len(heading) + 5
    end = text.find("\n## ", start)
    return text[start:] if end == -1 else text[start:end]


def test_reference_page_is_current(capsys):
    from tritongen.cli import main

    assert main(["validate", "--markdown"]) == 0
    generated = capsys.readouterr().out
    assert generated == REFERENCE_HEAD + explain_markdown()
    assert REFERENCE.read_text() == generated, \
        "regenerate it: .venv/bin/tritongen validate --markdown > docs/reference.md"


def test_readme_keeps_the_two_setup_commands():
    block = _section(README.read_text(), "Two commands on a fresh machine")
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.startswith("    make ")]
    assert commands == ["make demo", "make test"]


def test_readme_is_under_1500_words():
    words = len(README.read_text().split())
    assert words < 1500, f"README.md has {words} words; move detail to docs/"


def test_readme_limits_name_what_cannot_run_here_and_point_at_the_details():
    limits = _section(README.read_text(), "Limits")
    for absent in ("TensorRT-LLM", "docker engine", "MIG"):
        assert absent in limits, absent
    assert "docs/maintainers.md" in limits
    assert "\n## What is verified here, and what is not\n" in MAINTAINERS.read_text()


def test_readme_points_at_the_guide_reference_and_maintainer_notes():
    text = README.read_text()
    for page in ("docs/guide.md", "docs/reference.md", "docs/maintainers.md"):
        assert page in text, page


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


def test_guide_runtime_table_has_every_runtime_and_says_where_it_ran():
    from tritongen.runtimes import RUNTIMES

    text = GUIDE.read_text()
    for name, rt in RUNTIMES.items():
        rows = [line for line in text.splitlines() if line.startswith(f"| `{name}` |") and line.count(" | ") == 4]
        assert len(rows) == 1, f"docs/guide.md's runtime table needs one row for {name}"
        assert rows[0].endswith(f"| {rt.executed_here} |"), f"{name}: the last column is Runtime.executed_here"

"""The README's spec reference is generated from the field docs and must stay current."""

from pathlib import Path

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

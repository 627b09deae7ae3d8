"""The render manifest (tritongen-repository.json): render writes what it put in the repository, and serve and
verify read it; a repository without one still works from its config files, with a note."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from specs import render_spec

from tritongen import native, repository_manifest, served
from tritongen.cli import main
from tritongen.errors import SpecError
from tritongen.serve.state import repository_deployment
from tritongen.verify import verify_repository


@pytest.fixture
def repo(tiny_repo, tmp_path) -> Path:
    """A copy of the tiny repository to change."""
    copy = tmp_path / "repo"
    shutil.copytree(tiny_repo, copy)
    return copy


def test_render_lists_every_model_its_backend_served_code_and_files(tiny_spec_path, tmp_path):
    # A repository of its own: the session's tiny repository is served by other tests, and the python backend
    # writes __pycache__ folders into what it serves.
    tiny_repo = tmp_path / "repo"
    render_spec(tiny_spec_path, tiny_repo)
    rendered = repository_manifest.read(tiny_repo)
    assert rendered.deployment == "tiny-cpu" and rendered.runtime == "hf" and rendered.bls == "tritongen_bls"
    on_disk = {p.parent.name for p in tiny_repo.glob("*/config.pbtxt")}
    assert set(rendered.models) == on_disk
    assert {name: (m.backend, m.served) for name, m in rendered.models.items()} == {
        "ensemble": ("tritongen_bls", "bls"), "preprocessing": ("python", "preprocessing"),
        "postprocessing": ("python", "postprocessing"), "tensorrt_llm": ("python", "hf_model"),
        "tensorrt_llm_bls": ("tritongen_bls", "bls")}
    written = sorted(p.relative_to(tiny_repo).as_posix() for p in tiny_repo.rglob("*")
                     if p.is_file() and "/" in p.relative_to(tiny_repo).as_posix())
    assert sorted(f for m in rendered.models.values() for f in m.files) == written
    for name, model in rendered.models.items():  # the served files are exactly what the package ships for it
        if model.served is not None:
            shipped = served.model_files(model.served, f"{name}/1")
            assert sorted(shipped) == sorted(f for f in model.files if f.endswith(".py"))
    assert repository_manifest.RepositoryManifest.from_bytes(rendered.to_bytes()) == rendered


def test_serve_reads_backends_and_deployment_from_the_manifest_not_the_configs(repo):
    assert native.used_by(repo) == ("tritongen_bls",)
    assert repository_deployment(repo) == "tiny-cpu"
    manifest = repo / repository_manifest.FILE
    text = manifest.read_text()
    manifest.write_text(text.replace('"tritongen_bls"', '"python"').replace('"tiny-cpu"', '"from-manifest"'))
    assert native.used_by(repo) == ()
    assert repository_deployment(repo) == "from-manifest"


def test_without_a_manifest_the_configs_are_read_and_serve_says_so(repo, capsys):
    (repo / repository_manifest.FILE).unlink()
    assert native.used_by(repo) == ("tritongen_bls",)
    assert repository_deployment(repo) == "tiny-cpu"
    assert verify_repository(repo) == []
    assert main(["verify", str(repo)]) == 0
    assert repository_manifest.NOTE.format(repo=repo) in capsys.readouterr().err


def test_with_a_manifest_no_note(tiny_repo, capsys):
    assert main(["verify", str(tiny_repo)]) == 0
    assert repository_manifest.FILE not in capsys.readouterr().err


def test_verify_finds_what_the_manifest_lists_and_the_repository_lacks(repo):
    (repo / "preprocessing" / "1" / "detok_table.py").unlink()
    config = repo / "tensorrt_llm_bls" / "config.pbtxt"
    config.write_text(config.read_text().replace('backend: "tritongen_bls"', 'backend: "python"'))
    assert [str(f) for f in verify_repository(repo)] == [
        "preprocessing/1/detok_table.py: missing: render wrote it (tritongen-repository.json); render the "
        "repository again",
        "tensorrt_llm_bls/config.pbtxt: backend 'python', rendered as 'tritongen_bls'; render the repository again"]


def test_a_manifest_that_does_not_parse_is_a_finding_and_an_error(repo):
    (repo / repository_manifest.FILE).write_text('{"version": 99}')
    with pytest.raises(SpecError, match="is not a tritongen render manifest"):
        repository_manifest.read(repo)
    (finding,) = verify_repository(repo)
    assert finding.path == repository_manifest.FILE and "version 99, this tritongen reads 1" in finding.message

"""The code tritongen ships into model repositories: the python models and the modules they use.

Each served model is a module here (`bls`, `preprocessing`, ...); inside tritonserver it runs as
`<model>/1/model.py`. The python backend's stub imports that file as the module `1.model` of the package `1` (the
version folder), so the models import their helpers relatively (`from .error_kinds import ...`): the same import
works here, inside `tritongen.served`, and in a rendered version folder where render lays out the helpers beside
model.py. The modules therefore import only the standard library, what the stub's interpreter has (numpy, torch,
transformers, triton_python_backend_utils) and each other, never the rest of tritongen.

SHIPPED is the one list of what goes where; render copies exactly these files (tests/test_served.py checks that
every relative import of a shipped module is in its model's list).
"""

from __future__ import annotations

from importlib import resources

SHIPPED: dict[str, tuple[str, ...]] = {
    "preprocessing": ("detok_table", "error_kinds", "stub"),
    "postprocessing": ("stub",),
    "bls": ("detokenizer", "error_kinds", "lora_resend", "stub", "wiring"),
    "hf_model": ("error_kinds", "hf_adapters", "hf_guided", "hf_requests", "stub"),
    "synthetic": ("engine_model", "error_kinds", "stub"),
}
"""Served model module -> the modules laid out beside it in its version folder."""


def source(module: str) -> bytes:
    """The file of one module of this package, as it is."""
    return resources.files(__name__).joinpath(f"{module}.py").read_bytes()


def model_files(model: str, folder: str) -> dict[str, bytes]:
    """The files of served model `model` in the repository's version folder `folder` (e.g. "preprocessing/1"):
    the model as model.py and its modules beside it."""
    if model not in SHIPPED:
        raise ValueError(f"no served model {model!r}; one of {sorted(SHIPPED)}")
    files = {f"{folder}/model.py": source(model)}
    files.update({f"{folder}/{helper}.py": source(helper) for helper in SHIPPED[model]})
    return files

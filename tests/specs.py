"""Spec helpers the tests share: dotted-key overrides and rendering a spec into a model repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

# `make goldens` sets it: the golden tests then rewrite their folders instead of comparing.
REGENERATE = "TRITONGEN_REGEN_GOLDEN"


def apply_overrides(data: dict, overrides: dict) -> dict:
    """Set each `a.b.c` key of `overrides` in the spec mapping `data` (sections made as needed); returns `data`."""
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return data


def run_cli(*args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`tritongen ARGS` in a subprocess (a load test must not run in the test process: locust monkey-patches the
    whole process for gevent)."""
    return subprocess.run([sys.executable, "-m", "tritongen.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)


def short_example(example: Path, out: Path, checkpoint: Path, slo: dict | None = None, **overrides) -> Path:
    """An examples/*.yaml served here: on `checkpoint` in float32, with a short load profile of 16-token prompts
    and completions (and `slo` in place of the example's SLOs when given), written to `out`."""
    import yaml

    data = yaml.safe_load(example.read_text())
    data["model"].update(checkpoint=str(checkpoint), dtype="float32")
    data["validation"]["load"].update(users=2, spawn_rate=2, duration_s=4, input_tokens={"mean": 16, "stddev": 0},
                                      output_tokens={"mean": 16, "stddev": 0})
    if slo is not None:
        data["validation"]["slo"] = slo
    apply_overrides(data, overrides)
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def start_with_double(repo: Path, log: Path, itl_ms: float, *extra_args: str, library_path: Path | None = None):
    """The embedded tritonserver on a repository served by a test double (tests/doubles/*), which reads its decode
    step from TRITONGEN_DOUBLE_ITL_MS; `library_path` goes first on LD_LIBRARY_PATH. The server's log tail is
    printed when it does not come up."""
    from tritongen.serve import TritonServer

    env = {**os.environ, "TRITONGEN_DOUBLE_ITL_MS": str(itl_ms)}
    if library_path is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(library_path), env.get("LD_LIBRARY_PATH")) if p)
    server = TritonServer(repo, log_path=log, extra_args=list(extra_args), env=env)
    try:
        server.start(timeout=300)
    except Exception:
        print(server.log_tail(80))
        raise
    return server


def assert_golden(files: dict[str, bytes], golden: Path) -> None:
    """`files` ({relative path: bytes}) equal the golden folder file for file; with TRITONGEN_REGEN_GOLDEN=1
    (`make goldens`) the folder is rewritten from them first. Golden folders are plain files (no tritongen marker)."""
    if os.environ.get(REGENERATE) == "1":
        shutil.rmtree(golden, ignore_errors=True)
        for rel, data in files.items():
            (golden / rel).parent.mkdir(parents=True, exist_ok=True)
            (golden / rel).write_bytes(data)
    expected = {str(p.relative_to(golden)): p.read_bytes() for p in sorted(golden.rglob("*")) if p.is_file()}
    assert sorted(files) == sorted(expected)
    for rel, data in files.items():
        assert data == expected[rel], f"{rel} differs from {golden} (`make goldens` regenerates it on purpose)"


def served_files(files: dict[str, bytes]) -> dict[str, bytes]:
    """The python files a rendered repository must hold: for each version folder's model.py, the served model it
    is (tritongen.served) with the modules beside it that the package's SHIPPED lists, as the package has them."""
    from tritongen import served

    expected: dict[str, bytes] = {}
    for rel in (k for k in files if k.endswith("/model.py")):
        folder = rel.removesuffix("/model.py")
        model = next((m for m in served.SHIPPED if served.source(m) == files[rel]), None)
        assert model is not None, f"{rel} is none of tritongen.served's models"
        expected.update(served.model_files(model, folder))
    return expected


def render_spec(spec_path: Path, out: Path):
    """Plan the spec at `spec_path` and write its model repository to `out`; returns the Plan."""
    from tritongen.render import render_for
    from tritongen.plan import plan_from_file
    from tritongen.render import write_repository

    _, plan = plan_from_file(spec_path)
    write_repository(render_for(plan), out)
    return plan


def trtllm_section(spec, checkpoint: Path, *, gpu_arch: str = "sm90"):
    """The Plan's tensorrtllm section for `spec` and `checkpoint`, resolved by the runtime's own planning hook (the
    engine cache entry keyed while planning); relative paths resolve against the checkpoint's folder."""
    from tritongen.plan.checks import read_config
    from tritongen.plan.make import kv_tokens, max_batch_size, resolve_path
    from tritongen.runtimes.base import PlanContext
    from tritongen.runtimes.tensorrtllm.runtime import RUNTIME

    ctx = PlanContext(spec=spec, resolve=lambda value: resolve_path(checkpoint.parent, value), checkpoint=checkpoint,
                      config=read_config(checkpoint), inventory_gpus=lambda: [], tokenizer=None,
                      max_batch_size=max_batch_size(spec), kv_tokens=kv_tokens(spec),
                      max_seq_len=spec.engine.max_seq_len,
                      inventory=None, engine_dir=None, gpu_arch=gpu_arch)
    return RUNTIME.prepare(ctx)


def trtllm_build_settings(spec):
    """The engine build settings planning resolves for `spec` (BuildSettings)."""
    from tritongen.plan.make import max_batch_size
    from tritongen.runtimes.tensorrtllm.runtime import build_settings

    return build_settings(spec.engine, max_batch_size(spec))


class CharTokenizer:
    """A tokenizer of one id per character: enough for a token_ids.Codec in unit tests."""

    eos_token_id, pad_token_id, all_special_ids = 2, None, [2]

    def get_vocab(self):
        return {}

    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text]

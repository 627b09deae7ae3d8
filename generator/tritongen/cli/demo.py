"""`tritongen demo` and `tritongen demo-model`: the tiny Llama made locally, and the main job end to end on it."""

from __future__ import annotations

import argparse
from pathlib import Path

import tritongen
from tritongen import console
from tritongen.cli import main
from tritongen.demo.model import make_demo_model
from tritongen.errors import SpecError, problem


def cmd_demo(args: argparse.Namespace) -> int:
    """`make demo`: a tiny Llama made locally -> rendered ensemble -> the embedded tritonserver -> a streamed
    completion -> a Locust load test against the example's SLOs, from the repository root. Exit code: the verdict."""
    root = _demo_root()
    if root != Path.cwd().resolve():
        print(f"[demo] from the tritongen checkout {root} (its examples/{DEMO_EXAMPLE})", flush=True)
    model = make_demo_model(root / "build" / "tiny-llama")
    console.info(f"[demo] tiny Llama checkpoint + tokenizer: {model}")
    console.info("[demo] its weights are random: the generated text is noise by design; the demo proves the "
                 "serving path (rendering, tritonserver, streaming, load test), not a model")
    level = {console.QUIET: ["-q"], console.VERBOSE: ["-v"]}.get(console.level(), [])  # main sets it anew
    return main([*level, "up", str(root / "examples" / DEMO_EXAMPLE), "--out", str(root / "demo-output")])


DEMO_EXAMPLE = "tiny-cpu.yaml"


def _demo_root() -> Path:
    """The checkout the demo runs in: the working folder when it holds examples/tiny-cpu.yaml, else the checkout
    this tritongen is installed from (an editable install); refused before anything is written otherwise."""
    for root in (Path.cwd().resolve(), Path(tritongen.__file__).resolve().parents[2]):
        if (root / "examples" / DEMO_EXAMPLE).is_file():
            return root
    raise SpecError(problem("demo", f"needs a tritongen checkout (examples/{DEMO_EXAMPLE}), and neither "
                            f"{Path.cwd()} nor this installation is one",
                            "run it in a clone of the tritongen repository, or serve your own spec: "
                            "`tritongen demo-model build/tiny-llama`, then `tritongen up SPEC`"))


def cmd_demo_model(args: argparse.Namespace) -> int:
    path = make_demo_model(args.dir, seed=args.seed, force=args.force, tokenizer=args.tokenizer)
    print(f"tiny Llama checkpoint + tokenizer: {path} (random weights: its text is noise by design)")
    if args.adapters < 0:
        raise SpecError(problem("--adapters", f"{args.adapters} is negative", "pass a count of adapters, e.g. 3"))
    if args.adapters:
        from tritongen.demo.adapters import make_demo_adapters

        for k, adapter in enumerate(make_demo_adapters(path, args.adapters, seed=args.seed, force=args.force), 1):
            print(f"LoRA adapter {k}: {adapter} (random, non-zero: it changes the text)")
    return 0

"""`make demo`: the main job end to end on the embedded default.

A tiny Llama made locally -> rendered ensemble -> the embedded tritonserver -> a streamed completion ->
a Locust load test against the example's SLOs. The exit code is the SLO verdict.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tritongen.cli import main as tritongen
from tritongen.demo.model import make_demo_model

# Run from the repository root (`make demo`): the example and its outputs live there.
ROOT = Path.cwd()


def main() -> int:
    model = make_demo_model(ROOT / "build" / "tiny-llama")
    print(f"[demo] tiny Llama checkpoint + tokenizer: {model}", flush=True)
    print("[demo] its weights are random: the generated text is noise by design; the demo proves the serving path "
          "(rendering, tritonserver, streaming, load test), not a model", flush=True)
    return tritongen(["up", str(ROOT / "examples" / "tiny-cpu.yaml"), "--out", str(ROOT / "demo-output")])


if __name__ == "__main__":
    sys.exit(main())

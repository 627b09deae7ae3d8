"""`tritongen pins`: each runtime's pinned container and the upstream facts about it, each with where it was read."""

from __future__ import annotations

import argparse
import json

from tritongen.runtimes import launches
from tritongen.runtimes.pins import ContainerPin, Fact


def _fact(fact: Fact) -> dict[str, str | None]:
    s = fact.source
    return {"value": fact.value, "repo": s.repo, "path": s.path, "commit": s.commit, "note": s.note}


def pin_json(pin: ContainerPin) -> dict:
    return {"image": pin.image.value, "release": pin.release,
            "driver": {"stated_minimum": pin.driver.stated_minimum.value if pin.driver.stated_minimum else None,
                       "bundled": pin.driver.bundled.value, "cuda": pin.driver.cuda.value,
                       "datacenter_branches": [f"R{b.branch} (CUDA {b.cuda_major}.x)" for b in pin.driver.datacenter]},
            "facts": [{"what": what, **_fact(fact)} for what, fact in pin.facts()]}


def cmd_pins(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps({name: pin_json(r.upstream.pin) if r.upstream.pin else None for name, r in launches().items()},
                         indent=2))
        return 0
    for name, runtime in launches().items():
        pin = runtime.upstream.pin
        print(f"{name}: {runtime.image()}")
        if pin is None:
            print(f"  {runtime.upstream.checked}\n")
            continue
        rule = pin.driver
        print(f"  release        {pin.release} ({pin.date.value}), tritonserver {pin.tritonserver.value}")
        print(f"  serves with    {pin.engine.value}; {pin.backend.value}")
        print(f"  driver         minimum {rule.minimum_text()}; CUDA {rule.cuda.value}")
        for branch in rule.datacenter:
            print(f"                 data-center GPUs: R{branch.branch} runs CUDA {branch.cuda_major}.x images through "
                  "CUDA minor version compatibility (plan --inventory warns)")
        for note in pin.notes:
            print(f"  note           {note.value}")
        for newer in pin.newer:
            print(f"  newer          {newer.value}")
        print("  sources")
        for what, fact in pin.facts():
            print(f"    {what:22} {fact.source.cite()}")
        print()
    return 0

"""`tritongen loadtest --json`: the verdict of a finished run as one JSON document on stdout, for scripts and CI.

The report (loadtest.json, docs/loadtest-report.md) holds everything; this is the part a pipeline branches on.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tritongen.errors import TritongenError, clip, scrub


def with_json_verdict(out: Path, run: Callable[[], int]) -> int:
    """Run a load test whose report goes to `out` with its output on stderr, then print its verdict as JSON (or,
    when it fails before a verdict, the errors and the exit code; the error lines still reach stderr)."""
    started = time.time()
    try:
        with stdout_to_stderr():
            code = run()
    except TritongenError as err:
        print(json.dumps({"passed": False, "exit_code": err.exit_code, "capacity": None, "levels": [],
                          "report": None, "errors": [scrub(clip(line, 2000)) for line in err.problems]},
                         indent=2), flush=True)
        raise
    return print_verdict_json(out, code, started)


@contextlib.contextmanager
def stdout_to_stderr():
    """Send everything the run prints, its child processes included, to stderr: stdout carries only the JSON."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def verdict(report: dict, exit_code: int, path: Path) -> dict:
    """passed / exit_code / capacity / per level the objectives that failed, from a loadtest.json summary."""
    capacity = report.get("capacity") or {}
    return {
        "passed": bool(report.get("slo", {}).get("passed")),
        "exit_code": exit_code,
        "capacity": {k: capacity.get(k) for k in ("level", "unit", "rule", "min_capacity", "line")},
        "levels": [{"level": level["level"], "passed": level["slo"]["passed"],
                    "failed": [r["line"] for r in level["slo"]["results"] if not r["passed"]]}
                   for level in report.get("levels", [])],
        "report": str(path),
    }


def print_verdict_json(out: Path, exit_code: int, started: float) -> int:
    """Print the verdict of the run (begun at `started`, time.time()) whose report is in `out`; the exit code stays
    the run's. A report older than the run is an earlier run's: no verdict then."""
    path = out / "loadtest.json"
    try:
        report = json.loads(path.read_text()) if path.stat().st_mtime >= started else None
    except (OSError, ValueError):
        report = None
    doc = verdict(report, exit_code, path.resolve()) if report else \
        {"passed": False, "exit_code": exit_code, "capacity": None, "levels": [], "report": None}
    print(json.dumps(doc, indent=2), flush=True)
    return exit_code

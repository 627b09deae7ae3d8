"""A trial for real: plan, render, serve on the embedded tritonserver, run the project's load test (token check
included) once per round.

One server serves every trial. It runs with Triton's explicit model control, so a trial whose repository has the
same models as the last one (only their configs or parameters changed: batch, KV budget, instances, stream
interval) is applied by writing the repository and reloading the changed models (POST
/v2/repository/models/<name>/load); a different set of models restarts the server.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritongen.errors import CheckFailed, EnvironmentMissing, problem
from tritongen.loadtests.runner import Endpoint, LoadTest, run_loadtest
from tritongen.plan import Plan
from tritongen.plan.make import make_plan
from tritongen.render import render_for, write_repository
from tritongen.runtimes import runtime_of
from tritongen.serve import TritonServer
from tritongen.spec import Spec
from tritongen.tune.measure import Report, TrialResult, from_report, merge

LOAD_TIMEOUT_S = 300
EXPLICIT = ["--model-control-mode=explicit", "--load-model=*"]


def devices(plan: Plan) -> int:
    """What goodput is divided by: the GPUs (or MIG slices) the plan places on; 1 for a CPU host."""
    if plan.placement is not None and plan.server_groups:
        return sum(len([d for d in g.gpu_device_ids.split(",") if d.strip()]) or 1 for g in plan.server_groups)
    return 1 if plan.llm_instance_group.kind == "KIND_CPU" else max(1, len(plan.llm_instance_group.gpus or (0,)))


def one_level(plan: Plan) -> LoadTest:
    """The spec's load at one level: its own, or the highest of its sweep (where the goodput is decided)."""
    p = plan.load
    update: dict[str, Any] = {"sweep": ()}
    if p.sweep:
        update["users" if p.mode == "closed" else "request_rate"] = int(max(p.sweep)) if p.mode == "closed" \
            else max(p.sweep)
    return LoadTest(p.model_copy(update=update))


def _models(files: dict[str, bytes]) -> dict[str, dict[str, bytes]]:
    out: dict[str, dict[str, bytes]] = {}
    for path, data in files.items():
        if "/" in path:
            name, rest = path.split("/", 1)
            out.setdefault(name, {})[rest] = data
    return out


@dataclass
class ServedEvaluator:
    spec_dir: Path
    out: Path
    inventory: str | None = None
    rounds: int = 2
    server_timeout: float = 300.0
    server: Any = None
    files: dict[str, bytes] | None = None
    restarts: int = 0
    reloads: int = 0
    calls: list = field(default_factory=list)

    @property
    def repo(self) -> Path:
        return self.out / "model_repository"

    def evaluate(self, spec: Spec, values: dict[str, Any], report: Report, where: Path) -> TrialResult:
        self.calls.append(dict(values))
        plan = make_plan(spec, self.spec_dir, self.inventory)
        rt = runtime_of(plan)
        if not rt.embedded:
            raise EnvironmentMissing(problem("runtime", rt.not_embedded(), "tune serves every trial on the "
                                             "embedded tritonserver; pick a runtime it serves"))
        how = self._serve(render_for(plan))
        endpoint = Endpoint(grpc_url=self.server.grpc_url, http_url=self.server.http_url,
                            metrics_url=self.server.metrics_url)
        load, n = one_level(plan), devices(plan)
        done: list[TrialResult] = []
        for i in range(self.rounds):
            run_dir = where / f"round-{i + 1}"
            run_loadtest(plan, endpoint, load, run_dir)
            if self.server.process.poll() is not None:
                raise CheckFailed(f"tritonserver exited with code {self.server.process.returncode} during the load "
                                  f"test:\n{self.server.log_tail()}")
            done.append(from_report(json.loads((run_dir / "loadtest.json").read_text()), n))
            if i < self.rounds - 1 and report(i, merge(done)):
                break
        result = merge(done)
        result.note = "; ".join(x for x in (how, result.note) if x)
        return result

    def _serve(self, files: dict[str, bytes]) -> str:
        """Serve `files`: start, reload the changed models, or restart. Returns how, in a word."""
        alive = self.server is not None and self.server.process.poll() is None
        if alive and self.files is not None and set(_models(files)) == set(_models(self.files)):
            old, new = _models(self.files), _models(files)
            changed = [m for m in new if new[m] != old[m]]
            write_repository(files, self.repo, overwrite=True, flag="--out")
            self.files = files
            # Composing models first, then what calls them (the BLS, the ensemble).
            for name in sorted(changed, key=lambda m: (m in ("tensorrt_llm_bls", "ensemble"), m == "ensemble")):
                self._load(name)
            self.reloads += bool(changed)
            return f"reloaded {', '.join(changed)}" if changed else "reused"
        self.stop()
        write_repository(files, self.repo, overwrite=True, flag="--out")
        self.files = files
        self.server = TritonServer(self.repo, log_path=self.out / "tritonserver.log", extra_args=list(EXPLICIT),
                                   supervise=False)
        self.server.start(timeout=self.server_timeout)
        self.restarts += 1
        return "started" if self.restarts == 1 else "restarted"

    def _load(self, model: str) -> None:
        url = f"http://{self.server.http_url}/v2/repository/models/{model}/load"
        try:
            urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=LOAD_TIMEOUT_S)
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")[:300]
            raise CheckFailed(f"tritonserver could not reload model {model}: {detail}\n{self.server.log_tail()}") \
                from None

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

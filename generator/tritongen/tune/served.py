"""A trial for real: plan, render, serve on the embedded tritonserver, run the project's load test (token check
included) once per round.

One server serves every trial. It runs with Triton's explicit model control, so a trial whose repository has the
same models as the last one (only their configs or parameters changed: batch, KV budget, instances, stream
interval) is applied by writing the repository and reloading the changed models (POST
/v2/repository/models/<name>/load); a different set of models restarts the server. A trial reloads only the models
its change touches: the tokenizer models (preprocessing, postprocessing: the slowest to load) stay loaded when all
that changed in them is their batch cap, the loaded cap is at least the new one and their dynamic batcher does not
wait (max_queue_delay_microseconds 0, Triton's default): they then run every batch the new cap would, the same way. Every other
changed model (the LLM, the BLS, whose in-flight limit is the batch, and the ensemble, which Triton requires to cap
no more than its step) is reloaded.

A trial whose server does not serve it (a model that fails to load or reload, or stays unavailable; a server that
exits during the load test, e.g. an LLM model that stops it when its generation loop dies) raises CheckFailed after
keeping the server's log in the trial's folder and stopping what is left of the server: the search records the
trial as failed and the next trial starts a fresh server.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritongen.errors import CheckFailed, EnvironmentMissing, TritongenError, problem
from tritongen.loadtests.runner import INTERRUPTED_EXIT, Endpoint, LoadTest, run_loadtest
from tritongen.plan import Plan
from tritongen.plan.make import make_plan
from tritongen.readiness import model_states, server_ready, wait_until_ready
from tritongen.render import render_for, write_repository
from tritongen.runtimes import launch
from tritongen.serve import TritonServer
from tritongen.serve.causes import fatal_cause
from tritongen.spec import Spec
from tritongen.tune.measure import Report, TrialResult, from_report, merge

LOAD_TIMEOUT_S = 300
READY_TIMEOUT_S = 30.0
"""How long a trial waits after its reloads for every model to be READY before it counts as failed."""
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


KEEPABLE = ("preprocessing", "postprocessing")
_CAP = re.compile(rb"^(max_batch_size: |  preferred_batch_size: \[ )(\d+)", re.M)


def _cap(config: bytes) -> int | None:
    m = re.search(rb"^max_batch_size: (\d+)", config, re.M)
    return int(m.group(1)) if m else None


def keeps(name: str, loaded: dict[str, bytes], new: dict[str, bytes]) -> bool:
    """Whether model `name` may stay loaded as it is for a trial whose files for it are `new` (see the module)."""
    if name not in KEEPABLE or set(loaded) != set(new):
        return False
    if any(loaded[f] != new[f] for f in new if f != "config.pbtxt"):
        return False
    old_cfg, new_cfg = loaded["config.pbtxt"], new["config.pbtxt"]
    old_cap, new_cap = _cap(old_cfg), _cap(new_cfg)
    return (old_cap is not None and new_cap is not None and old_cap >= new_cap
            and (b"max_queue_delay_microseconds: 0\n" in new_cfg or b"dynamic_batching {}" in new_cfg)
            and _CAP.sub(rb"\g<1>N", old_cfg) == _CAP.sub(rb"\g<1>N", new_cfg))


def _not_ready(http_url: str, names: set[str]) -> dict[str, tuple[str, str]]:
    """{model: (state, reason)} of those of `names` that the server's repository index does not show READY."""
    try:
        states = model_states(http_url)
    except Exception as err:  # noqa: BLE001 - a server that does not answer is not ready either
        states = {name: ("UNREACHABLE", str(err)) for name in names}
    return {m: states.get(m, ("UNKNOWN", "not in the repository index")) for m in sorted(names)
            if states.get(m, ("",))[0] != "READY"}


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
    loaded: list = field(default_factory=list)
    """The models each evaluation loaded through the API, in order (tests count reloads)."""
    calls: list = field(default_factory=list)

    @property
    def repo(self) -> Path:
        return self.out / "model_repository"

    def evaluate(self, spec: Spec, values: dict[str, Any], report: Report, where: Path) -> TrialResult:
        self.calls.append(dict(values))
        plan = make_plan(spec, self.spec_dir, self.inventory)
        rt = launch(plan)
        if not rt.embedded:
            raise EnvironmentMissing(problem("runtime", rt.not_embedded(), "tune serves every trial on the "
                                             "embedded tritonserver; pick a runtime it serves"))
        load, n = one_level(plan), devices(plan)
        try:
            how = self._serve(render_for(plan))
            self._check_ready()
            done = self._rounds(plan, load, n, report, where)
        except CheckFailed:
            self._keep_log(where)
            self.stop()
            raise
        result = merge(done)
        result.note = "; ".join(x for x in (how, result.note) if x)
        return result

    def _rounds(self, plan: Plan, load: LoadTest, n: int, report: Report, where: Path) -> list[TrialResult]:
        endpoint = Endpoint(grpc_url=self.server.grpc_url, http_url=self.server.http_url,
                            metrics_url=self.server.metrics_url)
        done: list[TrialResult] = []
        for i in range(self.rounds):
            run_dir = where / f"round-{i + 1}"
            try:
                code = run_loadtest(plan, endpoint, load, run_dir)
            except TritongenError:
                self._check_alive("during the load test")  # a load test that failed because its server died
                raise
            if code == INTERRUPTED_EXIT:  # Ctrl-C, taken by the load test: the tune stops too
                raise KeyboardInterrupt
            self._check_alive("during the load test")
            done.append(from_report(json.loads((run_dir / "loadtest.json").read_text()), n))
            if i < self.rounds - 1 and report(i, merge(done)):
                break
        return done

    def _check_ready(self) -> None:
        """Every model of the trial's repository READY (a reload can leave one unavailable: its load test would
        measure errors, not the configuration)."""
        names = set(_models(self.files or {}))
        outcome = wait_until_ready(self.server.http_url, READY_TIMEOUT_S,
                                   stopped=lambda: self.server.process.poll() is not None,
                                   probe=lambda url: not _not_ready(url, names))
        self._check_alive("while its models loaded")
        if outcome == "timeout":
            said = "; ".join(f"{m} {state}" + (f" ({why})" if why else "")
                             for m, (state, why) in _not_ready(self.server.http_url, names).items())
            raise CheckFailed(f"after {READY_TIMEOUT_S:g} s not every model is READY: {said}\n"
                              f"{self.server.failure_reasons()}")

    def _check_alive(self, when: str) -> None:
        if self.server.process.poll() is None and not server_ready(self.server.http_url):
            # Not ready: stopping (e.g. asked to by a model whose loop died), which takes up to its grace period.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.server.process.wait(timeout=self.server.grace_s + 15)
        if self.server.process.poll() is not None:
            cause = fatal_cause(self.server.log_path)
            raise CheckFailed(f"tritonserver exited with code {self.server.process.returncode} {when}"
                              + (f" ({cause})" if cause else "") + f":\n{self.server.failure_reasons()}")

    def _keep_log(self, where: Path) -> None:
        log = getattr(self.server, "log_path", None)
        if log is not None and Path(log).is_file():
            where.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, where / "tritonserver.log")

    def _serve(self, files: dict[str, bytes]) -> str:
        """Serve `files`: start, reload the changed models, or restart. Returns how, in a word."""
        alive = self.server is not None and self.server.process.poll() is None
        if alive and self.files is not None and set(_models(files)) == set(_models(self.files)):
            old, new = _models(self.files), _models(files)
            changed = [m for m in new if new[m] != old[m]]
            kept = [m for m in changed if keeps(m, old[m], new[m])]
            changed = [m for m in changed if m not in kept]
            # A kept model's files stay as loaded, so the repository on disk is what the server serves.
            served = {p: (self.files[p] if p.split("/", 1)[0] in kept else data) for p, data in files.items()}
            write_repository(served, self.repo, overwrite=True, flag="--out")
            self.files = served
            # Composing models first, then what calls them (the BLS, the ensemble).
            for name in sorted(changed, key=lambda m: (m in ("tensorrt_llm_bls", "ensemble"), m == "ensemble")):
                self._load(name)
            self.loaded.append(list(changed))
            self.reloads += bool(changed)
            how = f"reloaded {', '.join(changed)}" if changed else "reused"
            return how + (f"; kept {', '.join(kept)} (batch cap already loaded covers it)" if kept else "")
        self.stop()
        write_repository(files, self.repo, overwrite=True, flag="--out")
        self.files = files
        self.server = TritonServer(self.repo, log_path=self.out / "tritonserver.log", extra_args=list(EXPLICIT),
                                   supervise=False)
        self.server.start(timeout=self.server_timeout)
        self.loaded.append(sorted(_models(files)))
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
        except OSError as err:  # refused (the server died), timed out
            raise CheckFailed(f"tritonserver did not answer the reload of model {model}: {err}\n"
                              f"{self.server.log_tail()}") from None

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

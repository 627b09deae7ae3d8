"""A plan run on this machine: its repository rendered, written (and verified), served on the embedded
tritonserver and load-tested, the server's death during the load named as such.

`tritongen up` runs one plan on a fresh server (tritongen.pipeline.up); `tritongen tune` runs one plan per trial on
one server it keeps (tritongen.tune.served). With `RunOptions.keep_server`, the server runs under Triton's explicit
model control, and a plan whose repository has the same models as the one served is applied by writing the
repository and reloading the models that changed (POST /v2/repository/models/<name>/load); a different set of
models restarts the server. Only the models a change touches are reloaded: the tokenizer models (preprocessing,
postprocessing: the slowest to load) stay loaded when all that changed in them is their batch cap, the loaded cap is
at least the new one and their dynamic batcher does not wait (max_queue_delay_microseconds 0, Triton's default):
they then run every batch the new cap would, the same way. Every other changed model (the LLM, the BLS, whose
in-flight limit is the batch, and the ensemble, which Triton requires to cap no more than its step) is reloaded.

A plan the server does not serve (a model that fails to load or reload, or stays unavailable; a server that exits
during the load test, e.g. an LLM model that stops it when its generation loop dies) raises CheckFailed; the caller
decides what follows (`up` stops, a tune records a failed trial and its next trial starts a fresh server).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tritongen.errors import CheckFailed, EnvironmentMissing, TritongenError, problem
from tritongen.loadtests.runner import INTERRUPTED_EXIT, Endpoint, LoadTest, run_loadtest, say
from tritongen.plan import Plan
from tritongen.readiness import model_states, server_ready, wait_until_ready
from tritongen.render import render_for, write_repository
from tritongen.runtimes import launch
from tritongen.serve import TritonServer
from tritongen.serve.causes import fatal_cause
from tritongen.verify import verify_repository

LOAD_TIMEOUT_S = 300
"""How long a model's reload through the repository API may take."""
READY_TIMEOUT_S = 30.0
"""How long a kept server waits after its reloads for every model to be READY before the plan counts as not served."""
EXPLICIT = ["--model-control-mode=explicit", "--load-model=*"]
KEEPABLE = ("preprocessing", "postprocessing")
_CAP = re.compile(rb"^(max_batch_size: |  preferred_batch_size: \[ )(\d+)", re.M)


UP_INSTEAD = "run `tritongen deploy SPEC --target docker` (or compose / k8s) and `tritongen loadtest` against it"


def require_embedded(plan: Plan, instead: str = UP_INSTEAD) -> None:
    """Refuse a plan whose runtime the embedded tritonserver does not serve; `instead` is the fix."""
    rt = launch(plan)
    if not rt.embedded:
        raise EnvironmentMissing(problem("runtime", rt.not_embedded(), instead))


@dataclass(frozen=True)
class RunOptions:
    """How a plan is run on this machine."""

    out: Path
    """The folder of the model repository (out/model_repository), the server's log and what the caller writes."""
    server_timeout: float = 300.0
    """Seconds to wait for a started tritonserver to be ready."""
    keep_server: bool = False
    """Keep one server for every plan served, under explicit model control, reloading only the models that changed
    (tune's trials); False: the server is started for one plan, supervised (up)."""
    verify: bool = True
    """Verify the written repository (configs parse, ensemble wiring) before the server starts."""
    instead: str = UP_INSTEAD
    """What to do instead when the plan's runtime has no embedded tritonserver (the error's fix)."""


def _quiet(stage: str, detail: str) -> None:
    """The default stage reporter: says nothing."""


def _models(files: dict[str, bytes]) -> dict[str, dict[str, bytes]]:
    out: dict[str, dict[str, bytes]] = {}
    for path, data in files.items():
        if "/" in path:
            name, rest = path.split("/", 1)
            out.setdefault(name, {})[rest] = data
    return out


def _cap(config: bytes) -> int | None:
    m = re.search(rb"^max_batch_size: (\d+)", config, re.M)
    return int(m.group(1)) if m else None


def keeps(name: str, loaded: dict[str, bytes], new: dict[str, bytes]) -> bool:
    """Whether model `name` may stay loaded as it is for a plan whose files for it are `new` (see the module)."""
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


class LocalRun:
    """Plans served on this machine's embedded tritonserver and load-tested against it; `stop` ends the server.

    `stage(name, detail)` hears each step as it happens (render, verify, serve) when a server is started."""

    def __init__(self, options: RunOptions, stage: Callable[[str, str], None] = _quiet) -> None:
        self.options = options
        self.stage = stage
        self.server: TritonServer | None = None
        self.files: dict[str, bytes] | None = None
        """The repository as the server has it loaded."""
        self.restarts = 0
        self.reloads = 0
        self.loaded: list[list[str]] = []
        """The models each `serve` loaded, in order (tests count reloads)."""

    @property
    def repo(self) -> Path:
        return self.options.out / "model_repository"

    @property
    def log_path(self) -> Path:
        return self.options.out / "tritonserver.log"

    def serve(self, plan: Plan) -> str:
        """Serve the plan's repository: start a server, or (keep_server) reload what changed on the one running, or
        restart it. Returns how, in a few words."""
        require_embedded(plan, self.options.instead)
        files = render_for(plan)
        alive = self.server is not None and self.server.process is not None and self.server.process.poll() is None
        if self.options.keep_server and alive and self.files is not None \
                and set(_models(files)) == set(_models(self.files)):
            how = self._reload(files)
        else:
            how = self._start(files)
        if self.options.keep_server:
            self._check_ready()
        return how

    def _start(self, files: dict[str, bytes]) -> str:
        self.stop()
        # The repository under `out` is tritongen's own output, so a new run replaces it.
        write_repository(files, self.repo, overwrite=True, flag="--out")
        self.files = files
        self.stage("render", f"{len(files)} files -> {self.repo}")
        if self.options.verify:
            findings = verify_repository(self.repo)
            if findings:
                for finding in findings:
                    say(f"FAIL {finding}")
                raise CheckFailed(f"{self.repo}: {len(findings)} verification finding(s)")
            self.stage("verify", "configs parse, ensemble wiring consistent")
        keep = self.options.keep_server
        self.server = TritonServer(self.repo, log_path=self.log_path, extra_args=list(EXPLICIT) if keep else [],
                                   supervise=not keep)
        self.stage("serve", "starting the embedded tritonserver ...")
        self.server.start(timeout=self.options.server_timeout)
        self.stage("serve", f"ready: http {self.server.http_url}, grpc {self.server.grpc_url}, "
                   f"metrics {self.server.metrics_url}, log {self.server.log_path}")
        self.loaded.append(sorted(_models(files)))
        self.restarts += 1
        return "started" if self.restarts == 1 else "restarted"

    def _reload(self, files: dict[str, bytes]) -> str:
        assert self.files is not None
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

    def _load(self, model: str) -> None:
        assert self.server is not None
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

    def _check_ready(self) -> None:
        """Every model of the repository READY (a reload can leave one unavailable: its load test would measure
        errors, not the configuration)."""
        server = self.server
        assert server is not None and server.process is not None
        names = set(_models(self.files or {}))
        outcome = wait_until_ready(server.http_url, READY_TIMEOUT_S, stopped=lambda: server.process.poll() is not None,
                                   probe=lambda url: not _not_ready(url, names))
        self.check_alive("while its models loaded")
        if outcome == "timeout":
            said = "; ".join(f"{m} {state}" + (f" ({why})" if why else "")
                             for m, (state, why) in _not_ready(server.http_url, names).items())
            raise CheckFailed(f"after {READY_TIMEOUT_S:g} s not every model is READY: {said}\n"
                              f"{server.failure_reasons()}")

    def endpoint(self, openai_url: str | None = None) -> Endpoint:
        assert self.server is not None
        return Endpoint(grpc_url=self.server.grpc_url, http_url=self.server.http_url,
                        metrics_url=self.server.metrics_url, openai_url=openai_url)

    def loadtest(self, plan: Plan, load: LoadTest, out: Path, *, openai_url: str | None = None,
                 spec_path: str | None = None, progress: bool = False) -> int:
        """The project's load test against the server (and the OpenAI frontend at `openai_url`); its exit code
        (INTERRUPTED_EXIT when Ctrl-C stopped it). CheckFailed when the server died during it."""
        return self.checked(lambda: run_loadtest(plan, self.endpoint(openai_url), load, out, spec_path=spec_path,
                                                 progress=progress))

    def checked(self, run: Callable[[], int]) -> int:
        """Run a load test; when the server died during it, CheckFailed with the server's reasons (not an SLO
        failure, nor the load test's own error)."""
        try:
            code = run()
        except TritongenError:
            self.check_alive("during the load test")  # a load test that failed because its server died
            raise
        if code != INTERRUPTED_EXIT:  # Ctrl-C reaches the server too: its exit is no failure of the plan
            self.check_alive("during the load test")
        return code

    def check_alive(self, when: str) -> None:
        server = self.server
        if server is None or server.process is None:
            return
        if server.process.poll() is None and not server_ready(server.http_url):
            # Not ready: stopping (e.g. asked to by a model whose loop died), which takes up to its grace period.
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.process.wait(timeout=server.grace_s + 15)
        if server.process.poll() is not None:
            cause = fatal_cause(server.log_path)
            raise CheckFailed(f"tritonserver exited with code {server.process.returncode} {when}"
                              + (f" ({cause})" if cause else "") + f":\n{server.failure_reasons()}")

    def keep_log(self, where: Path) -> None:
        """Copy the server's log into `where` (a failed trial's folder)."""
        log = getattr(self.server, "log_path", None)
        if log is not None and Path(log).is_file():
            where.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, where / "tritonserver.log")

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

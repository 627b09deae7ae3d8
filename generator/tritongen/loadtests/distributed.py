"""Distributed load generation on Locust's own master/worker mode.

`tritongen loadtest --workers N` starts one Locust master (headless, no users of its own) and N Locust worker
processes on this machine; `--master --workers N` starts only the master and waits for N workers started elsewhere
with `tritongen loadtest SPEC --worker --master-host HOST`. Locust distributes the users over the workers; the
master stops them after the run time.

Samples travel to the master inside Locust's own protocol: each worker forwards the sample lines its users wrote
(its private samples folder) in a custom message (`SAMPLES_MESSAGE`) once a second and, synchronously, when it
stops, so the last lines are on the wire before Locust's own `client_stopped` reaches the master. The master
appends them to `samples-worker-<worker id>.jsonl` in the report's samples folder, stamping the run's load level
(a worker only knows its own share of the users). The report is then built from the merged files exactly as for
one process. A worker forwards only when `FORWARD_ENV` is set, so Locust's `--processes` (whose forked workers
write into the shared samples folder directly) never counts a sample twice.

The level travels the other way: when a run starts, the master sends every worker its level and the number of
worker processes connected (`LEVEL_MESSAGE`), ahead of Locust's own `spawn`, so an open-loop rate is split over the
workers that are really there, also for workers started elsewhere from the plan alone (which know neither).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tritongen.errors import EnvironmentMissing
from tritongen.loadtests.samples import sample_files
from tritongen.loadtests.workload import CONFIG_ENV, LocustConfig

# locust and gevent are imported inside the listeners that run in locust's processes: importing locust
# monkey-patches the importing process with gevent, and `tritongen loadtest`'s own process imports this module.

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
# Seconds a user may take to finish its request after the run time ends; past it Locust kills the user and
# the request goes unrecorded (while the server still counts it). Master and workers both need it.
STOP_TIMEOUT_S = 120
SAMPLES_MESSAGE = "tritongen_samples"
LEVEL_MESSAGE = "tritongen_level"
FORWARD_ENV = "TRITONGEN_LOADTEST_FORWARD"
DEFAULT_MASTER_PORT = 5557
FORWARD_INTERVAL_S = 1.0
WORKER_WAIT_S = 120
"""How long the master waits for its workers to connect before giving up."""


@dataclass(frozen=True)
class Distribution:
    """How a load test spreads over Locust processes."""

    workers: int
    """Worker processes the master waits for."""
    local: bool = True
    """Start the workers here (`--workers N`), or wait for workers started on other hosts (`--master`)."""
    bind_host: str = "*"
    port: int = DEFAULT_MASTER_PORT
    wait_s: float = WORKER_WAIT_S


# ------------------------------------------------------------------------------------------ inside Locust


def on_init(environment, **_kwargs) -> None:
    """`events.init` listener (the locustfile adds it): the master collects samples, a worker forwards them."""
    from locust.runners import MasterRunner, WorkerRunner

    runner = environment.runner
    if isinstance(runner, MasterRunner):
        runner.register_message(SAMPLES_MESSAGE, _SampleSink().receive)
        level = _config().level

        def share_the_level(**_kw) -> None:
            # test_start fires on the master before it sends `spawn`; messages to a worker arrive in order.
            runner.send_message(LEVEL_MESSAGE, {"level": level, "rate_shares": max(runner.worker_count, 1)})

        environment.events.test_start.add_listener(share_the_level)
        quit_now = runner.quit

        def quit_after_workers_stopped() -> None:
            # At the run time a headless master calls quit(), which sends `quit` and gives the workers 0.5 s:
            # requests still in flight would finish after the master stopped listening (the server counts them,
            # the report would not). stop() first waits until every worker has let its users finish
            # (--stop-timeout) and reported `client_stopped`, which follows its last samples.
            runner.stop()
            quit_now()

        runner.quit = quit_after_workers_stopped
    elif isinstance(runner, WorkerRunner):
        runner.register_message(LEVEL_MESSAGE, _take_level)
        if os.environ.get(FORWARD_ENV) == "1":
            _SampleForwarder(runner).install(environment)


def _take_level(environment, msg, **_kwargs) -> None:
    # users imports locust, which monkey-patches the importing process with gevent: deferred so that importing this
    # module (tritongen loadtest's own process, the master's launcher) leaves that process unpatched.
    from tritongen.loadtests.users import adopt_level

    adopt_level(float(msg.data["level"]), int(msg.data["rate_shares"]))


def _config():
    from tritongen.loadtests.users import preload  # locust's gevent patching: see _take_level

    return preload()


class _SampleSink:
    """Master side: appends forwarded sample lines to one file per worker."""

    def __init__(self) -> None:
        config = _config()
        self.dir = Path(config.samples_dir)
        self.level = config.level
        self.files: dict[str, object] = {}

    def receive(self, environment, msg, **_kwargs) -> None:
        worker = re.sub(r"[^A-Za-z0-9._-]", "_", str(msg.node_id))
        f = self.files.get(worker)
        if f is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            f = self.files[worker] = open(self.dir / f"samples-worker-{worker}.jsonl", "a", encoding="utf-8")
        for line in msg.data["lines"]:
            record = json.loads(line)
            record["level"] = self.level
            f.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        f.flush()


class _SampleForwarder:
    """Worker side: sends the complete lines its users appended to the sample files of its own folder."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.dir = Path(_config().samples_dir)
        self.offsets: dict[Path, int] = {}

    def install(self, environment) -> None:
        import gevent

        def loop() -> None:
            while True:
                gevent.sleep(FORWARD_INTERVAL_S)
                self.flush()

        gevent.spawn(loop)
        # test_stop fires after the users finished and before the worker sends `client_stopped`.
        environment.events.test_stop.add_listener(lambda **_kw: self.flush())
        environment.events.quitting.add_listener(lambda **_kw: self.flush())

    def _new_lines(self) -> list[str]:
        lines: list[str] = []
        for path in sample_files(self.dir):
            start = self.offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read()
            end = data.rfind(b"\n") + 1  # only whole lines; a line being written waits for the next flush
            if end:
                lines += data[:end].decode("utf-8").splitlines()
                self.offsets[path] = start + end
        return [line for line in lines if line.strip()]

    def flush(self) -> None:
        lines = self._new_lines()
        if lines:
            self.runner.send_message(SAMPLES_MESSAGE, {"lines": lines})


# ------------------------------------------------------------------------------------------ process control


def master_flags(dist: Distribution) -> list[str]:
    return ["--master", "--expect-workers", str(dist.workers), "--expect-workers-max-wait", str(round(dist.wait_s)),
            "--master-bind-host", dist.bind_host, "--master-bind-port", str(dist.port)]


def worker_command(master_host: str, port: int, processes: int = 1) -> list[str]:
    # --stop-timeout is not passed from master to workers; without it a worker kills users mid-request.
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--worker", "--master-host", master_host,
           "--master-port", str(port), "--stop-timeout", str(STOP_TIMEOUT_S)]
    return cmd + (["--processes", str(processes)] if processes > 1 else [])


def worker_env(config_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({CONFIG_ENV: str(config_path), FORWARD_ENV: "1"})
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def _prepare_worker_dir(root: Path, config: LocustConfig) -> Path:
    """A worker's own folder: its configuration and the samples it forwards (kept as a local copy)."""
    samples = root / "samples"
    for stale in sample_files(samples):
        stale.unlink()
    root.mkdir(parents=True, exist_ok=True)
    config_path = root / "locust_config.json"
    config_path.write_text(config.model_copy(update={"samples_dir": str(samples)}).to_json())
    return config_path


def run_master(cmd: list[str], config: LocustConfig, out: Path, dist: Distribution,
               run_locust: Callable[[list[str], float], int], *, timeout_s: float) -> int:
    """Run `cmd` (a headless Locust command) as the master of `dist.workers` workers; start them here if local."""
    workers: list[tuple[subprocess.Popen, Path]] = []
    where = "here" if dist.local else f"elsewhere (`--worker --master-host <this host> --master-port {dist.port}`)"
    print(f"locust master: {dist.workers} worker(s) {where}", flush=True)
    try:
        if dist.local:
            for i in range(dist.workers):
                root = out / "workers" / f"worker{i}"
                config_path = _prepare_worker_dir(root, config)
                log = root / "locust.log"
                with open(log, "wb") as f:
                    proc = subprocess.Popen(worker_command("127.0.0.1", dist.port), stdout=f,
                                            stderr=subprocess.STDOUT, env=worker_env(config_path))
                workers.append((proc, log))
        code = run_locust([*cmd, *master_flags(dist)], timeout_s + dist.wait_s)
        for proc, log in workers:  # a worker quits when its master does
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        return code
    finally:
        for proc, _ in workers:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def run_worker(config: LocustConfig, out: Path, master_host: str, port: int, processes: int = 1) -> int:
    """`tritongen loadtest --worker`: one Locust worker (or `processes` of them) until the master quits."""
    config_path = _prepare_worker_dir(out, config)
    cmd = worker_command(master_host, port, processes)
    print(f"locust worker -> master {master_host}:{port}; samples {out / 'samples'} (forwarded to the master)",
          flush=True)
    try:
        return subprocess.run(cmd, env=worker_env(config_path), check=False).returncode
    except FileNotFoundError:
        raise EnvironmentMissing("locust: the Python interpreter was not found; reinstall tritongen") from None

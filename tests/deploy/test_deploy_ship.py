"""What a deployment ships and how it is run: the serving image with tritongen's native backends (Dockerfile.serving,
parsed with dockerfile-parse), pinned versions, the grace period, the planned OpenAI frontend workers, the one place
images are set, and the next steps and warnings `tritongen deploy` prints."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
import yaml
from dockerfile_parse import DockerfileParser

from tritongen import cli
from tritongen.deploy import render_deployment, serving_image
from tritongen.deploy.common import prepare
from tritongen.plan.deploy import StopBudget
from tritongen.plan.frontend import FrontendPlan, planned_workers
from validators import compose_config, kustomize

FIXTURES = Path(__file__).parents[1] / "fixtures"
GOLDEN = Path(__file__).parents[1] / "golden" / "deploy"
INVENTORIES = FIXTURES / "inventories"
BACKENDS = {f"/opt/tritonserver/backends/{b}/libtriton_{b}.so" for b in ("tritongen_bls", "tritongen_tokensource")}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_model) -> Path:
    root = tmp_path_factory.mktemp("ship")
    shutil.copytree(tiny_model, root / "checkpoint")
    base = yaml.safe_load((FIXTURES / "specs" / "tiny-hf-gpu.yaml").read_text())
    specs = {
        "plain": {},
        "frontend": {"frontend": {"openai": {"enabled": True}}},
        "grace": {"deploy": {"grace_period_s": 120}, "frontend": {"openai": {"enabled": True, "workers": 3}}},
        "fetched": {"deploy": {"checkpoint_uri": "hf://org/tiny"}},
        "python-bls": {"serving": {**base.get("serving", {}), "bls": "python"}},
    }
    for name, extra in specs.items():
        (root / f"{name}.yaml").write_text(yaml.safe_dump({**base, **extra}, sort_keys=False))
    return root


def _render(workdir: Path, spec: str, target: str, out: Path, **kwargs) -> Path:
    dep = prepare(workdir / f"{spec}.yaml", inventory=str(INVENTORIES / "h200-1x.yaml"), **kwargs)
    for rel, data in render_deployment(dep, target).items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    return out


def _stages(path: Path) -> list[list[dict]]:
    """The Dockerfile's instructions, one list per stage."""
    stages: list[list[dict]] = []
    with path.open("rb") as f:
        structure = DockerfileParser(fileobj=f).structure
    for step in structure:
        if step["instruction"] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(step)
    return stages


def _built_tag(dockerfile: Path) -> str:
    (tag,) = re.findall(r"^#\s+docker build -t (\S+) -f Dockerfile.serving \.$", dockerfile.read_text(), re.M)
    return tag


# ---------------------------------------------------------------------------------------------- serving image


def assert_builds_backends(dockerfile: Path) -> None:
    """Two stages FROM the same image; the first runs build.sh against the container's Triton; the second copies
    every backend library to tritonserver's default backend directory."""
    builder, runtime = _stages(dockerfile)
    base = builder[0]["value"]
    assert base.endswith(" AS backends") and runtime[0]["value"] == base.removesuffix(" AS backends")
    assert ("COPY", "native/ /src/native/") in [(s["instruction"], s["value"]) for s in builder]
    (build,) = [shlex.split(s["value"]) for s in builder if s["instruction"] == "RUN" and "build.sh" in s["value"]]
    assert build[:2] == ["bash", "/src/native/build.sh"]
    flags = dict(zip(build[2::2], build[3::2]))
    assert flags["--triton-include"] == "/opt/tritonserver/include" and flags["--triton-lib"] == "/opt/tritonserver/lib"
    copies = [s["value"].split() for s in runtime if s["instruction"] == "COPY"]
    built = [(src, dest) for flag, src, dest in (c for c in copies if c[0] == "--from=backends")]
    assert {dest for _, dest in built} == BACKENDS
    assert all(src.startswith(flags["--prefix"] + "/") and Path(src).name == Path(dest).name for src, dest in built)


@pytest.mark.parametrize("golden", sorted(p.name for p in GOLDEN.iterdir()))
def test_golden_deployment_names_an_image_whose_dockerfile_builds_the_backends(golden):
    out = GOLDEN / golden
    assert_builds_backends(out / "Dockerfile.serving")
    tag = _built_tag(out / "Dockerfile.serving")
    if (out / "docker-compose.yaml").is_file():
        services = yaml.safe_load((out / "docker-compose.yaml").read_text())["services"]
        servers = {n: s for n, s in services.items() if n.startswith("triton-")}
        assert servers and all(s["image"] == tag and s["build"]["dockerfile"] == "Dockerfile.serving"
                               for s in servers.values())
    else:
        containers = [c for p in (out / "k8s" / "base").glob("deployment-*.yaml")
                      for d in yaml.safe_load_all(p.read_text())
                      for c in d["spec"]["template"]["spec"]["containers"]]
        assert containers and {c["image"] for c in containers if c["name"] == "tritonserver"} == {tag}


def test_a_dockerfile_that_forgets_a_backend_fails_the_check(tmp_path):
    text = (GOLDEN / "tiny-cpu-compose" / "Dockerfile.serving").read_text()
    broken = tmp_path / "Dockerfile.serving"
    broken.write_text("\n".join(line for line in text.splitlines() if "tritongen_tokensource/" not in line))
    with pytest.raises(AssertionError):
        assert_builds_backends(broken)


def test_explicit_python_bls_keeps_the_python_bls(workdir, tmp_path):
    out = _render(workdir, "python-bls", "compose", tmp_path)
    bls = (out / "model_repository" / "tensorrt_llm_bls" / "config.pbtxt").read_text()
    assert 'backend: "python"' in bls
    assert_builds_backends(out / "Dockerfile.serving")  # hf still builds its image (python packages)


def test_synthetic_deployment_runs_the_native_token_source(tiny_model, tmp_path):
    data = yaml.safe_load((Path(__file__).parents[2] / "examples" / "synthetic-cpu.yaml").read_text())
    data["model"]["checkpoint"] = str(tiny_model)
    (tmp_path / "synthetic.yaml").write_text(yaml.safe_dump(data))
    dep = prepare(tmp_path / "synthetic.yaml")
    assert serving_image.native_backends(dep.repository) == ("tritongen_bls", "tritongen_tokensource")
    assert 'backend: "tritongen_tokensource"' in dep.repository["tensorrt_llm/config.pbtxt"].decode()
    assert dep.builds_serving_image


@pytest.fixture(scope="module")
def deployed(workdir, tmp_path_factory) -> Path:
    """`tritongen deploy --target compose` as a user runs it (the CLI writes the build contexts too)."""
    out = tmp_path_factory.mktemp("deployed") / "out"
    assert cli.main(["deploy", str(workdir / "frontend.yaml"), "--target", "compose", "-o", str(out),
                     "--inventory", str(INVENTORIES / "h200-1x.yaml")]) == 0
    return out


def test_deploy_writes_the_native_sources_as_the_build_context(deployed):
    import tritongen.native

    sources = Path(tritongen.native.__file__).parent
    expected = sorted(p.relative_to(sources).as_posix() for p in sources.rglob("*")
                      if p.is_file() and p.name != "__init__.py" and "__pycache__" not in p.parts)
    assert expected and sorted(p.relative_to(deployed / "native").as_posix()
                               for p in (deployed / "native").rglob("*") if p.is_file()) == expected


def test_tritongen_image_installs_its_dependencies_at_pinned_versions(deployed):
    import importlib.metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    lines = (deployed / "dist" / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==") for line in lines)
    assert all(re.fullmatch(r"[a-z0-9-]+==[0-9][0-9A-Za-z.]*", line) for line in lines)
    direct = {canonicalize_name(r.name) for r in map(Requirement, importlib.metadata.requires("tritongen"))
              if r.marker is None or r.marker.evaluate({"extra": ""})}
    assert direct - {"torch"} <= set(pins) and "torch" not in pins  # torch: Dockerfile.tritongen's own pin
    assert pins["numpy"] == importlib.metadata.version("numpy")
    (install,) = [s["value"] for stage in _stages(deployed / "Dockerfile.tritongen") for s in stage
                  if s["instruction"] == "RUN" and ".whl" in s["value"]]
    assert install.startswith("pip install --no-cache-dir -c /tmp/constraints.txt /tmp/tritongen-")


@pytest.mark.parametrize("target", ["compose", "k8s"])
def test_every_pip_install_in_generated_dockerfiles_is_pinned(workdir, tmp_path, target):
    out = _render(workdir, "frontend", target, tmp_path)
    installs = [shlex.split(s["value"]) for f in sorted(out.glob("Dockerfile.*")) for stage in _stages(f)
                for s in stage if s["instruction"] == "RUN" and "pip install" in s["value"]]
    named = []
    for argv in installs:
        args = argv[argv.index("install") + 1:]
        args = args[:args.index("&&")] if "&&" in args else args
        # Options, their values (an index URL) and the wheel of the build context are not requirements.
        wanted = [a for a in args if not a.startswith(("-", "/", "http"))]
        assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+-]*", a) for a in wanted), argv
        named += wanted
    assert {"torch==2.13.0", "transformers==5.24.0"} <= set(named)


# ---------------------------------------------------------------------------------------------- grace period


def _pods(out: Path) -> dict[str, dict]:
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"] for p in (out / "k8s" / "base").glob("*.yaml")
            for d in yaml.safe_load_all(p.read_text()) if d and d["kind"] == "Deployment"}


def _seconds(value: str | int) -> int:
    return int(value) if isinstance(value, int) else sum(int(x) * {"m": 60, "s": 1}[u]
                                                         for x, u in re.findall(r"(\d+)([ms])", value))


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


@pytest.mark.parametrize("spec,grace", [("frontend", 30), ("grace", 120)])
def test_grace_period_reaches_pods_compose_and_tritonserver(workdir, tmp_path, spec, grace):
    """Every number of the stop budget in the generated files is the budget's: preStop, exit timeout, drain."""
    k8s, compose = StopBudget.of(grace, "k8s"), StopBudget.of(grace, "compose")
    pods = _pods(_render(workdir, spec, "k8s", tmp_path / "k8s"))
    assert len(pods) == 2  # the server and tritongen's frontend
    for pod in pods.values():
        assert pod["terminationGracePeriodSeconds"] == grace
        (c,) = pod["containers"]
        assert c["lifecycle"] == {"preStop": {"exec": {"command": ["sleep", str(k8s.prestop_s)]}}}
    (server,) = [p["containers"][0] for p in pods.values() if p["containers"][0]["name"] == "tritonserver"]
    assert f"--exit-timeout-secs={k8s.exit_timeout_s}" in server["command"]
    assert _env(server)["TRITONGEN_DRAIN_S"] == str(k8s.drain_s)
    services = compose_config(_render(workdir, spec, "compose", tmp_path / "compose"))["services"]
    seconds = {n: _seconds(s["stop_grace_period"]) for n, s in services.items() if n in ("triton-gpu0", "openai")}
    assert seconds == {"triton-gpu0": grace, "openai": grace}
    assert f"--exit-timeout-secs={compose.exit_timeout_s}" in services["triton-gpu0"]["command"]
    assert services["triton-gpu0"]["environment"]["TRITONGEN_DRAIN_S"] == str(compose.drain_s)


@pytest.mark.parametrize("grace", [5, 10, 14, 20, 25, 30, 31, 60, 120, 3600])
@pytest.mark.parametrize("orchestrator", ["k8s", "compose", "serve"])
def test_stop_budget_fits_the_grace_period(grace, orchestrator):
    b = StopBudget.of(grace, orchestrator)
    assert b.prestop_s + b.exit_timeout_s + b.exit_margin_s == grace
    assert b.exit_timeout_s == b.drain_s + b.client_lag_s + b.unload_s
    assert b.drain_s >= 1 and b.exit_timeout_s >= 1
    assert (b.prestop_s > 0) == (orchestrator == "k8s" and grace >= 5)
    if grace >= 25:  # the allowances measured clean are kept whole (docs/serving-behaviour.md "Stopping")
        assert (b.client_lag_s, b.unload_s, b.exit_margin_s) == (7, 5, 3)


def test_stop_budget_of_the_default_grace_period():
    """30 s: the pairs measured clean on the GPU host under load (drain 10 s with a 22 s exit timeout; 15 s with
    27-30 s), not the 20 s drain with 22 s that crashed tritonserver."""
    assert (StopBudget.of(30, "k8s").drain_s, StopBudget.of(30, "k8s").exit_timeout_s) == (10, 22)
    assert (StopBudget.of(30, "compose").drain_s, StopBudget.of(30, "compose").exit_timeout_s) == (15, 27)
    assert StopBudget.of(30, "serve") == StopBudget.of(30, "compose")
    assert StopBudget.of(30, "k8s").describe() == ("grace 30 s = preStop 5 + drain 10 + client lag 7 + unload 5 + "
                                                  "exit margin 3 (--exit-timeout-secs=22)")


def test_serve_and_tune_servers_take_the_budget(tmp_path):
    from tritongen.serve import TritonServer

    server = TritonServer(tmp_path, grace_s=30)
    assert f"--exit-timeout-secs={StopBudget.of(30, 'serve').exit_timeout_s}" in server.command()
    server._remove_backends()


def test_grace_period_limits_are_spec_errors(workdir, tmp_path, capsys):
    data = yaml.safe_load((workdir / "plain.yaml").read_text())
    data["deploy"] = {"grace_period_s": 5}
    spec = tmp_path / "short.yaml"
    spec.write_text(yaml.safe_dump(data))
    assert cli.main(["validate", str(spec)]) == 2
    assert "deploy.grace_period_s: input should be greater than or equal to 10 (got 5)" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- frontend workers


def test_planned_workers_rule():
    assert [planned_workers(n) for n in (1, 8, 48, 49, 256, 10_000)] == [1, 1, 1, 2, 6, 16]


def test_serve_caps_planned_workers_by_host_cores_but_not_a_spec_count():
    planned = FrontendPlan(workers=6, workers_planned=True, workers_why="planned", models=())
    assert planned.workers_on_host(cores=16)[0] == 6 and planned.workers_on_host(cores=4)[0] == 2
    assert planned.workers_on_host(cores=1)[0] == 1
    assert "capped at 4 cores / 2" in planned.workers_on_host(cores=4)[1]
    chosen = FrontendPlan(workers=6, workers_planned=False, workers_why="frontend.openai.workers", models=())
    assert chosen.workers_on_host(cores=2) == (6, "frontend.openai.workers")


def test_workers_planned_from_concurrency_and_used_by_every_deployment(workdir, tmp_path):
    data = yaml.safe_load((workdir / "frontend.yaml").read_text())
    data["serving"] = {**data.get("serving", {}), "max_batch_size": 256}
    (workdir / "wide.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    dep = prepare(workdir / "wide.yaml", inventory=str(INVENTORIES / "h200-1x.yaml"))
    assert (dep.plan.frontend.workers, dep.plan.frontend.workers_planned) == (6, True)
    assert dep.plan.frontend.workers_why.startswith("planned: 256 streams (max_batch_size 256 x 1 server group)")
    files = render_deployment(dep, "k8s")
    (frontend,) = [d for d in yaml.safe_load_all(files["k8s/base/openai-deployment.yaml"])]
    c = frontend["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][c["args"].index("--openai-workers") + 1] == "6"
    assert c["resources"]["requests"]["cpu"] == 7 and c["resources"]["limits"]["memory"] == "7Gi"
    compose = yaml.safe_load(render_deployment(dep, "compose")["docker-compose.yaml"])
    args = compose["services"]["openai"]["command"]
    assert args[args.index("--openai-workers") + 1] == "6"
    from tritongen.deploy.docker import frontend_run_kwargs

    command = frontend_run_kwargs(dep, tmp_path)["command"]
    assert command[command.index("--openai-workers") + 1] == "6"
    # The repository's frontend.json carries it for `tritongen serve REPO --openai`.
    assert FrontendPlan.model_validate_json(dep.repository["frontend.json"]).workers == 6


def test_spec_workers_override_the_plan(workdir):
    dep = prepare(workdir / "grace.yaml", inventory=str(INVENTORIES / "h200-1x.yaml"))
    assert (dep.plan.frontend.workers, dep.plan.frontend.workers_planned) == (3, False)
    assert dep.plan.frontend.workers_why == "frontend.openai.workers"


# ---------------------------------------------------------------------------------------------- images, next steps


def test_one_images_component_sets_every_pod_of_every_kustomization(workdir, tmp_path):
    out = _render(workdir, "frontend", "k8s", tmp_path)
    component = out / "k8s" / "images" / "kustomization.yaml"
    doc = yaml.safe_load(component.read_text())
    for entry in doc["images"]:  # what `kustomize edit set image NAME=registry.example.com/team/NAME:TAG` writes
        entry["newName"] = f"registry.example.com/team/{entry['name']}"
    component.write_text(yaml.safe_dump(doc))
    for overlay in ("base", "with-monitoring", "with-loadtest"):
        images = {c["image"] for d in kustomize(out / "k8s" / overlay) if d["kind"] in ("Deployment", "Job")
                  for c in d["spec"]["template"]["spec"].get("initContainers", []) + d["spec"]["template"]["spec"]["containers"]}
        assert images and all(i.startswith("registry.example.com/team/") for i in images), (overlay, images)


def _deploy(workdir: Path, spec: str, target: str, out: Path, capsys) -> tuple[str, str]:
    assert cli.main(["deploy", str(workdir / f"{spec}.yaml"), "--target", target, "-o", str(out),
                     "--inventory", str(INVENTORIES / "h200-1x.yaml")]) == 0
    printed = capsys.readouterr()
    return printed.out, printed.err


def _steps(printed: str) -> list[str]:
    lines = printed.split("next steps:\n", 1)[1].splitlines()
    return [re.sub(r"^\s+\d+\. ", "", line).split("   # ")[0] for line in lines if re.match(r"^\s+\d+\. ", line)]


def test_compose_next_steps_name_what_the_output_has(workdir, tmp_path, capsys):
    out = tmp_path / "out"
    printed, _ = _deploy(workdir, "frontend", "compose", out, capsys)
    steps = _steps(printed)
    assert steps[0] == f"cd {out.resolve()}"
    assert steps[1:] == ["docker compose --profile loadtest build", "docker compose up -d --wait",
                         "docker compose ps; docker compose logs -f triton-gpu0",
                         "docker compose --profile loadtest up --exit-code-from loadtest loadtest"]
    services = compose_config(out)["services"]
    assert "triton-gpu0" in services and "loadtest" in yaml.safe_load((out / "docker-compose.yaml").read_text())[
        "services"]
    assert "docker-compose " not in (out / "docker-compose.yaml").read_text().replace("docker-compose.yaml", "")
    assert "docker-compose " not in printed.replace("docker-compose.yaml", "")


def test_k8s_next_steps_name_what_the_output_has_and_warn_without_checkpoint_uri(workdir, tmp_path, capsys):
    out = tmp_path / "out"
    printed, err = _deploy(workdir, "plain", "k8s", out, capsys)
    assert "warning: deploy.checkpoint_uri: unset, so the models Job expects the checkpoint already in the volume" \
        in err
    steps = _steps(printed)
    assert steps[1].startswith("export REGISTRY=")
    for step in steps:
        for dockerfile in re.findall(r"-f (Dockerfile\.\w+)", step):
            assert (out / dockerfile).is_file(), step
        for path in re.findall(r"(?:apply -k|cd) (k8s/[\w/-]+)", step):
            assert (out / path / "kustomization.yaml").is_file(), step
    names = {(d["kind"], d["metadata"]["name"]) for p in (out / "k8s").rglob("*.yaml")
             for d in yaml.safe_load_all(p.read_text()) if d and "metadata" in d}
    jobs = [j for s in steps for j in re.findall(r"job/([\w-]+)", s)]
    rollouts = [d for s in steps for d in re.findall(r"deployment/([\w-]+)", s)]
    assert len(jobs) == 2 and all(("Job", j) in names for j in jobs)
    assert rollouts and all(("Deployment", d) in names for d in rollouts)
    tags = {f"{n}:{t}" for n, t in ((e["name"], e["newTag"]) for e in yaml.safe_load(
        (out / "k8s" / "images" / "kustomization.yaml").read_text())["images"])}
    assert {t for s in steps for t in re.findall(r"\$REGISTRY/(\S+:\S+?)(?:\s|$|\))", s)} <= tags


def test_k8s_with_checkpoint_uri_does_not_warn(workdir, tmp_path, capsys):
    _, err = _deploy(workdir, "fetched", "k8s", tmp_path / "out", capsys)
    assert "deploy.checkpoint_uri" not in err


def test_image_flag_warns_that_it_must_carry_the_backends(workdir, tmp_path, capsys):
    assert cli.main(["deploy", str(workdir / "plain.yaml"), "--target", "compose", "-o", str(tmp_path / "out"),
                     "--inventory", str(INVENTORIES / "h200-1x.yaml"), "--image", "registry.example.com/triton:1"]) == 0
    err = capsys.readouterr().err
    assert ("warning: --image: registry.example.com/triton:1 must carry tritongen's native backends "
            "(/opt/tritonserver/backends/tritongen_bls/libtriton_tritongen_bls.so)") in err
    assert not (tmp_path / "out" / serving_image.DOCKERFILE).exists()


def test_kustomizations_and_docs_agree_on_where_images_are_set(workdir, tmp_path):
    out = _render(workdir, "frontend", "k8s", tmp_path)
    for overlay in ("base", "with-monitoring", "with-loadtest"):
        text = (out / "k8s" / overlay / "kustomization.yaml").read_text()
        assert "Images are set in one place, ../images/kustomization.yaml" in text
        assert yaml.safe_load(text)["components"][-1] == "../images"
    docs = (Path(__file__).parents[2] / "docs" / "deploy.md").read_text()
    assert "`k8s/images/kustomization.yaml`" in docs
    # Every `kustomize edit set image` the docs show runs in k8s/images, nowhere else.
    places = re.findall(r"cd (\S+) && kustomize edit set image", docs)
    assert places and set(places) == {"k8s/images"}


@pytest.mark.parametrize("ref,expected", [
    ("tritongen-serving:0.1.0-26.07-py3", ("tritongen-serving", "0.1.0-26.07-py3")),
    ("registry.example.com:5000/team/triton:1", ("registry.example.com:5000/team/triton", "1")),
    ("registry.example.com:5000/team/triton", ("registry.example.com:5000/team/triton", "")),
    ("nvcr.io/nvidia/tritonserver@sha256:" + "a" * 64, ("nvcr.io/nvidia/tritonserver", "@sha256:" + "a" * 64)),
])
def test_images_component_splits_references_as_kustomize_reads_them(ref, expected):
    from tritongen.deploy.k8s import split_image

    assert split_image(ref) == expected


def test_image_given_by_digest_is_kept_by_the_images_component(workdir, tmp_path):
    digest = "nvcr.io/nvidia/tritonserver@sha256:" + "b" * 64
    out = _render(workdir, "plain", "k8s", tmp_path, image=digest)
    images = {c["image"] for d in kustomize(out / "k8s" / "base") if d["kind"] == "Deployment"
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {digest}


@pytest.mark.integration
def test_serve_starts_the_workers_the_repository_plans(tmp_path, tiny_model):
    """`tritongen serve REPO --openai 0` of a repository whose spec sets frontend.openai.workers: 2 runs two uvicorn
    workers (sharing the port) and says so; /v1/models answers through them."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    import psutil

    data = yaml.safe_load((Path(__file__).parents[2] / "examples" / "synthetic-cpu.yaml").read_text())
    data["model"]["checkpoint"] = str(tiny_model)
    data["frontend"] = {"openai": {"workers": 2}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(data))
    assert cli.main(["render", str(tmp_path / "spec.yaml"), "-o", str(tmp_path / "repo")]) == 0
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "tritongen.cli", "serve", str(tmp_path / "repo"), "--openai", "0"],
                            stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline, line = time.monotonic() + 240, None
        while line is None:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            line = next((x for x in (tmp_path / "serve.log").read_text().splitlines() if x.startswith("openai ")),
                        None)
            time.sleep(0.2)
        assert "2 worker(s): frontend.openai.workers" in line, line
        url = line.split()[1]
        models = json.loads(urllib.request.urlopen(f"{url}/models", timeout=10).read())
        assert [m["id"] for m in models["data"]] == [data["name"]]
        uvicorn = [p for p in psutil.Process(proc.pid).children(recursive=True)
                   if "uvicorn" in " ".join(p.cmdline())]
        supervisor = next(p for p in uvicorn if "--workers" in p.cmdline())
        assert supervisor.cmdline()[supervisor.cmdline().index("--workers") + 1] == "2"
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()

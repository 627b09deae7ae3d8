"""What `tritongen deploy` prints after writing a target: the commands that take the files to a serving, load-tested
deployment, and warnings about what would fail when the files are applied.

Each step is one shell command run from the output folder (compose v2 syntax: `docker compose`); tests check that
every file, service, kustomization and object a command names exists in the output.
"""

from __future__ import annotations

import shlex

from tritongen.deploy import serving_image
from tritongen.deploy.artifacts import models_job
from tritongen.deploy.common import ADAPTER_SOURCES, CHECKPOINT, TOKENIZER, Deployment, container_name, k8s_name
from tritongen.deploy.compose import compose_services, model_folders
from tritongen.deploy.k8s import image_names, kinds

REGISTRY_STEP = "export REGISTRY=registry.example.com/team   # the registry your nodes pull from"


def compose_steps(dep: Deployment) -> list[str]:
    first = compose_services(dep)[0].service
    # The compose file names the model's folders by variable (unset: ./models/<folder>, which deploy does not fill),
    # so the first step sets them to this machine's folders; on another host, to its copies.
    folders = model_folders(dep)
    export = ["export " + " ".join(f"{v}={shlex.quote(f)}" for v, f in folders.items())
              + "   # the model's folders the servers mount (on another host: where you copied them)"] if folders else []
    return [
        *export,
        "docker compose --profile loadtest build"
        + ("   # the serving image (compiles the native backends) and the tritongen image"
           if dep.builds_serving_image else "   # the tritongen image"),
        "docker compose up -d --wait   # starts the servers and returns once every healthcheck passes",
        f"docker compose ps; docker compose logs -f {first}   # readiness and the server's log",
        "docker compose --profile loadtest up --exit-code-from loadtest loadtest   # report in ./loadtest-report",
    ]


def k8s_steps(dep: Deployment, mig_strategy: str = "mixed") -> list[str]:
    built = [(n, t, f) for n, t, f in image_names(dep) if f]
    steps = [REGISTRY_STEP]
    steps += [f"docker build -t $REGISTRY/{n}:{t} -f {f} . && docker push $REGISTRY/{n}:{t}" for n, t, f in built]
    steps.append("(cd k8s/images && kustomize edit set image "
                 + " ".join(f"{n}=$REGISTRY/{n}:{t}" for n, t, _ in built) + ")   # the one place images are set")
    steps.append("kubectl apply -k k8s/base   # with the Prometheus Operator: kubectl apply -k k8s/with-monitoring")
    steps.append(f"kubectl logs -f job/{models_job(dep).name}   # fills the models volume")
    for kind in kinds(dep, mig_strategy):
        if kind.nodes > 1:
            steps.append(f"kubectl wait --for=condition=Available leaderworkerset/{kind.name} --timeout=30m")
        else:
            steps.append(f"kubectl rollout status deployment/{kind.name} --timeout=30m")
    steps.append(f"kubectl apply -k k8s/with-loadtest && kubectl logs -f job/{k8s_name(dep.name, 'loadtest')}")
    return steps


def docker_steps(dep: Deployment, spec: str, grpc_url: str) -> list[str]:
    names = " ".join(container_name(dep, g) for g in dep.placement.server_groups)
    return [f"tritongen loadtest {shlex.quote(spec)} --url {grpc_url}",
            f"docker logs -f {container_name(dep, dep.placement.server_groups[0])}",
            f"docker rm -f {names}   # stop the deployment"]


def warnings(dep: Deployment, target: str, image_given: bool) -> list[str]:
    """What applying the files as written would fail on, each `field: what fails; what to do`."""
    out = []
    d = dep.plan.deploy
    if target == "k8s" and d.checkpoint_uri is None:
        out.append(f"deploy.checkpoint_uri: unset, so the models Job expects the checkpoint already in the volume at "
                   f"{CHECKPOINT} and fails otherwise; set it (hf://org/name or an http(s) .tar.gz), or copy the "
                   "checkpoint into the volume before the Job runs (docs/deploy.md, \"Getting the model onto the nodes\")")
    separate = dep.plan.tokenizer.dir != dep.plan.paths.checkpoint
    if target == "k8s" and separate and d.tokenizer_uri is None:
        out.append(f"deploy.tokenizer_uri: unset while model.tokenizer is a folder of its own, so the servers find no "
                   f"tokenizer at {TOKENIZER} unless you copy it into the volume; set deploy.tokenizer_uri")
    fetched = [a.name for a in dep.plan.adapters if a.name not in d.adapter_uris]
    if target == "k8s" and fetched:
        out.append(f"deploy.adapter_uris: none for {', '.join(fetched)}, so the models Job expects those PEFT folders "
                   f"already in the volume at {ADAPTER_SOURCES}/<name> and fails otherwise; set "
                   "deploy.adapter_uris.<name> (hf://org/name or an http(s) .tar.gz), or copy them into the volume "
                   "before the Job runs")
    backends = serving_image.native_backends(dep.repository)
    if image_given and backends:
        out.append(f"--image: {dep.image} must carry tritongen's native backends ("
                   + ", ".join(serving_image.library(b, serving_image.BACKEND_DIRECTORY) for b in backends)
                   + f") or the models fail to load; build it from a deployment's {serving_image.DOCKERFILE} "
                   "(deploy without --image writes it), or set serving.bls: python")
    return out

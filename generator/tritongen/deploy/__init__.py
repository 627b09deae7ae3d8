"""Deployment targets: compose files, Kubernetes manifests, or containers started through the docker SDK.

`common.prepare()` builds the Deployment; `render_deployment` picks the target's pure renderer (compose, k8s);
`docker.run_docker` starts the same server groups through a docker engine.
"""

from __future__ import annotations

from tritongen.deploy import clients
from tritongen.deploy.common import Deployment, serving_dockerfile, tritongen_dockerfile
from tritongen.deploy.compose import render_compose
from tritongen.deploy.image import DOCKERFILE
from tritongen.deploy.k8s import render_k8s
from tritongen.deploy.serving_image import DOCKERFILE as SERVING_DOCKERFILE


def render_deployment(dep: Deployment, target: str, *, mig_strategy: str = "mixed") -> dict[str, bytes]:
    """All files of one target, the model repository included, as {relative path: bytes}."""
    files = {f"model_repository/{rel}": data for rel, data in dep.repository.items()}
    if target == "compose":
        files.update(render_compose(dep))
    elif target == "k8s":
        files.update(render_k8s(dep, mig_strategy=mig_strategy))
    else:
        if dep.builds_serving_image:
            files[SERVING_DOCKERFILE] = serving_dockerfile(dep)
        if clients.frontend_mode(dep) == "tritongen":  # the docker target builds and starts the frontend's image
            files[DOCKERFILE] = tritongen_dockerfile(dep)
    return dict(sorted(files.items()))

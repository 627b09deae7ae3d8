"""`tritongen deploy`: compose files, Kubernetes manifests, or containers through the docker SDK.

Registered by tritongen.cli with `add_commands(sub)`; errors reach cli.main, which maps them to exit codes.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from tritongen import console


def _cmd_deploy(args: argparse.Namespace) -> int:
    from tritongen.deploy import render_deployment
    from tritongen.deploy.common import prepare
    from tritongen.deploy.docker import docker_client, run_docker
    from tritongen.render import status_lines, write_repository

    from tritongen.plan.checks import plan_notes

    from tritongen.deploy import next_steps, serving_image

    dep = prepare(args.spec, inventory=args.inventory, engine_config=args.engine_config, image=args.image)
    for note in plan_notes(dep.plan):
        print(note, file=sys.stderr)
    files = render_deployment(dep, args.target, mig_strategy=args.k8s_mig_strategy)
    from tritongen.deploy.image import DOCKERFILE as TRITONGEN_DOCKERFILE

    if TRITONGEN_DOCKERFILE in files:
        from tritongen.deploy.image import tritongen_wheel

        files = dict(sorted({**files, **tritongen_wheel()}.items()))  # the build context of Dockerfile.tritongen
    if serving_image.DOCKERFILE in files:
        files = dict(sorted({**files, **serving_image.native_sources()}.items()))  # Dockerfile.serving's context
    out = Path(args.output)
    # Ask for the engine before writing anything, so a missing one leaves no half-made deployment behind.
    client = docker_client() if args.target == "docker" else None
    lines = status_lines(files, out)
    write_repository(files, out, overwrite=args.force)
    for line in lines:
        console.info(line)
    groups = dep.placement.server_groups
    print(f"{len(groups)} server group(s), image {dep.image}: {', '.join(g.name for g in groups)}")
    for warning in next_steps.warnings(dep, args.target, image_given=args.image is not None):
        print(f"warning: {warning}", file=sys.stderr)
    if client is None:
        if args.target == "compose":
            from tritongen.deploy.compose import compose_endpoints, default_folder_of, model_folders
            from tritongen.deploy.docker import engine_host

            for endpoint in compose_endpoints(dep, engine_host()):
                print(f"endpoint  {endpoint}")
            # The file names the model's folders by variable; here is what they are on this machine.
            for variable, folder in model_folders(dep).items():
                print(f"models    {variable}={folder}  (unset: {default_folder_of(variable)} next to the file)")
            steps = next_steps.compose_steps(dep)
        else:
            steps = next_steps.k8s_steps(dep, args.k8s_mig_strategy)
        print(f"deployment files: {out.resolve()}")
        _print_steps([f"cd {shlex.quote(str(out.resolve()))}", *steps])
        return 0
    for endpoint in run_docker(dep, out.resolve(), client=client, replace=args.force, timeout=args.timeout):
        print(f"ready  {endpoint}")
    from tritongen.deploy.docker import engine_host

    group = dep.placement.server_groups[0]
    _print_steps(next_steps.docker_steps(dep, args.spec, f"{engine_host()}:{group.grpc_port}"))
    return 0


def _print_steps(steps: list[str]) -> None:
    print("next steps:")
    for k, step in enumerate(steps, 1):
        print(f"  {k}. {step}")


def add_commands(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("deploy", help="write compose files or Kubernetes manifests, or start containers (docker)")
    s.add_argument("spec", help="a spec, or a plan JSON from `tritongen plan --inventory ... --json`")
    s.add_argument("--target", choices=["compose", "k8s", "docker"], required=True,
                   help="compose: docker compose files; k8s: Kubernetes manifests (kustomize); docker: start the "
                   "containers through a docker engine")
    s.add_argument("-o", "--output", required=True, help="folder for model_repository/ and the deployment files")
    s.add_argument("--inventory", help="GPUs to place a spec on: 'nvml' (this machine, the default), an inventory "
                                       "YAML/JSON, or saved `nvidia-smi -L`")
    s.add_argument("--engine-config", help="tensorrtllm: the engine's config.json (or its folder); its folder is "
                                           "the engine that is served (default: engine.engine_dir)")
    s.add_argument("--k8s-mig-strategy", choices=["mixed", "single"], default="mixed",
                   help="how the NVIDIA device plugin advertises MIG slices (default mixed)")
    s.add_argument("--image", help="serving image (default: the pinned TensorRT-LLM container, or for hf a "
                                   "locally built tritonserver image with torch + transformers)")
    s.add_argument("--force", action="store_true", help="replace a non-empty output folder (and, for docker, "
                                                        "containers of the same name)")
    s.add_argument("--timeout", type=float, default=1800, help="docker: seconds to wait for readiness")
    s.set_defaults(func=_cmd_deploy)

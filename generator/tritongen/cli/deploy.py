"""`tritongen deploy`: compose files, Kubernetes manifests, or containers through the docker SDK.

Its flags are in tritongen.cli.parser; errors reach cli.main, which maps them to exit codes.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from tritongen import console
from tritongen.deploy import next_steps, render_deployment, serving_image
from tritongen.deploy.common import prepare
from tritongen.deploy.compose import compose_endpoints, default_folder_of, model_folders
from tritongen.deploy.docker import docker_client, engine_host, run_docker
from tritongen.deploy.image import DOCKERFILE as TRITONGEN_DOCKERFILE, tritongen_wheel
from tritongen.plan.checks import plan_notes
from tritongen.render import status_lines, write_repository


def cmd_deploy(args: argparse.Namespace) -> int:
    dep = prepare(args.spec, inventory=args.inventory, engine_config=args.engine_config, image=args.image)
    for note in plan_notes(dep.plan):
        print(note, file=sys.stderr)
    files = render_deployment(dep, args.target, mig_strategy=args.k8s_mig_strategy)
    if TRITONGEN_DOCKERFILE in files:
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
    group = dep.placement.server_groups[0]
    _print_steps(next_steps.docker_steps(dep, args.spec, f"{engine_host()}:{group.grpc_port}"))
    return 0


def _print_steps(steps: list[str]) -> None:
    print("next steps:")
    for k, step in enumerate(steps, 1):
        print(f"  {k}. {step}")

"""Policy checks over generated deployment files: what a plain multi-node cluster (or a docker host) needs for the
output to run as generated. Each check returns the violations it finds, one line each, so a test shows them all.

- pod security: the "restricted" Pod Security Standard (v1.30 rules) plus a read-only root filesystem and
  ephemeral-storage requests on every container;
- images: every reference pinned (a tag that is not `latest`, or a digest) and resolvable by name: built from a
  Dockerfile of the output, or from a registry that keeps its tags (nvcr.io/nvidia, registry.k8s.io, Docker Hub
  official images, Prometheus' quay.io and Grafana's Docker Hub repositories); versioned bitnami tags were withdrawn, so bitnami is refused;
- storage: a ReadWriteOnce claim is mounted only by pods that must share one node (required pod affinity on
  kubernetes.io/hostname to a label every consumer carries, no multi-node LeaderWorkerSet); ReadWriteOncePod by
  one pod;
- autoscaling: every HPA can scale (minReplicas < maxReplicas) and targets a workload of the build;
- scraping: every PodMonitor port is declared by every pod it selects, and every declared server port is one its
  process is told to serve (tritonserver's --http-port/--grpc-port/--metrics-port, Triton's OpenAI frontend's
  --openai-port/--kserve-*-port, tritongen's --openai, Locust's --master-port).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

# Registries whose tags are kept (a tag that resolves today resolves later), and Docker Hub official images.
# The Prometheus and Grafana projects publish every release under its own tag and keep them (the dashboard's
# monitoring services).
KEPT_REGISTRIES = ("nvcr.io/nvidia/", "registry.k8s.io/", "quay.io/prometheus/", "docker.io/grafana/")
OFFICIAL = re.compile(r"^(python|nginx|busybox|alpine|debian|ubuntu):[\w.-]+$")
ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
                   "secret"}


def pod_templates(objects: list[dict]) -> list[tuple[str, dict, dict, int]]:
    """(where, pod metadata, pod spec, pods it can run at once) of every workload in the build."""
    out = []
    for o in objects:
        where = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
            t = o["spec"]["template"]
            out.append((where, t["metadata"], t["spec"], o["spec"].get("replicas", 2)))
        elif o["kind"] == "Job":
            t = o["spec"]["template"]
            out.append((where, t["metadata"], t["spec"], o["spec"].get("parallelism", 1)))
        elif o["kind"] == "LeaderWorkerSet":
            lwt = o["spec"]["leaderWorkerTemplate"]
            for role in ("leaderTemplate", "workerTemplate"):
                out.append((f"{where}/{role}", lwt[role]["metadata"], lwt[role]["spec"], lwt["size"]))
    return out


def _containers(spec: dict) -> list[dict]:
    return spec.get("initContainers", []) + spec["containers"]


def restricted(objects: list[dict]) -> list[str]:
    bad = []
    for where, _meta, spec, _n in pod_templates(objects):
        psc = spec.get("securityContext", {})
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(key):
                bad.append(f"{where}: {key}")
        for v in spec.get("volumes", []):
            kinds = set(v) - {"name"}
            if not kinds <= ALLOWED_VOLUMES:
                bad.append(f"{where}: volume {v['name']} is {sorted(kinds)}")
        for c in _containers(spec):
            csc = c.get("securityContext", {})
            name = f"{where}/{c['name']}"
            if not (csc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True):
                bad.append(f"{name}: runAsNonRoot is not true")
            if csc.get("runAsUser", psc.get("runAsUser")) == 0:
                bad.append(f"{name}: runAsUser 0")
            seccomp = csc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
            if seccomp not in ("RuntimeDefault", "Localhost"):
                bad.append(f"{name}: seccompProfile {seccomp}")
            if csc.get("allowPrivilegeEscalation") is not False:
                bad.append(f"{name}: allowPrivilegeEscalation is not false")
            if csc.get("privileged"):
                bad.append(f"{name}: privileged")
            caps = csc.get("capabilities", {})
            if "ALL" not in caps.get("drop", []) or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
                bad.append(f"{name}: capabilities {caps}")
            if csc.get("readOnlyRootFilesystem") is not True:
                bad.append(f"{name}: root filesystem is writable")
            requests = c.get("resources", {}).get("requests", {})
            if "ephemeral-storage" not in requests:
                bad.append(f"{name}: no ephemeral-storage request")
    return bad


def image_problems(ref: str, built: set[str]) -> list[str]:
    """Why `ref` may not resolve on a cluster or docker host ([] when it will)."""
    name, _, digest = ref.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    if not digest and (not tag or tag == "latest"):
        return [f"{ref}: not pinned (no tag, or latest)"]
    if "bitnami" in name.split(":")[0]:
        return [f"{ref}: bitnami's versioned tags were withdrawn from Docker Hub"]
    if ref in built or name.startswith(KEPT_REGISTRIES) or OFFICIAL.match(name):
        return []
    return [f"{ref}: neither built by a Dockerfile of the output nor from a registry that keeps its tags"]


def built_images(out: Path) -> set[str]:
    """Tags the output's Dockerfiles build (their `docker build -t` line, or the image the manifests name)."""
    from tritongen.deploy.image import image_tag

    built = set()
    if (out / "Dockerfile.tritongen").is_file():
        built.add(image_tag())
    serving = out / "Dockerfile.serving"
    if serving.is_file():
        built.update(re.findall(r"^#\s+docker build -t (\S+) -f Dockerfile.serving", serving.read_text(), re.M))
    return built


def dockerfile_images(out: Path) -> list[str]:
    """Images the output's Dockerfiles pull (FROM, COPY --from), not the names of their own build stages."""
    refs = []
    for f in out.glob("Dockerfile.*"):
        stages = set(re.findall(r"^\s*FROM\s+\S+\s+AS\s+(\S+)", f.read_text(), re.M | re.I))
        for line in f.read_text().splitlines():
            m = re.match(r"^\s*(?:FROM\s+(\S+)|COPY\s+--from=(\S+))", line)
            if m and (m.group(1) or m.group(2)) not in stages:
                refs.append(m.group(1) or m.group(2))
    return refs


def images(objects: list[dict], out: Path) -> list[str]:
    built = built_images(out)
    bad = []
    refs = [c["image"] for _w, _m, spec, _n in pod_templates(objects) for c in _containers(spec)]
    for ref in sorted(set(refs + dockerfile_images(out))):
        bad += image_problems(ref, built)
    return bad


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def storage(objects: list[dict]) -> list[str]:
    modes = {o["metadata"]["name"]: o["spec"]["accessModes"] for o in objects if o["kind"] == "PersistentVolumeClaim"}
    users: dict[str, list[tuple[str, dict, dict, int]]] = {}
    for t in pod_templates(objects):
        for v in t[2].get("volumes", []):
            if "persistentVolumeClaim" in v:
                users.setdefault(v["persistentVolumeClaim"]["claimName"], []).append(t)
    bad = []
    for claim, consumers in users.items():
        if claim not in modes:
            bad.append(f"{claim}: mounted but not in the build")
            continue
        mode = modes[claim]
        if "ReadWriteMany" in mode or "ReadOnlyMany" in mode:
            continue
        if "ReadWriteOncePod" in mode:
            if len(consumers) > 1 or consumers[0][3] > 1:
                bad.append(f"{claim}: ReadWriteOncePod mounted by {len(consumers)} workload(s)")
            continue
        if len(consumers) == 1 and consumers[0][3] <= 1:
            continue
        for where, meta, spec, n in consumers:
            if where.startswith("LeaderWorkerSet/") and n > 1:  # one replica's pods run on `size` nodes
                bad.append(f"{where}: ReadWriteOnce {claim} across the nodes of a LeaderWorkerSet")
                continue
            terms = spec.get("affinity", {}).get("podAffinity", {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution", [])
            shared = [t for t in terms if t.get("topologyKey") == "kubernetes.io/hostname"
                      and all(_matches(t["labelSelector"]["matchLabels"], m.get("labels", {}))
                              for _w, m, _s, _n in consumers)]
            if not shared:
                bad.append(f"{where}: mounts ReadWriteOnce {claim} without a required same-node affinity that "
                           "every consumer matches")
        # Sharing a node means tolerating its taints: a consumer that cannot land where the others are waits forever.
        tolerations = {where: sorted(t["key"] for t in spec.get("tolerations", [])) for where, _m, spec, _n in consumers}
        if len({tuple(t) for t in tolerations.values()}) > 1:
            bad.append(f"{claim}: ReadWriteOnce consumers tolerate different taints: {tolerations}")
    return bad


def autoscaling(objects: list[dict]) -> list[str]:
    workloads = {(o["kind"], o["metadata"]["name"]) for o in objects}
    bad = []
    for h in (o for o in objects if o["kind"] == "HorizontalPodAutoscaler"):
        spec = h["spec"]
        if not spec.get("minReplicas", 1) < spec["maxReplicas"]:
            bad.append(f"HPA/{h['metadata']['name']}: min {spec.get('minReplicas', 1)} >= max {spec['maxReplicas']}")
        ref = spec["scaleTargetRef"]
        if (ref["kind"], ref["name"]) not in workloads:
            bad.append(f"HPA/{h['metadata']['name']}: targets {ref['kind']}/{ref['name']}, not in the build")
    return bad


# The flags that make a process listen on a port, by the port's name.
_SERVES = {"http": ("--http-port={}", "--kserve-http-port={}"), "grpc": ("--grpc-port={}", "--kserve-grpc-port={}"),
           "metrics": ("--metrics-port={}",), "openai": ("--openai-port={}", "--openai {}"),
           "locust": ("--master-port {}",)}


def _serves(c: dict, name: str, port: int) -> bool:
    argv = " ".join(c.get("command", []) + c.get("args", []))
    return any(flag.format(port) in argv for flag in _SERVES.get(name, ()))


def scraped_ports(objects: list[dict]) -> list[str]:
    bad = []
    templates = pod_templates(objects)
    for _where, _meta, spec, _n in templates:
        for c in spec["containers"]:
            for p in c.get("ports", []):
                if not _serves(c, p["name"], p["containerPort"]):
                    bad.append(f"{_where}/{c['name']}: declares {p['name']} {p['containerPort']} that its process "
                               "is not told to serve")
    for m in (o for o in objects if o["kind"] == "PodMonitor"):
        selector = m["spec"]["selector"]["matchLabels"]
        selected = [t for t in templates if _matches(selector, t[1].get("labels", {}))]
        if not selected:
            bad.append(f"PodMonitor/{m['metadata']['name']}: selects no pod")
        for endpoint in m["spec"]["podMetricsEndpoints"]:
            for where, _meta, spec, _n in selected:
                if not any(p["name"] == endpoint["port"] for c in spec["containers"] for p in c.get("ports", [])):
                    bad.append(f"PodMonitor/{m['metadata']['name']}: {where} declares no port {endpoint['port']}")
    return bad


def k8s_policy(objects: list[dict], out: Path) -> list[str]:
    return restricted(objects) + images(objects, out) + storage(objects) + autoscaling(objects) + \
        scraped_ports(objects)


def compose_policy(out: Path) -> list[str]:
    """The compose file as written: pinned images, no absolute host path, a stop grace period for servers."""
    doc = yaml.safe_load((out / "docker-compose.yaml").read_text())
    built = built_images(out)
    bad = []
    for name, s in doc["services"].items():
        bad += [f"{name}: {p}" for p in image_problems(s["image"], built)]
        for v in s.get("volumes", []):
            source = v["source"] if isinstance(v, dict) else v.split(":")[0]
            if source.startswith("/"):
                bad.append(f"{name}: absolute host path {source}")
        if name.startswith("triton-") and "stop_grace_period" not in s:
            bad.append(f"{name}: no stop_grace_period")
    for ref in dockerfile_images(out):
        bad += image_problems(ref, built)
    return bad

"""Kubernetes pods of the tritongen image: tritongen's OpenAI frontend (k8s/base) and the in-cluster load test
(the k8s/loadtest component).

The load test runs on Locust's own master/worker mode, so a load that needs several machines is one apply:
- a Job `<name>-loadtest` runs `tritongen loadtest --master --workers N`: it waits for its workers, drives the
  spec's load profile, and its exit code is the verdict (1: an SLO missed), so it runs once and never retries;
- a headless Service `<name>-loadtest-master` gives the workers the master's address (Locust's port 5557);
- a Job `<name>-loadtest-workers` runs N pods of `tritongen loadtest --worker`, one Locust process each
  (N = validation.load.processes). Workers leave when the master quits, so they complete rather than restart
  as a Deployment's pods would.
Every pod reads the plan lock from a ConfigMap and the tokenizer from the models volume (the load generator counts
tokens with it); with a ReadWriteOnce volume that keeps them on the servers' node, with ReadWriteMany they spread
over the cluster (preferred anti-affinity between workers).
"""

from __future__ import annotations

from tritongen.deploy import clients, pods
from tritongen.deploy.common import CONTAINER_PORTS, MODELS, STARTUP_MINUTES, Deployment, k8s_name
from tritongen.deploy.image import image_tag

DEFAULT_MASTER_PORT = 5557
"""Locust's master port (its default, and tritongen loadtest's)."""
COMPONENT = {"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component"}


def _labels(dep: Deployment, component: str) -> tuple[dict[str, str], dict[str, str]]:
    selector = {"app.kubernetes.io/name": "tritongen", "app.kubernetes.io/instance": dep.name,
                "app.kubernetes.io/component": component}
    return {**selector, "app.kubernetes.io/managed-by": "tritongen", "app.kubernetes.io/part-of": dep.name}, selector


def _wait(url: str) -> dict:
    return pods.container("wait-for-target", image_tag(), command=["python3", "-c", clients.wait_script(url)],
                          res=pods.resources("100m", "128Mi", ephemeral_gib=0.125))


def _wait_tcp(host: str, port: int) -> dict:
    """Init container: wait until host:port accepts connections (a worker for its Locust master)."""
    script = ("import socket, time\n"
              "while True:\n"
              "    try:\n"
              f"        socket.create_connection(({host!r}, {port}), timeout=5).close(); break\n"
              "    except OSError as err:\n"
              f"        print('waiting for the Locust master at {host}:{port}', err, flush=True); time.sleep(5)\n")
    return pods.container("wait-for-master", image_tag(), command=["python3", "-c", script],
                          res=pods.resources("100m", "128Mi", ephemeral_gib=0.125))


def _api_key_env(dep: Deployment, env_name: str | None) -> list[dict]:
    if not env_name:
        return []
    # kubectl create secret generic <name>-openai-api-key --from-literal=<VAR>=<key>
    return [{"name": env_name, "valueFrom": {"secretKeyRef": {"name": k8s_name(dep.name, "openai-api-key"),
                                                              "key": env_name}}}]


MODELS_MOUNT = {"name": "models", "mountPath": MODELS, "readOnly": True}


def openai_files(dep: Deployment, store, labels: dict[str, str]) -> dict[str, bytes]:
    """tritongen's OpenAI frontend (frontend.openai enabled, implementation tritongen): Deployment + Service."""
    if clients.frontend_mode(dep) != "tritongen":
        return {}
    assert dep.plan.frontend is not None
    pod_labels, selector = _labels(dep, "openai")
    name, port = k8s_name(dep.name, "openai"), clients.openai_port(dep)
    cpu, memory_gib = clients.frontend_resources(dep)
    c = pods.container("openai", image_tag(), args=clients.frontend_args(dep, dep.name),
                       env=_api_key_env(dep, dep.plan.frontend.api_key_env),
                       ports=[{"name": "openai", "containerPort": port, "protocol": "TCP"}],
                       # 200 once Triton and the served models are ready.
                       readinessProbe={"httpGet": {"path": "/health", "port": "openai"}, "periodSeconds": 5,
                                       "failureThreshold": 3},
                       livenessProbe={"tcpSocket": {"port": "openai"}, "periodSeconds": 10, "failureThreshold": 6},
                       lifecycle=pods.drain_lifecycle(dep.plan.deploy.stop_budget("k8s")),
                       res=pods.resources(cpu, f"{memory_gib}Gi"), mounts=[MODELS_MOUNT])
    ready = f"http://{dep.name}:{CONTAINER_PORTS.http}/v2/health/ready"
    spec = pods.pod_spec([c], init=[_wait(ready)], volumes=[pods.models_volume(store.pvc)], affinity=store.affinity(),
                         gpu=store.tolerate_gpu(), grace_s=dep.plan.deploy.grace_period_s)
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": pods.metadata(name, pod_labels),
                  "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                           "template": {"metadata": {"labels": store.labels(pod_labels)}, "spec": spec}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": pods.metadata(name, pod_labels),
               "spec": {"selector": selector, "ports": [{"name": "openai", "port": port, "targetPort": "openai",
                                                         "protocol": "TCP"}]}}
    return {"k8s/base/openai-deployment.yaml": pods.dump(dep.name, [deployment], (
                f"tritongen's OpenAI-compatible frontend in front of Service {dep.name}'s gRPC port; it reads "
                "frontend.json and the tokenizer from the models volume.\nOne gRPC connection to the Service: "
                "put an L7 proxy in between for per-request balancing over several servers.\n"
                f"{dep.plan.frontend.workers} worker(s) ({dep.plan.frontend.workers_why}); the pod requests a core "
                "and a GiB per worker plus one of each.")),
            "k8s/base/openai-service.yaml": pods.dump(dep.name, [service], f"tritongen's OpenAI-compatible API "
                                                                          f"(Deployment {name}).")}


def worker_deadline_s(dep: Deployment) -> int:

    load = dep.plan.load
    run_s = load.duration_s * max(1, len(load.sweep))
    return int(STARTUP_MINUTES * 60 + 2 * run_s + 600)


def loadtest_files(dep: Deployment, ks, store, labels: dict[str, str]) -> dict[str, bytes]:
    mode = clients.frontend_mode(dep)
    target = clients.load_target(dep, dep.name, sum(k.replicas for k in ks),
                                 frontend_host=k8s_name(dep.name, "openai") if mode == "tritongen" else "",
                                 triton_openai_port=clients.openai_port(dep) if mode == "triton" else None)
    workers = dep.plan.load.processes
    master_labels, master_selector = _labels(dep, "loadtest")
    worker_labels, worker_selector = _labels(dep, "loadtest-worker")
    master_name, service_name = k8s_name(dep.name, "loadtest"), k8s_name(dep.name, "loadtest-master")
    configmap, reports = k8s_name(dep.name, "loadtest-plan"), k8s_name(dep.name, "loadtest-reports")
    api_key = _api_key_env(dep, dep.plan.frontend.api_key_env if dep.plan.frontend and target.protocol == "openai"
                           else None)
    plan_mount = {"name": "plan", "mountPath": clients.LOADTEST_DIR, "readOnly": True}
    plan_volume = {"name": "plan", "configMap": {"name": configmap}}
    out = f"{clients.REPORTS}/{dep.name}"
    master_args = [*target.args(out), "--master", "--workers", str(workers),
                   "--master-port", str(DEFAULT_MASTER_PORT), "--worker-wait", "600", "--processes", "1"]
    master = pods.container("loadtest", image_tag(), args=master_args, env=api_key,
                            ports=[{"name": "locust", "containerPort": DEFAULT_MASTER_PORT, "protocol": "TCP"}],
                            res=pods.resources("1", "2Gi"),
                            mounts=[plan_mount, MODELS_MOUNT, {"name": "reports", "mountPath": clients.REPORTS}])
    master_spec = pods.pod_spec([master], init=[_wait(target.ready_url)], restart="Never", affinity=store.affinity(),
                                gpu=store.tolerate_gpu(),
                                volumes=[plan_volume, pods.models_volume(store.pvc),
                                         {"name": "reports", "persistentVolumeClaim": {"claimName": reports}}])
    # Each worker: one Locust process (a core) whose samples travel to the master over Locust's own protocol.
    worker_args = ["loadtest", clients.LOADTEST_PLAN, "--url", target.url, "--worker", "--master-host",
                   service_name, "--master-port", str(DEFAULT_MASTER_PORT), "--processes", "1", "--out", "/tmp/worker"]
    worker = pods.container("worker", image_tag(), args=worker_args, env=api_key, res=pods.resources("1", "1Gi"),
                            mounts=[plan_mount, MODELS_MOUNT])
    spread = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
        "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": worker_selector}}}]}}
    # Workers start once the master listens, so a slow model load does not spend the Job's retries.
    worker_spec = pods.pod_spec([worker], init=[_wait(target.ready_url), _wait_tcp(service_name, DEFAULT_MASTER_PORT)],
                                restart="OnFailure", gpu=store.tolerate_gpu(),
                                affinity=store.affinity() or spread,
                                volumes=[plan_volume, pods.models_volume(store.pvc)])
    files = {name: data.decode() for name, data in clients.loadtest_files(dep).items()}
    objects = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": pods.metadata(configmap, master_labels), "data": files},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": pods.metadata(reports, master_labels),
         "spec": {"accessModes": ["ReadWriteOnce"], **({"storageClassName": store.storage_class}
                                                      if store.storage_class else {}),
                  "resources": {"requests": {"storage": "1Gi"}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": pods.metadata(service_name, master_labels),
         # Headless, and published before the master is ready: the workers only need its address.
         "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": master_selector,
                  "ports": [{"name": "locust", "port": DEFAULT_MASTER_PORT, "targetPort": "locust", "protocol": "TCP"}]}},
        # Exit 1 is a verdict (an SLO missed), not a crash: never retry.
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": pods.metadata(master_name, master_labels),
         "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": store.labels(master_labels)},
                                                  "spec": master_spec}}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": pods.metadata(k8s_name(dep.name, "loadtest-workers"),
                                                                           worker_labels),
         # Workers that outlive their master (it failed, or was deleted) would wait for it forever: the deadline is
         # the servers' startup allowance plus twice the planned run.
         "spec": {"completions": workers, "parallelism": workers, "backoffLimit": 3 * workers,
                  "activeDeadlineSeconds": worker_deadline_s(dep),
                  "template": {"metadata": {"labels": store.labels(worker_labels)}, "spec": worker_spec}}},
    ]
    comment = [f"The load test of validation.load against {target.url} ({target.protocol}), SLOs from the spec: a "
               f"Locust master (Job {master_name}) and {workers} worker pod(s).",
               f"Summary: kubectl logs -f job/{master_name}; files: PVC {reports} ({out}).",
               f"Run again: kubectl delete job {master_name} {k8s_name(dep.name, 'loadtest-workers')}, then apply "
               "again (a Job runs once)."]
    if target.why_no_metrics:
        comment.append(target.why_no_metrics + ".")
    return {"k8s/loadtest/loadtest.yaml": pods.dump(dep.name, objects, "\n".join(comment)),
            "k8s/loadtest/kustomization.yaml": pods.dump(dep.name, [{**COMPONENT, "resources": ["loadtest.yaml"]}], (
                f"Optional kustomize Component: the in-cluster load test in the tritongen image ({image_tag()}, built "
                "from ../../Dockerfile.tritongen).\nUse it through ../with-loadtest (or `components: [../loadtest]` "
                "in your own overlay, next to ../monitoring)."))}

"""Getting the model onto the nodes (Kubernetes): a Job fills the models volume, the servers wait for it.

The Job `<name>-models-<key>` (key: a hash of everything it writes) runs in the serving image and
1. copies the model repository from a ConfigMap (one key per file, mapped back to its path),
2. fetches the checkpoint (and a separate tokenizer) from deploy.checkpoint_uri / tokenizer_uri when the volume
   does not hold it yet: `hf://org/name[@revision]` through huggingface_hub, or an http(s) .tar/.tar.gz archive
   (an in-cluster web server keeps this air-gapped); unset, the files must already be in the volume,
3. tensorrtllm: builds the engine with the conversion scripts the serving image ships under /app/examples and
   trtllm-build (the same commands as `tritongen build`) on one GPU of the serving product, unless
   /models/engine already holds one. Calibrated formats read their dataset from /models/calibration (a local
   `datasets` folder copied into the volume); the hub stays offline. The converted checkpoint goes to an emptyDir
   whose size the pod requests as ephemeral storage,
4. LoRA adapters (the tensorrtllm runtime's): fetches each PEFT folder from deploy.adapter_uris into
   /models/adapters/<name> unless the volume holds it, and converts every adapter into /models/lora/<task id>/
   (the folder the tensorrt_llm model prefetches and the BLS resends from) with the serving image's own
   hf_lora_convert.py; converting takes seconds, so it runs on every Job and the folder is replaced whole,
5. writes `/models/.tritongen/<key>.done`, or on any failure `<key>.failed` with the reason.
Each server pod's init container waits for the first marker and fails with the reason on the second, so a Job
that cannot succeed shows up in every server pod's status instead of leaving them waiting. A changed repository
or source gives a new key, hence a new Job (Jobs are immutable) that refills the volume.
"""

from __future__ import annotations

import hashlib
import math
import shlex
from dataclasses import dataclass

from tritongen.deploy import pods
from tritongen.deploy.common import (
    ADAPTER_SOURCES, ADAPTERS, CHECKPOINT, ENGINE, MODELS, REPOSITORY, TOKENIZER, Deployment, builds_engine, k8s_name,
)
from tritongen.errors import SpecError, problem
from tritongen.runtimes import builder
from tritongen.placement.inventory import GIB

CONFIGMAP_LIMIT = 900 * 1024  # ConfigMaps hold at most 1 MiB; leave room for metadata
EXAMPLES = "/app/examples"
"""TensorRT-LLM's examples in the NGC trtllm image (the release the image carries, so no checkout is fetched)."""
CALIBRATION = f"{MODELS}/calibration"
WORK = "/work"
"""The Job's emptyDir for the converted checkpoint (deleted with the pod)."""


@dataclass(frozen=True)
class ModelsJob:
    name: str
    configmap: str
    items: tuple[tuple[str, str], ...]
    """(ConfigMap key, path under model_repository/)."""
    data: dict[str, str]
    script: str
    marker: str
    failed: str
    gpu: bool
    """Builds an engine: asks for one GPU of the serving kind."""
    work_gib: int
    """Ephemeral storage of the conversion (0: none)."""
    memory_gib: int
    comment: str


def _fetch(uri: str | None, dest: str, field: str, configs: tuple[str, ...] = ("config.json", "tokenizer_config.json")
           ) -> str:
    """sh lines that fill `dest` from `uri` unless it already holds one of `configs` (or fail naming the field)."""
    q = shlex.quote
    if uri is None:
        held = " -o ".join(f"-e {q(dest + '/' + c)}" for c in configs)
        why = f"{dest} is empty: set {field}, or copy the files into the volume (docs/deploy.md)"
        return f"test {held} || fail {q(why)}"
    if uri.startswith("hf://"):
        repo, _, revision = uri.removeprefix("hf://").partition("@")
        code = ("import sys; from huggingface_hub import snapshot_download; "
                "snapshot_download(sys.argv[1], revision=sys.argv[2] or None, local_dir=sys.argv[3])")
        get = f"HF_HUB_OFFLINE=0 python3 -c {q(code)} {q(repo)} {q(revision)} {q(dest + '.partial')}"
    else:
        code = ("import sys, tarfile, urllib.request; "
                "tarfile.open(fileobj=urllib.request.urlopen(sys.argv[1]), mode='r|*').extractall(sys.argv[2])")
        # An archive of one folder holds its files one level down: lift them up.
        get = (f"python3 -c {q(code)} {q(uri)} {q(dest + '.partial')} && "
               f"set -- {q(dest + '.partial')}/*; if [ $# -eq 1 ] && [ -d \"$1\" ]; then "
               f"mv \"$1\" {q(dest + '.one')} && rmdir {q(dest + '.partial')} && mv {q(dest + '.one')} "
               f"{q(dest + '.partial')}; fi")
    missing = " && ".join(f"[ ! -e {q(dest + '/' + c)} ]" for c in configs)
    failed = q(f"fetching {uri} ({field}) failed; see the log of job/") + '"$JOB_NAME"'
    return (f"if {missing}; then "
            f"echo {q('fetching ' + uri)}; {{ rm -rf {q(dest + '.partial')} && {get} && rm -rf {q(dest)} && "
            f"mv {q(dest + '.partial')} {q(dest)}; }} || fail {failed}; fi")


def fill_memory_gib(dep: Deployment) -> int:
    """Checkpoint conversion holds the whole checkpoint in host memory (tensorrtllm); a download needs little."""
    weights = dep.memory.weight_bytes_per_rank * dep.memory.world_size if builds_engine(dep.plan) else 0
    return math.ceil(weights * 1.2 / GIB) + 4


def models_job(dep: Deployment) -> ModelsJob:
    q = shlex.quote
    deploy = dep.plan.deploy
    files = sorted(dep.repository.items())
    size = sum(len(data) for _, data in files)
    if size > CONFIGMAP_LIMIT:
        raise SpecError(problem("model_repository", f"{size / 1024:.0f} KiB does not fit a ConfigMap (1 MiB)",
                                "copy model_repository/ into the volume yourself and drop the models Job"))
    items = tuple((f"f{i:03d}", rel) for i, (rel, _) in enumerate(files))
    data = {key: dep.repository[rel].decode() for key, rel in items}
    lines = ["set -eu", f"mkdir -p {MODELS}/.tritongen"]
    separate_tokenizer = dep.plan.tokenizer.dir != dep.plan.paths.checkpoint and deploy.tokenizer_uri is not None
    lines.append(_fetch(deploy.checkpoint_uri, CHECKPOINT, "deploy.checkpoint_uri"))
    if separate_tokenizer:
        lines.append(_fetch(deploy.tokenizer_uri, TOKENIZER, "deploy.tokenizer_uri"))
    else:
        lines.append(f"[ -e {TOKENIZER} ] || ln -s checkpoint {TOKENIZER}")
    rt = builder(dep.plan)
    gpu = rt.builds_engine
    work_gib = 0
    if gpu:
        converted = f"{WORK}/tllm_checkpoint"
        commands = rt.engine_build_commands(dep.plan, CHECKPOINT, f"{ENGINE}.partial", converted_dir=converted,
                                            examples_dir=EXAMPLES, calibration_dir=CALIBRATION)
        build = " && ".join(shlex.join(c) for c in commands)
        check = ""
        if any("--calib_dataset" in c for c in commands):
            missing = (f"{CALIBRATION} is missing: copy the calibration dataset (engine.calibration_dataset) "
                       "into the volume")
            check = f"{{ [ -d {CALIBRATION} ] || fail {q(missing)}; }} && "
        # A failure inside an && list, also as an if's body, does not end a `set -e` script: `|| fail` does.
        lines.append(f"if [ ! -e {ENGINE}/config.json ]; then {{ {check}rm -rf {ENGINE}.partial && {build} && "
                     f"mv {ENGINE}.partial {ENGINE} && rm -rf {converted}; }} || "
                     'fail "building the TensorRT-LLM engine failed; see the log of job/$JOB_NAME"; fi')
        weights = dep.memory.weight_bytes_per_rank * dep.memory.world_size
        work_gib = math.ceil(weights * 1.3 / GIB) + 2
    if dep.plan.adapters:
        sources = {}
        for adapter in dep.plan.adapters:
            sources[adapter.task_id] = f"{ADAPTER_SOURCES}/{adapter.name}"
            lines.append(_fetch(deploy.adapter_uris.get(adapter.name), sources[adapter.task_id],
                                f"deploy.adapter_uris.{adapter.name}", ("adapter_config.json",)))
        convert = " && ".join(shlex.join(c) for c in rt.adapter_convert_commands(
            dep.plan, sources, f"{ADAPTERS}.partial", examples_dir=EXAMPLES))
        # `|| fail`, as for the engine.
        lines.append(f"rm -rf {ADAPTERS}.partial && {convert} && rm -rf {ADAPTERS} && "
                     f"mv {ADAPTERS}.partial {ADAPTERS} || "
                     'fail "converting the LoRA adapters failed; see the log of job/$JOB_NAME"')
    key_source = repr((sorted((k, v) for k, v in data.items()), items, lines)).encode()
    key = hashlib.sha256(key_source).hexdigest()[:10]
    marker, failed = f"{MODELS}/.tritongen/{key}.done", f"{MODELS}/.tritongen/{key}.failed"
    prologue = [f"fail() {{ echo \"$1\" | tee {failed} >&2; exit 1; }}",
                f"trap '[ -e {marker} ] || [ -e {failed} ] || echo \"job/$JOB_NAME failed; see its log\" > "
                f"{failed}' EXIT"]
    lines = lines[:2] + [f"rm -f {failed}"] + prologue + lines[2:]
    lines += [f"rm -rf {REPOSITORY}.partial && cp -RL /config/model_repository {REPOSITORY}.partial",
              f"rm -rf {REPOSITORY} && mv {REPOSITORY}.partial {REPOSITORY}",
              f"touch {q(marker)}", f"echo 'models volume ready ({key})'"]
    what = ("repository, checkpoint" + (", engine (built on one GPU of the serving product)" if gpu else "")
            + (", LoRA adapters (converted into lora/)" if dep.plan.adapters else ""))
    comment = (f"The model repository (one key per file) and the Job that fills the models volume: {what}.\n"
               f"Server pods wait for {marker} and fail with the Job's reason when it writes {failed}.\n"
               "Air-gapped: no repository is cloned and the Hugging Face hub stays offline unless "
               "deploy.checkpoint_uri is an hf:// URI.")
    return ModelsJob(name=k8s_name(dep.name, "models", key), configmap=k8s_name(dep.name, "model-repository", key),
                     items=items, data=data, script="\n".join(lines), marker=marker, failed=failed, gpu=gpu,
                     work_gib=work_gib, memory_gib=fill_memory_gib(dep), comment=comment)


def models_job_objects(dep: Deployment, job: ModelsJob, kind, store, labels: dict[str, str]) -> list[dict]:
    """The ConfigMap and the Job (on the servers' node when the volume is ReadWriteOnce)."""
    memory = f"{job.memory_gib}Gi"
    devices = {kind.resource: 1} if job.gpu and kind.resource else None
    env = [{"name": "JOB_NAME", "value": job.name},
           {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": k8s_name(dep.name, "hf-token"), "key": "HF_TOKEN",
                                                               "optional": True}}},
           # Conversion and calibration read local files only; only an hf:// checkpoint_uri turns the hub on.
           {"name": "HF_HUB_OFFLINE", "value": "1"}, {"name": "HF_DATASETS_OFFLINE", "value": "1"},
           {"name": "HF_HUB_ENABLE_HF_TRANSFER", "value": "0"}]
    mounts = [{"name": "models", "mountPath": MODELS},
              {"name": "repository", "mountPath": "/config/model_repository", "readOnly": True},
              {"name": "dshm", "mountPath": "/dev/shm"}]
    volumes = [pods.models_volume(store.pvc, read_only=False),
               {"name": "repository", "configMap": {"name": job.configmap,
                                                    "items": [{"key": k, "path": p} for k, p in job.items]}},
               pods.shm_volume(2)]
    if job.work_gib:
        mounts.append({"name": "work", "mountPath": WORK})
        volumes.append({"name": "work", "emptyDir": {"sizeLimit": f"{job.work_gib}Gi"}})
    c = pods.container("fill", dep.image, command=["sh", "-c", job.script], env=env,
                       res=pods.resources("2", memory, ephemeral_gib=job.work_gib + pods.SCRATCH_GIB, extra=devices),
                       mounts=mounts)
    pod_labels = store.labels({**labels, "app.kubernetes.io/component": "models"})
    spec = pods.pod_spec([c], volumes=volumes, gpu=job.gpu or store.tolerate_gpu(), restart="OnFailure",
                         affinity=store.affinity(),
                         node_selector=kind.node_selector if job.gpu else None)
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": pods.metadata(job.configmap, labels),
             "data": job.data},
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": pods.metadata(job.name, labels),
             "spec": {"backoffLimit": 2, "template": {"metadata": {"labels": pod_labels}, "spec": spec}}}]

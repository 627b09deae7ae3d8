"""Getting the model onto the nodes (Kubernetes): a Job fills the models volume, the servers wait for it.

The Job `<name>-models-<key>` (key: a hash of everything it writes) runs in the serving image and
1. copies the model repository from a ConfigMap (one key per file, mapped back to its path),
2. fetches the checkpoint (and a separate tokenizer) from deploy.checkpoint_uri / tokenizer_uri when the volume
   does not hold it yet: `hf://org/name[@revision]` through huggingface_hub, or an http(s) .tar/.tar.gz archive,
3. tensorrtllm: builds the engine with the pinned TensorRT-LLM's conversion script and trtllm-build (the same
   commands as `tritongen build`) on one GPU of the serving product, unless /models/engine already holds one,
4. writes `/models/.tritongen/<key>.done`.
Each server pod's init container waits for that marker, so `kubectl apply -k` is the only step. A changed
repository or source gives a new key, hence a new Job (Jobs are immutable) that refills the volume.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass

from tritongen.deploy.common import CHECKPOINT, ENGINE, MODELS, REPOSITORY, TOKENIZER, Deployment, k8s_name
from tritongen.errors import SpecError, problem
from tritongen.runtimes import runtime_of

CONFIGMAP_LIMIT = 900 * 1024  # ConfigMaps hold at most 1 MiB; leave room for metadata


@dataclass(frozen=True)
class ModelsJob:
    name: str
    configmap: str
    items: tuple[tuple[str, str], ...]
    """(ConfigMap key, path under model_repository/)."""
    data: dict[str, str]
    script: str
    marker: str
    gpu: bool
    """Builds an engine: asks for one GPU of the serving kind."""


def _fetch(uri: str | None, dest: str, field: str) -> str:
    """sh lines that fill `dest` from `uri` unless it already holds a config (or fail naming the field)."""
    q = shlex.quote
    if uri is None:
        return (f"test -e {q(dest + '/config.json')} -o -e {q(dest + '/tokenizer_config.json')} || "
                f"{{ echo {q(f'{dest} is empty: set {field} or copy the files into the volume')}; exit 1; }}")
    if uri.startswith("hf://"):
        repo, _, revision = uri.removeprefix("hf://").partition("@")
        code = ("import sys; from huggingface_hub import snapshot_download; "
                "snapshot_download(sys.argv[1], revision=sys.argv[2] or None, local_dir=sys.argv[3])")
        get = f"python3 -c {q(code)} {q(repo)} {q(revision)} {q(dest + '.partial')}"
    else:
        code = ("import sys, tarfile, urllib.request; "
                "tarfile.open(fileobj=urllib.request.urlopen(sys.argv[1]), mode='r|*').extractall(sys.argv[2])")
        # An archive of one folder holds its files one level down: lift them up.
        get = (f"python3 -c {q(code)} {q(uri)} {q(dest + '.partial')} && "
               f"set -- {q(dest + '.partial')}/*; if [ $# -eq 1 ] && [ -d \"$1\" ]; then "
               f"mv \"$1\" {q(dest + '.one')} && rmdir {q(dest + '.partial')} && mv {q(dest + '.one')} "
               f"{q(dest + '.partial')}; fi")
    return (f"if [ ! -e {q(dest + '/config.json')} ] && [ ! -e {q(dest + '/tokenizer_config.json')} ]; then "
            f"echo 'fetching {uri}'; rm -rf {q(dest + '.partial')} && {get} && rm -rf {q(dest)} && "
            f"mv {q(dest + '.partial')} {q(dest)}; fi")


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
    # The engine build (runtimes that serve one) needs the GPU and the release's conversion scripts.
    build = runtime_of(dep.plan).engine_build_script(dep.plan, CHECKPOINT, ENGINE)
    gpu = build is not None
    if build is not None:
        lines.append(build)
    key_source = repr((sorted((k, v) for k, v in data.items()), items, lines)).encode()
    key = hashlib.sha256(key_source).hexdigest()[:10]
    marker = f"{MODELS}/.tritongen/{key}.done"
    lines += [f"rm -rf {REPOSITORY}.partial && cp -RL /config/model_repository {REPOSITORY}.partial",
              f"rm -rf {REPOSITORY} && mv {REPOSITORY}.partial {REPOSITORY}",
              f"touch {q(marker)}", f"echo 'models volume ready ({key})'"]
    return ModelsJob(name=k8s_name(dep.name, "models", key), configmap=k8s_name(dep.name, "model-repository", key),
                     items=items, data=data, script="\n".join(lines), marker=marker, gpu=gpu)

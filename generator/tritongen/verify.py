"""Check a model repository: protobuf parse, ensemble wiring, and optionally a real load in tritonserver."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritongen import repository_manifest
from tritongen.errors import CheckFailed, EnvironmentMissing, SpecError, problem
from tritongen.readiness import model_states
from tritongen.runtimes import missing_model_code, repositories
from tritongen.serve import TritonServer


@dataclass(frozen=True)
class Finding:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def parse_config(path: Path) -> model_config_pb2.ModelConfig:
    """Parse a config.pbtxt into Triton's ModelConfig protobuf (raises text_format.ParseError)."""
    config = model_config_pb2.ModelConfig()
    text_format.Parse(path.read_text(), config)
    return config


def load_repository(repo: Path) -> tuple[dict[str, model_config_pb2.ModelConfig], list[Finding]]:
    configs, findings = {}, []
    for cfg_path in sorted(repo.glob("*/config.pbtxt")):
        model_dir = cfg_path.parent
        rel = f"{model_dir.name}/config.pbtxt"
        try:
            config = parse_config(cfg_path)
        except text_format.ParseError as err:
            findings.append(Finding(rel, f"does not parse as ModelConfig: {err}"))
            continue
        if config.name != model_dir.name:
            findings.append(Finding(rel, f"name {config.name!r} differs from its folder {model_dir.name!r}"))
        if not any(p.is_dir() and p.name.isdigit() for p in model_dir.iterdir()):
            findings.append(Finding(rel, "has no numeric version folder (e.g. 1/)"))
        configs[config.name] = config
        findings += _check_custom_configs(model_dir)
    if not configs:
        findings.append(Finding(str(repo), "holds no model (no */config.pbtxt)"))
    return configs, findings


def _check_custom_configs(model_dir: Path) -> list[Finding]:
    """configs/<name>.pbtxt (a server group's own config, chosen with --model-config-name) parses and names the
    model of its folder."""
    findings = []
    for path in sorted(model_dir.glob("configs/*.pbtxt")):
        rel = f"{model_dir.name}/configs/{path.name}"
        try:
            config = parse_config(path)
        except text_format.ParseError as err:
            findings.append(Finding(rel, f"does not parse as ModelConfig: {err}"))
            continue
        if config.name != model_dir.name:
            findings.append(Finding(rel, f"name {config.name!r} differs from its folder {model_dir.name!r}"))
    return findings


def _dtype(value: int) -> str:
    return model_config_pb2.DataType.Name(value)


def check_ensembles(configs: dict[str, model_config_pb2.ModelConfig]) -> list[Finding]:
    """Every step maps existing tensors with matching data types; every ensemble output is produced."""
    findings = []
    for ens in configs.values():
        if ens.platform != "ensemble":
            continue
        where = f"{ens.name}/config.pbtxt"
        # tensor name -> data type, for ensemble inputs and every step output seen so far
        available = {t.name: t.data_type for t in ens.input}
        steps = list(ens.ensemble_scheduling.step)
        for i, step in enumerate(steps):
            model = configs.get(step.model_name)
            label = f"{where} step {i} ({step.model_name})"
            if model is None:
                findings.append(Finding(label, f"model {step.model_name!r} is not in the repository"))
                continue
            if ens.max_batch_size > model.max_batch_size:
                findings.append(Finding(label, f"ensemble max_batch_size {ens.max_batch_size} exceeds "
                                               f"{model.name}'s {model.max_batch_size}"))
            model_inputs = {t.name: t for t in model.input}
            model_outputs = {t.name: t for t in model.output}
            for key, value in step.input_map.items():
                if key not in model_inputs:
                    findings.append(Finding(label, f"input_map key {key!r} is not an input of {model.name}"))
                elif value not in available:
                    findings.append(Finding(label, f"input_map value {value!r} is neither an ensemble input nor "
                                                   "an earlier step's output"))
                elif available[value] != model_inputs[key].data_type:
                    findings.append(Finding(label, f"{value!r} is {_dtype(available[value])} but {model.name} "
                                                   f"input {key!r} is {_dtype(model_inputs[key].data_type)}"))
            for name, tensor in model_inputs.items():
                if not tensor.optional and name not in step.input_map:
                    findings.append(Finding(label, f"required input {name!r} of {model.name} is not mapped"))
            for key, value in step.output_map.items():
                if key not in model_outputs:
                    findings.append(Finding(label, f"output_map key {key!r} is not an output of {model.name}"))
                    continue
                available[value] = model_outputs[key].data_type
        for out in ens.output:
            produced = available.get(out.name)
            if produced is None or out.name in {t.name for t in ens.input}:
                findings.append(Finding(where, f"ensemble output {out.name!r} is not produced by any step"))
            elif produced != out.data_type:
                findings.append(Finding(where, f"ensemble output {out.name!r} is {_dtype(out.data_type)} but its "
                                               f"step produces {_dtype(produced)}"))
    return findings


def check_runtime_files(repo: Path) -> list[Finding]:
    """Each runtime's check of its own files (llmapi model.yaml keys, vLLM model.json keys, ...)."""
    return [Finding(path, message) for rt in repositories().values() for path, message in rt.check_repository(repo)]


def check_manifest(repo: Path, configs: dict[str, model_config_pb2.ModelConfig]) -> list[Finding]:
    """What the render manifest lists is there: each model with the backend it was rendered with, each file render
    wrote. A repository without a manifest has nothing to check here."""
    try:
        rendered = repository_manifest.read(repo)
    except SpecError as err:
        return [Finding(repository_manifest.FILE, str(err).split(": ", 1)[-1])]
    if rendered is None:
        return []
    findings, fix = [], "render the repository again"
    for name, model in rendered.models.items():
        config = configs.get(name)
        if config is None:
            findings.append(Finding(f"{name}/config.pbtxt", f"missing or unreadable, but {repository_manifest.FILE} "
                                                            f"lists model {name!r}; {fix}"))
        elif (config.backend or config.platform) != model.backend:
            findings.append(Finding(f"{name}/config.pbtxt", f"backend {config.backend or config.platform!r}, rendered "
                                                            f"as {model.backend!r}; {fix}"))
        findings += [Finding(rel, f"missing: render wrote it ({repository_manifest.FILE}); {fix}")
                     for rel in model.files if not (repo / rel).is_file()]
    return findings


def verify_repository(repo: Path) -> list[Finding]:
    configs, findings = load_repository(repo)
    return findings + check_manifest(repo, configs) + check_ensembles(configs) + check_runtime_files(repo)


def verify_load(repo: Path, timeout: float = 300.0) -> dict[str, str]:
    """Start the embedded tritonserver on `repo`; every model must be READY. Returns {model: state}."""

    missing = missing_model_code(repo)
    if missing is not None:
        raise EnvironmentMissing(problem(*missing))
    server = TritonServer(repo)
    try:
        server.start(timeout=timeout)
        states = model_states(server.http_url)
    finally:
        server.stop()
    bad = [f"{name}: {state} {reason}".strip() for name, (state, reason) in states.items() if state != "READY"]
    if bad:
        raise CheckFailed(["models not READY:", *bad])
    return {name: state for name, (state, _) in states.items()}

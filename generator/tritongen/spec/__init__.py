"""The deployment spec (v1): one YAML file in, validated into typed sections.

Every field carries a docstring; `tritongen validate --explain` and docs/reference.md are generated
from them. Paths are kept as written here; the Plan resolves them against the spec file's folder.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from tritongen.errors import SpecError, clip, problem, shown
from tritongen.runtimes import CHOICES as RUNTIME_CHOICES, RuntimeName, names, runtime


class _Problems(ValueError):
    """Cross-field problems of a section, already formatted one per line (`dotted.path: what; fix`)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


class ModelSection(_Section):
    checkpoint: str
    """Local Hugging Face checkpoint folder (config.json + weights). Relative paths are resolved against the spec file."""

    tokenizer: str | None = None
    """Tokenizer folder loadable with AutoTokenizer.from_pretrained; defaults to `checkpoint`."""

    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    """Weight/activation dtype of the served model. `auto` keeps the checkpoint's dtype (float32 on CPU)."""

    add_special_tokens: bool = True
    """Passed to the tokenizer's encode in preprocessing (BOS etc.)."""

    skip_special_tokens: bool = True
    """Passed to the tokenizer's decode in postprocessing."""


class EngineSection(_Section):
    """TensorRT-LLM engine build settings (runtime `tensorrtllm` only)."""

    tp_size: int = Field(1, ge=1)
    """Tensor-parallel degree of the engine."""

    pp_size: int = Field(1, ge=1)
    """Pipeline-parallel degree of the engine."""

    dtype: Literal["float16", "bfloat16", "float32"] = "bfloat16"
    """Activation/weight dtype used for checkpoint conversion."""

    quantization: Literal["none", "fp8", "int8_weight_only", "int4_weight_only", "int4_awq", "smoothquant"] = "none"
    """Quantisation applied at conversion (where TensorRT-LLM supports it for the architecture)."""

    kv_cache_dtype: Literal["auto", "fp8", "int8"] = "auto"
    """KV-cache dtype; `auto` follows `dtype`."""

    max_batch_size: int | None = Field(None, ge=1)
    """Engine max batch size; defaults to serving.max_batch_size."""

    max_input_len: int = Field(2048, ge=1)
    """Longest prompt the engine accepts (tokens)."""

    max_seq_len: int = Field(4096, ge=2)
    """Longest prompt + completion (tokens)."""

    max_num_tokens: int | None = Field(None, ge=1)
    """Tokens per engine step (in-flight batching budget); default 8192."""

    max_beam_width: int = Field(1, ge=1)
    """Largest beam width the engine supports."""

    use_paged_context_fmha: bool = True
    """Needed for KV-cache reuse and chunked context."""

    gemm_plugin: Literal["auto", "float16", "bfloat16", "float32", "disable"] = "auto"
    """GEMM plugin dtype passed to trtllm-build (`auto` follows `dtype`)."""

    calibration_dataset: str | None = None
    """Local calibration dataset folder (a `datasets` folder with a text column) for the calibrated formats (fp8,
    int4_awq, smoothquant, an fp8/int8 KV cache). Unset, quantize.py downloads cnn_dailymail from the Hugging Face
    hub; a build without that network stops with exit 3."""

    engine_dir: str | None = None
    """Use an already built engine folder instead of building one (its config.json is checked against the spec)."""

    gpu_arch: str | None = Field(None, pattern=r"^sm[0-9]{2,3}[a-z]?$")
    """GPU architecture the engine is built for (`sm90` for H100/H200, `sm80` A100, `sm89` L40S, `sm100` B200): part
    of the engine cache key, so `plan`/`render`/`deploy` work off the GPU machine. Default: `--gpu-arch`, else the
    inventory's GPUs, else GPU 0 through NVML. `build` refuses a machine whose GPU differs."""

    cache_dir: str = "~/.cache/tritongen/engines"
    """Content-addressed engine cache."""


class LlmApiSection(_Section):
    """LLM-API model settings (runtime `trtllm`: NVIDIA's llmapi Triton model, PyTorch backend, no engine build)."""

    tp_size: int = Field(1, ge=1)
    """Tensor-parallel degree (LlmArgs tensor_parallel_size)."""

    pp_size: int = Field(1, ge=1)
    """Pipeline-parallel degree (LlmArgs pipeline_parallel_size)."""

    max_batch_size: int | None = Field(None, ge=1)
    """Runtime batch (LlmArgs max_batch_size). None: sized from the workload and the KV budget as
    trtllm-bench does (tensorrt_llm/bench/build/tuning.py); without a KV budget (no inventory, no
    serving.kv_cache.max_tokens) the LLM API's own default."""

    max_num_tokens: int | None = Field(None, ge=1)
    """Tokens per scheduler step (LlmArgs max_num_tokens). None: sized like max_batch_size."""

    max_seq_len: int | None = Field(None, ge=2)
    """Longest prompt + completion (LlmArgs max_seq_len). None: the checkpoint's context length
    (max_position_embeddings in config.json)."""

    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    """KV-cache dtype (KvCacheConfig.dtype); `auto` follows the checkpoint."""

    cuda_graphs: bool = True
    """Capture CUDA graphs for decode batches up to max_batch_size (cuda_graph_config; off renders null)."""

    cuda_graph_padding: bool = True
    """Round a decode batch up to the next captured size (CudaGraphConfig.enable_padding)."""

    enable_chunked_prefill: bool = False
    """Split long prompts over several scheduler steps (LlmArgs enable_chunked_prefill)."""

    trust_remote_code: bool = False
    """Let the checkpoint run its own modelling code (LlmArgs trust_remote_code)."""


class KVCacheSection(_Section):
    free_gpu_mem_fraction: float = Field(0.9, gt=0, le=1)
    """Fraction of the memory left after the weights that the KV cache may take. placement.device gpu: of the GPU's
    memory (the placement applies it with --inventory; else the runtime at load, as TensorRT-LLM's
    free_gpu_memory_fraction). placement.device cpu: of the host memory (RAM) free when planning."""

    max_tokens: int | None = Field(None, ge=1)
    """KV-cache budget per LLM instance in tokens (max_tokens_in_paged_kv_cache). Unset: what the deployment holds
    at once, max_batch_size x the longest sequence rounded up to whole blocks, capped by free_gpu_mem_fraction of
    the machine's memory; set: checked against that memory (exit 2 when it cannot fit). `tritongen plan` says how it
    was sized (kv_sizing)."""

    enable_reuse: bool = False
    """Prefix (KV block) reuse across requests (tensorrtllm: enable_kv_cache_reuse)."""

    host_memory_bytes: int = Field(0, ge=0)
    """Host memory for KV offload (tensorrtllm: kv_cache_host_memory_bytes)."""

    block_size: int = Field(32, ge=1)
    """Tokens per KV block (hf runtime's paged cache)."""


class DynamicBatchingSection(_Section):
    max_queue_delay_us: int = Field(0, ge=0)
    """Dynamic batcher max_queue_delay_microseconds (preprocessing and the LLM model)."""

    max_queue_size: int = Field(0, ge=0)
    """default_queue_policy.max_queue_size; 0 means unbounded. Requests beyond it are rejected."""


class ServingSection(_Section):
    max_batch_size: int = Field(8, ge=1, le=4096)
    """Triton max_batch_size, the same in every model of the ensemble."""

    streaming: bool = True
    """Decoupled tensorrt_llm model: streamed tokens over gRPC ModelStreamInfer and HTTP generate_stream."""

    exclude_input_in_output: bool = True
    """Return only the completion, not the prompt."""

    max_tokens_default: int = Field(64, ge=1)
    """Completion length the examples and `tritongen generate` ask for when none is given."""

    preprocessing_instances: int = Field(1, ge=1)
    """Instance count of the tokenizer model."""

    postprocessing_instances: int = Field(1, ge=1)
    """Instance count of the detokenizer model."""

    dynamic_batching: DynamicBatchingSection = DynamicBatchingSection()
    """Queue settings of the dynamic batcher."""

    kv_cache: KVCacheSection = KVCacheSection()
    """KV-cache budget."""

    batching_strategy: Literal["inflight_fused_batching", "inflight_batching"] = "inflight_fused_batching"
    """tensorrtllm gpt_model_type (V1/static batching is deprecated and not offered)."""

    batch_scheduler_policy: Literal["max_utilization", "guaranteed_no_evict"] = "guaranteed_no_evict"
    """tensorrtllm scheduler policy."""

    enable_chunked_context: bool = False
    """tensorrtllm context chunking (needs an engine with use_paged_context_fmha)."""

    bls_instances: int | None = Field(None, ge=1)
    """tensorrt_llm_bls instances (the ensemble's only step). Streaming (decoupled): each instance serves many
    requests on threads; default min(4, max_batch_size). Not streaming: each serves one request at a time; default
    serving.max_batch_size."""

    bls: Literal["auto", "native", "python"] = "auto"
    """What runs tensorrt_llm_bls, the text path's per-token step. native: tritongen's C++ backend
    (tritongen_bls), which detokenises each LLM response inside tritonserver (no IPC round trip into a Python
    process per token); it needs a byte-level BPE or SentencePiece byte-fallback tokenizer (checked against the
    tokenizer when planning); the library is built by `make install` (generator/tritongen/native/build.sh) and, in
    deployments, by the serving image's builder stage. python: the python BLS (any tokenizer).
    Neither does speculative decoding: neither has a draft loop, and both refuse num_draft_tokens > 0. auto: native
    when the tokenizer allows it, else python."""

    bls_accumulate_tokens: bool = False
    """tensorrt_llm_bls streams the text of all tokens so far in each response (beam width 1)."""

    max_batch_tokens: int | None = Field(None, ge=1)
    """hf runtime: tokens per continuous-batching step (prefill chunking budget). None: 512 on CPU, and on GPU
    transformers sizes it from free memory."""

    stream_interval: int = Field(1, ge=1, le=1024)
    """hf and synthetic runtimes: tokens per streamed response (the final response carries the rest). Each response
    costs the serving path the same CPU whatever it carries (tritonserver, BLS, gRPC), so N > 1 divides that cost
    by about N at the price of text arriving in bursts of N tokens (mean ITL unchanged, as trtllm-serve's
    stream_interval). tensorrtllm/trtllm: 1 (the C++ backend sends a response per generated token)."""

    stream_flush_ms: int = Field(0, ge=0, le=10000)
    """hf runtime: send a streamed request's waiting tokens at most every N ms (0: every step). Tokens come from
    decode steps, so a response goes out at the first step N ms after the previous one, with every token since:
    clients see text at a steady pace with fewer responses when steps are faster than N ms, and each step's tokens
    still when steps are slower. Combined with stream_interval, both must be met (the final response carries the
    rest)."""

    cancellation_check_period_ms: int = Field(100, ge=1, le=10000)
    """hf runtime: how often the model asks Triton whether a client cancelled; a cancelled request stops
    generating within this period plus one step (TensorRT-LLM's parameter of the same name)."""

    sampling: Literal["per_request", "greedy"] = "per_request"
    """hf runtime: `per_request` honours temperature/top_k/top_p per request (sampling processors run for every
    request of a step, greedy ones as top_k=1); `greedy` runs no sampling processors (the fast path) and rejects
    requests that ask for sampling."""

    cuda_graphs: bool | None = None
    """hf runtime: CUDA graphs for the continuous-batching steps. None: on for GPU placement, off on CPU."""

    attention: Literal["sdpa_mem_efficient", "sdpa", "eager"] | None = None
    """hf runtime attention kernels. None: `sdpa_mem_efficient` on GPU (cuDNN and flash SDPA off: cuDNN attention
    builds a plan per new shape), `sdpa` on CPU."""

    log_probs: bool = True
    """hf runtime: compute log probs so requests may ask for them (return_log_probs); false rejects those requests."""


class PlacementSection(_Section):
    device: Literal["cpu", "gpu"] = "cpu"
    """Where the LLM model runs."""

    gpu_ids: list[int] = Field(default_factory=list)
    """GPU indices used when device is gpu; empty means [0]."""

    instances_per_gpu: int = Field(1, ge=1)
    """LLM model instances per GPU (hf runtime). trtllm: 1 (the pinned release's llmapi model runs one instance per
    server; each GPU or MIG slice gets a server)."""


class SyntheticEngineSection(_Section):
    """An engine model in place of the fixed TTFT/ITL: steps whose time grows with the running batch and the prefill
    tokens, admission limited by serving.max_batch_size and the KV budget serving.kv_cache.max_tokens (prompt +
    output tokens reserved per request), so those settings have an optimum under an SLO (docs/tune.md). Defaults:
    the hf runtime's streaming manager on an H200 (docs/benchmarks.md)."""

    enabled: bool = False
    """Time tokens with the engine model (synthetic.ttft_ms and itl_ms then do not apply)."""

    step_base_ms: float = Field(24.4, ge=0)
    """Time of a step with no request and no prefill: the fixed cost of one forward pass, milliseconds."""

    per_sequence_ms: float = Field(0.153, ge=0)
    """Added step time per running request (decode), milliseconds."""

    per_prefill_token_ms: float = Field(0.004, ge=0)
    """Added step time per prompt token prefilled in the step, milliseconds."""


class SyntheticSection(_Section):
    ttft_ms: float = Field(50, ge=0)
    """Time from a request's arrival at the tensorrt_llm model to its first token."""

    itl_ms: float = Field(10, ge=0)
    """Time between two tokens of one request."""

    source: Literal["native", "python"] = "native"
    """What serves the token source: `native` (a C++ Triton backend, built by `make install` and, in deployments,
    by the serving image's builder stage; tens of thousands of tokens/s per core, so a benchmark measures the serving
    path, not the source) or `python` (the same behaviour as a python model, but its per-response IPC caps it at a
    few thousand tokens/s)."""

    engine: SyntheticEngineSection = SyntheticEngineSection()
    """The engine model (off by default: each request gets the fixed ttft_ms/itl_ms)."""


class TokenDistribution(_Section):
    mean: int = Field(ge=1)
    """Mean token count."""

    stddev: float = Field(0, ge=0)
    """Standard deviation (0 = fixed)."""


class LoadSection(_Section):
    users: int = Field(4, ge=1)
    """Concurrent Locust users (one request in flight each)."""

    spawn_rate: float = Field(4, gt=0)
    """Users started per second."""

    duration_s: float = Field(20, gt=0)
    """Run time of the load test."""

    protocol: Literal["grpc", "http", "http_stream", "openai"] = "grpc"
    """grpc = ModelStreamInfer streaming, http_stream = generate_stream (SSE), http = generate, openai = streamed
    chat completions through the OpenAI frontend."""

    input_tokens: TokenDistribution = TokenDistribution(mean=32, stddev=4)
    """Synthetic prompt length in tokens of the deployment's tokenizer."""

    output_tokens: TokenDistribution = TokenDistribution(mean=32, stddev=0)
    """Completion length; forced with min_tokens = max_tokens so lengths are deterministic."""

    prompts_file: str | None = None
    """JSONL file with {"text_input": ..., "max_tokens": ...} lines, used instead of synthetic prompts."""

    processes: int = Field(1, ge=1)
    """Locust worker processes."""

    warmup_s: float = Field(0, ge=0)
    """Seconds at the start of each load level that are not measured (batches filling, caches warming); the
    measurement window is [warmup_s, duration_s] (docs/loadtest-report.md)."""

    sweep: list[float] = Field(default_factory=list)
    """Load levels for one run each, ascending: user counts in closed loop, requests/s with request_rate.
    Empty: one level. The report gives a verdict per level and the capacity line."""

    request_rate: float | None = Field(None, gt=0)
    """Open loop: requests/s sent on the arrival schedule whatever the server's speed (users then only cap
    how many are in flight: max_concurrency). None: closed loop, `users` requests in flight."""

    arrival: Literal["constant", "poisson", "gamma"] = "poisson"
    """Open-loop arrival process: constant gaps, Poisson (exponential gaps), or gamma gaps with `burstiness`."""

    burstiness: float = Field(1.0, gt=0)
    """Shape of the gamma gaps: < 1 burstier than Poisson, 1 Poisson, > 1 smoother (CV = 1/sqrt(burstiness))."""

    max_concurrency: int | None = Field(None, ge=1)
    """Open loop: most requests in flight at once; an arrival that finds every slot busy waits (its lag is
    reported). None: 64."""

    trace_file: str | None = None
    """JSONL trace to replay instead of an arrival process: {"timestamp" (ms), "input_length" (or
    "text_input"), "output_length"} per line."""

    cancel_rate: float = Field(0, ge=0, le=1)
    """Fraction of streamed requests the client cancels on purpose, after cancel_after_ms."""

    cancel_after_ms: float = Field(100, gt=0)
    """How long after sending a request to be cancelled the client cancels it."""

    @model_validator(mode="after")
    def _load_rules(self) -> LoadSection:
        problems = []
        if self.warmup_s >= self.duration_s:
            problems.append(problem("validation.load.warmup_s", f"({self.warmup_s:g}) must be below duration_s "
                                    f"({self.duration_s:g})", "shorten the warm-up or lengthen the run"))
        if any(x <= 0 for x in self.sweep):
            problems.append(problem("validation.load.sweep", "levels must be > 0", "list e.g. [1, 2, 4]"))
        if self.request_rate is None and self.trace_file is None and any(x != int(x) for x in self.sweep):
            problems.append(problem("validation.load.sweep", "closed-loop levels are user counts",
                                    "list whole numbers, or set request_rate for request-rate levels"))
        if self.trace_file is not None and (self.request_rate is not None or self.sweep):
            problems.append(problem("validation.load.trace_file", "a trace sets its own arrival times",
                                    "drop request_rate and sweep, or the trace"))
        if problems:
            raise _Problems("\n".join(problems))
        return self


class SLOSection(_Section):
    ttft_p95_ms: float | None = Field(None, gt=0)
    """95th percentile time to first token, milliseconds."""

    itl_p95_ms: float | None = Field(None, gt=0)
    """95th percentile inter-token latency, milliseconds."""

    e2e_p99_ms: float | None = Field(None, gt=0)
    """99th percentile end-to-end request latency, milliseconds."""

    min_output_tokens_per_s: float | None = Field(None, gt=0)
    """Lowest acceptable output token throughput over the run."""

    max_error_rate: float | None = Field(0.0, ge=0, le=1)
    """Highest acceptable fraction of failed requests."""

    min_capacity: float | None = Field(None, gt=0)
    """The gate of a sweep: pass when the capacity line (highest level at which every objective holds, with
    every lower level passing) is at least this level. None: every level must pass."""


_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


class DeploySection(_Section):
    """Settings of the generated deployment files (`tritongen deploy`)."""

    storage_class: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    """Kubernetes: storageClassName of the models volume; unset uses the cluster's default class."""

    access_mode: Literal["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"] = "ReadWriteOnce"
    """Kubernetes: access mode of the models volume. ReadWriteOnce works with every default class but mounts on one
    node only; pods on several nodes (more replicas than a node holds, LeaderWorkerSet) need ReadWriteMany and a
    class that provides it (NFS, CephFS, EFS, Filestore, ...)."""

    volume_gib: int | None = Field(None, ge=1)
    """Kubernetes: size of the models volume; unset: the weights x 2.5 (checkpoint + engine) + 10 GiB."""

    checkpoint_uri: str | None = Field(None, pattern=r"^(hf://[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?|https?://\S+)$")
    """Kubernetes: where the models Job fetches the checkpoint into the volume: `hf://org/name[@revision]`
    (Hugging Face Hub; token from the optional Secret `<name>-hf-token`, key HF_TOKEN) or an http(s) URL of a
    .tar/.tar.gz archive of the checkpoint folder. Unset: the Job expects the checkpoint already in the volume at
    /models/checkpoint and fails naming this field otherwise."""

    tokenizer_uri: str | None = Field(None, pattern=r"^(hf://[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?|https?://\S+)$")
    """Kubernetes: like checkpoint_uri, for a tokenizer kept apart from the checkpoint (model.tokenizer)."""

    nodes: int = Field(1, ge=1, le=64)
    """Kubernetes: nodes one model replica spans (multi-node tensor/pipeline parallelism). Above 1 the replica is a
    LeaderWorkerSet of this many pods, one per node, each taking engine.tp_size x engine.pp_size / nodes full GPUs
    of a node like the inventory's; mpirun on the leader starts the ranks in the worker pods."""

    replicas: int | None = Field(None, ge=1)
    """Kubernetes HPA: the most server pods of each device kind (maxReplicas), e.g. what the inventory's node
    holds times the nodes of that layout; unset: what one node holds. More than one node holds needs
    access_mode ReadWriteMany (a ReadWriteOnce volume keeps every pod on one node)."""

    grace_period_s: int = Field(30, ge=10, le=3600)
    """Seconds a stopping server (and tritongen's OpenAI frontend) may take to drain: it stops taking new requests
    and finishes those in flight. Kubernetes terminationGracePeriodSeconds and compose stop_grace_period; the pod
    first waits 5 s in preStop while the Service stops sending it traffic, then tritonserver gets SIGTERM and
    waits up to grace_period_s - 8 s for requests in flight (--exit-timeout-secs), leaving 3 s to exit before the
    kill. Raise it above the longest generation a client may wait for (max tokens x ITL)."""

    monitor_labels: dict[str, str] = {"release": "prometheus"}
    """Kubernetes: labels of the PodMonitor, for the Prometheus Operator's podMonitorSelector (kube-prometheus-stack
    selects `release: <helm release name>`)."""

    @field_validator("monitor_labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not (_LABEL_KEY.fullmatch(key) and _LABEL_VALUE.fullmatch(text)):
                raise PydanticCustomError("label", "'{key}: {text}' is not a Kubernetes label (keys [prefix/]name, "
                                          "values up to 63 of [A-Za-z0-9._-])", {"key": key, "text": text})
        return value

    hpa_waiting_requests: float = Field(2, gt=0)
    """Kubernetes HPA: scale out when requests waiting for a batch slot exceed this per pod (average)."""

    hpa_kv_cache_utilization: float = Field(0.85, gt=0, le=1)
    """Kubernetes HPA (tensorrtllm): scale out when the paged KV cache's used-block fraction exceeds this."""

    hpa_requests_per_s: float = Field(4, gt=0)
    """Kubernetes HPA (trtllm): scale out when a pod receives more requests per second than this (average). The
    llmapi model hands every request to its engine at once and exports no gauge of its own, so its arrival rate
    is the signal that moves; set it from the load test's capacity line (open loop, requests/s per pod)."""


class ValidationSection(_Section):
    load: LoadSection = LoadSection()
    """Load profile for `tritongen loadtest` / `up`."""

    slo: SLOSection = SLOSection()
    """Service-level objectives; the load test's exit code says whether they hold."""


class OpenAIFrontendSection(_Section):
    enabled: bool = False
    """`serve`, `up` and deploy targets start the OpenAI-compatible frontend without being asked (`--openai`)."""

    port: int = Field(9000, ge=1, le=65535)
    """HTTP port of the OpenAI API."""

    served_model_name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
    """The public model name clients pass as `model` (the only name /v1/models lists); default: the spec's name."""

    triton_model: Literal["ensemble", "tensorrt_llm_bls"] = "tensorrt_llm_bls"
    """The Triton model the frontend calls. tensorrt_llm_bls (the ensemble's only step, same tensors): a client that
    disconnects cancels its generation; through `ensemble`, Triton checks cancellation only between steps, so a
    dropped stream keeps generating to its end. Runtime trtllm: always tensorrt_llm (its only model)."""

    default_max_tokens: int | None = Field(None, ge=1)
    """Completion length when a request sets none; default: serving.max_tokens_default."""

    implementation: Literal["tritongen", "triton"] = "tritongen"
    """Deploy targets: tritongen's frontend (fronts any Triton, remote too), or Triton's own python/openai
    frontend inside the NGC container (in-process with the server)."""

    workers: int | None = Field(None, ge=1, le=64)
    """Worker processes of tritongen's frontend (sharing its port; each with its own gRPC channel, tokenizer and
    event loop). Unset: planned from the streams the servers carry at once (serving.max_batch_size x server
    groups), one worker per 48 streams, at most 16; `serve` lowers a planned count to half its host's cores, and
    a deployment's frontend pod requests one core per worker (docs/deploy.md, "OpenAI frontend workers").
    `tritongen serve --openai-workers N` overrides both."""


class FrontendSection(_Section):
    openai: OpenAIFrontendSection = OpenAIFrontendSection()
    """The OpenAI-compatible HTTP API in front of the deployment."""

    chat_template: str | None = None
    """Jinja chat template file (relative to the spec) used instead of the tokenizer's own. The frontend applies
    it; preprocessing never does, so prompts are templated exactly once."""

    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Name of the environment variable holding the API key clients must send (`Authorization: Bearer ...`).
    Only the name is stored in rendered files, never the key."""


_NAME = re.compile(r"[a-z]([a-z0-9._-]{0,38}[a-z0-9])?")
_NAME_RULE = ("must start with a lowercase letter, end with a letter or digit and hold at most 40 lowercase "
              "letters, digits, '.', '_', '-' (Kubernetes object names)")


def _name_example(value: str) -> str:
    core = re.sub(r"[^a-z0-9._-]", "-", value.lower()).strip("._-")[:38].strip("._-") or "model"
    return core if core[0].isalpha() else f"m-{core}"[:40]


class Spec(_Section):
    """A tritongen deployment spec."""

    version: Literal[1] = 1
    """Spec format version."""

    name: str
    """Deployment name: a lowercase letter first, then lowercase letters, digits, `.`, `_`, `-`, ending in a letter
    or digit, at most 40 characters. Used for server groups and deploy files; Kubernetes objects and compose
    services use it with `.` and `_` mapped to `-` (a DNS-1035 label, so Service names are valid by construction,
    with room for suffixes such as `-mig-3g-71gb`)."""

    runtime: RuntimeName = Field("hf", description=RUNTIME_CHOICES)
    # Described by the runtimes themselves (tritongen.runtimes.CHOICES), so a new runtime documents itself here.

    model: ModelSection
    """The checkpoint and tokenizer."""

    engine: EngineSection = EngineSection()
    """TensorRT-LLM engine build (runtime tensorrtllm)."""

    llmapi: LlmApiSection = LlmApiSection()
    """LLM-API model settings (runtime trtllm)."""

    serving: ServingSection = ServingSection()
    """Triton serving settings shared by all runtimes."""

    placement: PlacementSection = PlacementSection()
    """Where the model runs."""

    synthetic: SyntheticSection = SyntheticSection()
    """Token timing of the synthetic runtime (runtime `synthetic` only)."""

    validation: ValidationSection = ValidationSection()
    """Load test and SLOs."""

    frontend: FrontendSection = FrontendSection()
    """The OpenAI-compatible frontend."""

    deploy: DeploySection = DeploySection()
    """Generated deployment files (compose, Kubernetes)."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        # Rejected rather than mapped: a name that changed on the way into Kubernetes would not match the one in
        # reports, labels and server groups.
        if not _NAME.fullmatch(value):
            raise PydanticCustomError("spec_name", _NAME_RULE + " (got '{value}'); rename it, e.g. '{example}'",
                                      {"value": value, "example": _name_example(value)})
        return value

    @model_validator(mode="after")
    def _cross_field(self) -> Spec:
        problems = []
        if self.placement.device == "cpu" and self.placement.gpu_ids:
            problems.append(problem("placement.gpu_ids", "is set but placement.device is cpu",
                                    "set placement.device: gpu or remove gpu_ids"))
        rt = runtime(self.runtime)
        if not rt.runs_on_cpu and self.placement.device == "cpu":
            problems.append(problem("placement.device", f"cpu cannot run the {self.runtime} runtime",
                                    "set placement.device: gpu, or runtime: hf"))
        if not rt.honours_stream_interval and self.serving.stream_interval != 1:
            problems.append(problem("serving.stream_interval", f"({self.serving.stream_interval}) is honoured by the "
                                    f"{names(lambda r: r.honours_stream_interval)} runtimes only; the {self.runtime} "
                                    "runtime sends a response per generated token", "remove it (or set 1)"))
        if not rt.honours_stream_flush and self.serving.stream_flush_ms:
            problems.append(problem("serving.stream_flush_ms", f"({self.serving.stream_flush_ms}) is honoured by the "
                                    f"{names(lambda r: r.honours_stream_flush)} runtime only", "remove it (or set 0)"))
        if self.engine.max_input_len >= self.engine.max_seq_len:
            problems.append(problem("engine.max_input_len", f"({self.engine.max_input_len}) must be below "
                                    f"engine.max_seq_len ({self.engine.max_seq_len})",
                                    "raise max_seq_len or lower max_input_len"))
        if problems:
            raise ValueError("\n".join(problems))
        return self


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names valid at `loc` (for a did-you-mean hint)."""
    current: Any = model
    for part in loc[:-1]:
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = field.annotation
    return list(getattr(current, "model_fields", {}))


def _format_errors(err: ValidationError) -> list[str]:
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        path = clip(".".join(str(p) for p in loc) or "(spec)", 120)
        if e["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(loc[-1]), _field_names(Spec, loc), n=1)
            fix = f"did you mean `{close[0]}`?" if close else "remove it (see `tritongen validate --explain`)"
            lines.append(problem(path, "unknown field", fix))
        elif e["type"] == "missing":
            lines.append(problem(path, "is required", "add it to the spec"))
        elif e["type"] == "spec_name":
            lines.append(f"{path}: {e['msg']}")
        elif e["type"] == "value_error" and (not loc or isinstance(e["ctx"]["error"], _Problems)):
            # Cross-field problems are already formatted, one per line.
            lines.extend(str(e["ctx"]["error"]).splitlines())
        else:
            given = e.get("input")
            got = f" (got {shown(given)})" if not isinstance(given, (dict, list)) else ""
            # Lower-case only the first letter: the rest may quote a pattern or a value exactly.
            msg = e["msg"][:1].lower() + e["msg"][1:]
            lines.append(problem(path, f"{clip(msg)}{got}", "fix the value"))
    return lines


def parse_spec(data: Any) -> Spec:
    """Validate a mapping into a Spec, raising SpecError with one line per problem."""
    if not isinstance(data, dict):
        raise SpecError(problem("(spec)", "must be a YAML mapping", "start from examples/tiny-cpu.yaml"))
    try:
        return Spec.model_validate(data)
    except ValidationError as err:
        raise SpecError(_format_errors(err)) from None


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec file."""
    from tritongen.spec.source import read_yaml

    p = Path(path)
    if p.is_dir():
        inside = sorted(str(f) for f in p.glob("*.y*ml"))[:3]
        raise SpecError(problem(str(p), "is a folder, not a spec file", "pass the path of a YAML spec"
                                + (f" (this folder holds {', '.join(inside)})" if inside else "")))
    if not p.is_file():
        raise SpecError(problem(str(p), "spec file not found", "pass the path of a YAML spec"))
    return parse_spec(read_yaml(p))


def explain(model: type[BaseModel] = Spec, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted path, type, default, doc) for every field, depth first, for docs and `validate --explain`."""
    rows = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows.append((path, "section", "", field.description or ""))
            rows.extend(explain(ann, path + "."))
            continue
        default = "required" if field.is_required() else repr(field.get_default(call_default_factory=True))
        type_name = str(ann).replace("typing.", "") if not isinstance(ann, type) else ann.__name__
        rows.append((path, type_name, default, (field.description or "").replace("\n", " ")))
    return rows


def explain_markdown() -> str:
    """The spec reference as a Markdown table (docs/reference.md; a test keeps the two equal)."""
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for path, type_name, default, doc in explain():
        if type_name == "section":
            lines.append(f"| **{path}** | section | | {doc} |")
        else:
            lines.append(f"| `{path}` | `{type_name}` | `{default}` | {doc.replace('|', '/')} |")
    return "\n".join(lines) + "\n"

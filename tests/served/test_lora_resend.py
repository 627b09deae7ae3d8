"""The python BLS's answer to a LoRA cache miss of the tensorrt_llm model (tritongen.served.lora_resend): resend once
with the adapter's converted weights, as NVIDIA's docs/lora.md tells a client to.

TensorRT-LLM cannot run on this machine and the synthetic runtime has no LoRA cache to miss, so the downstream model
is a stand-in: in the unit tests, a sequence of responses, the first of them TensorRT-LLM's cache-miss error (its
text from PeftCacheManager::addRequestPeft, cited in the module); in the tests against the real tritonserver, the
probe model in place of tensorrt_llm, playing its LoRA cache, behind each BLS backend (the native tritongen_bls,
whose resend is generator/tritongen/native/bls/lora_resend.h, and the python model)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
import types
import urllib.request

import numpy as np
import pytest

from streaming_text import ROOT, grpc_responses, render_repo, start_server

from tritongen.served.error_kinds import RequestError
from tritongen.served.lora_resend import CONFIG, WEIGHTS, cache_miss, with_resend

MISS = "Encountered an error in forward: LoRA task {} not found in cache. Please send LoRA weights with request"


class _Response:
    def __init__(self, error=None, tokens=()):
        self.error_text, self.tokens = error, list(tokens)


def _error(response):
    return response.error_text


@pytest.fixture
def lora_dir(tmp_path):
    rng = np.random.default_rng(0)
    for task in (1, 2):
        (tmp_path / str(task)).mkdir()
        np.save(tmp_path / str(task) / WEIGHTS, rng.standard_normal((1, 4, 10)).astype(np.float16))
        np.save(tmp_path / str(task) / CONFIG, np.array([[[1, 0, 4], [3, 0, 4], [1, 1, 4], [3, 1, 4]]], np.int32))
    return tmp_path


def test_the_miss_text_is_tensorrt_llms():
    assert cache_miss(MISS.format(7)) == 7
    assert cache_miss("LoRA task 7 not found") is None
    assert cache_miss("Cache is full. There are no done tasks to evict") is None
    assert cache_miss(None) is None


def test_a_miss_is_answered_by_one_resend_with_the_converted_adapter(lora_dir):
    sent = []

    def resend(weights, config):
        sent.append((weights, config))
        return iter([_Response(tokens=[5]), _Response(tokens=[6])])

    out = list(with_resend(iter([_Response(MISS.format(2))]), np.array([2], np.uint64), str(lora_dir), _error, resend))
    assert [r.tokens for r in out] == [[5], [6]]
    assert len(sent) == 1
    weights, config = sent[0]
    assert weights.dtype == np.float16 and weights.shape == (1, 4, 10)
    np.testing.assert_array_equal(weights, np.load(lora_dir / "2" / WEIGHTS))
    assert config.dtype == np.int32 and config.tolist() == np.load(lora_dir / "2" / CONFIG).tolist()


def test_a_second_miss_is_passed_on_not_resent_again(lora_dir):
    calls = []

    def resend(weights, config):
        calls.append(1)
        return iter([_Response(MISS.format(1))])

    out = list(with_resend(iter([_Response(MISS.format(1))]), np.array([1]), str(lora_dir), _error, resend))
    assert len(calls) == 1 and [r.error_text for r in out] == [MISS.format(1)]


@pytest.mark.parametrize("first, task_ids, folder", [
    (_Response(tokens=[1]), [2], True),  # no miss
    (_Response("some other error"), [2], True),
    (_Response(MISS.format(2)), [1], True),  # a miss of another task than this request's
    (_Response(MISS.format(2)), None, True),  # the request named no task
    (_Response(MISS.format(2)), [2], False),  # no converted adapters (lora_dir unset)
])
def test_everything_else_passes_through(lora_dir, first, task_ids, folder):
    def resend(weights, config):
        raise AssertionError("resent")

    rest = _Response(tokens=[9])
    out = list(with_resend(iter([first, rest]), None if task_ids is None else np.array(task_ids),
                           str(lora_dir) if folder else "", _error, resend))
    assert out == [first, rest]


def test_a_task_without_converted_files_is_a_bad_request_naming_the_input(lora_dir):
    with pytest.raises(RequestError) as err:
        list(with_resend(iter([_Response(MISS.format(9))]), np.array([9]), str(lora_dir), _error,
                         lambda w, c: iter([])))
    assert str(err.value) == (
        f"[bad_request:lora_task_id] lora_task_id: 9 is not in the tensorrt_llm model's LoRA cache and "
        f"{lora_dir / '9'} has no converted adapter ({WEIGHTS}, {CONFIG}); use a task id of the deployment's adapters, "
        "or run `tritongen build` to convert them")


class _BackendIterator:
    """The python backend's ResponseIterator: iter() on it once its final response was read starts it over."""

    def __init__(self, responses):
        self.responses, self.at = list(responses), 0

    def __iter__(self):
        if self.at >= len(self.responses):
            self.at = 0
        return self

    def __next__(self):
        if self.at >= len(self.responses):
            raise StopIteration
        self.at += 1
        return self.responses[self.at - 1]


@pytest.mark.parametrize("first", [_Response(tokens=[1]), _Response(MISS.format(2))])
def test_each_response_is_passed_on_once_from_the_backends_iterator(lora_dir, first):
    resent = _Response(tokens=[5])
    out = list(with_resend(_BackendIterator([first]), np.array([2]), str(lora_dir), _error,
                           lambda weights, config: _BackendIterator([resent])))
    assert out == [resent if first.error_text else first]


def test_a_batch_of_one_task_gets_the_weights_per_row(lora_dir):
    sent = []
    list(with_resend(iter([_Response(MISS.format(1))]), np.array([1, 1, 1]), str(lora_dir), _error,
                     lambda w, c: sent.append((w, c)) or iter([])))
    assert sent[0][0].shape == (3, 4, 10) and sent[0][1].shape == (3, 4, 3)


@pytest.fixture
def bls_module():
    # bls.py imports the python backend's utils; a stand-in records the requests it makes to tensorrt_llm.
    before = set(sys.modules)
    utils = types.ModuleType("triton_python_backend_utils")

    class Tensor:
        def __init__(self, name, value):
            self.name, self.value = name, value

    class InferenceRequest:
        made: list = []
        answers: list = []

        def __init__(self, model_name, inputs, request_id, requested_output_names):
            self.inputs = {t.name: t.value for t in inputs}
            InferenceRequest.made.append(self)

        def exec(self, decoupled=False):
            return iter(InferenceRequest.answers.pop(0))

    utils.Tensor, utils.InferenceRequest = Tensor, InferenceRequest
    utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
    saved = sys.modules.get("triton_python_backend_utils")
    sys.modules["triton_python_backend_utils"] = utils
    # A BLS imported earlier in this process (against the real utils) is set aside: this one binds the stand-in.
    import importlib

    import tritongen.served

    earlier = sys.modules.pop("tritongen.served.bls", None)
    if hasattr(tritongen.served, "bls"):
        delattr(tritongen.served, "bls")
    bls = importlib.import_module("tritongen.served.bls")

    yield bls, InferenceRequest
    # The BLS imported against the stand-in leaves, so a later test imports it against the real utils.
    for name in (set(sys.modules) - before) | {"tritongen.served.bls"}:
        if name.startswith("tritongen.served"):
            sys.modules.pop(name, None)
    if hasattr(tritongen.served, "bls"):
        delattr(tritongen.served, "bls")
    if earlier is not None:
        sys.modules["tritongen.served.bls"] = earlier
        tritongen.served.bls = earlier
    if saved is not None:
        sys.modules["triton_python_backend_utils"] = saved
    else:
        del sys.modules["triton_python_backend_utils"]


class _LlmResponse:
    def __init__(self, error=None):
        self._error = error

    def has_error(self):
        return self._error is not None

    def error(self):
        return types.SimpleNamespace(message=lambda: self._error)


def test_the_bls_resends_the_request_it_made_with_the_weights_added(bls_module, lora_dir):
    bls, request = bls_module
    model = bls.TritonPythonModel.__new__(bls.TritonPythonModel)
    model.llm_name, model.decoupled, model.lora_dir = "tensorrt_llm", True, str(lora_dir)
    model.wiring = types.SimpleNamespace(passed_outputs=())
    ok = _LlmResponse()
    request.made.clear()
    request.answers[:] = [[_LlmResponse(MISS.format(2))], [ok]]
    inputs = [bls.pb_utils.Tensor("input_ids", np.array([[1, 2]])),
              bls.pb_utils.Tensor("lora_task_id", np.array([[2]], np.uint64))]
    out = list(model._exec_llm(inputs, "r1", np.array([2], np.uint64), False))
    assert out == [ok]
    first, second = request.made
    assert set(first.inputs) == {"input_ids", "lora_task_id"}
    assert set(second.inputs) == {"input_ids", "lora_task_id", "lora_weights", "lora_config"}
    np.testing.assert_array_equal(second.inputs["lora_weights"], np.load(lora_dir / "2" / WEIGHTS))

    # A request that carries its own weights, or a deployment without converted adapters: no resend.
    request.made.clear()
    request.answers[:] = [[_LlmResponse(MISS.format(2))]]
    assert [r.has_error() for r in model._exec_llm(inputs, "r2", np.array([2], np.uint64), True)] == [True]
    assert len(request.made) == 1


# ------------------------------------------------------------------ both BLS backends in the real tritonserver
# The probe (tests/fixtures/probe_llm) stands in for tensorrt_llm under the config tritongen renders, and with its
# lora_cache.json plays TensorRT-LLM's LoRA cache: a task it has not cached fails with the cache-miss text until a
# request brings the task's weights. Task 1's responses to a resend are slow (weights_token_s), for cancellation.
PROBE = ROOT / "tests" / "fixtures" / "probe_llm" / "model.py"
OTHER_ERROR = "LoRA cache is full: there are no done tasks to evict"


def _repo(tiny_model, tmp, bls: str):
    """A repository whose BLS is `bls`, the probe in place of tensorrt_llm; (repository, adapters folder)."""
    repo = render_repo(tiny_model, tmp / "repo", bls=bls)
    shutil.copy(PROBE, repo / "tensorrt_llm" / "1" / "model.py")
    adapters = tmp / "adapters"
    rng = np.random.default_rng(1)
    for task in (1, 2, 4):
        (adapters / str(task)).mkdir(parents=True)
        np.save(adapters / str(task) / WEIGHTS, rng.standard_normal((1, 4, 10)).astype(np.float16))
        np.save(adapters / str(task) / CONFIG, np.array([[[1, 0, 4], [3, 0, 4], [1, 1, 4], [3, 1, 4]]], np.int32))
    bls_config = repo / "tensorrt_llm_bls" / "config.pbtxt"
    # The tensorrtllm runtime renders lora_dir for its adapters (runtimes/tensorrtllm); the hf repository here has none.
    bls_config.write_text(bls_config.read_text()
                          + f'parameters: {{\n  key: "lora_dir"\n  value: {{ string_value: "{adapters}" }}\n}}\n')
    return repo, adapters


@pytest.fixture(scope="module", params=["native", "python"])
def served(request, tmp_path_factory, tiny_model):
    """(server, probe log, adapters folder, the probe's cache file) of a repository whose BLS is `request.param`."""
    tmp = tmp_path_factory.mktemp(f"lora-resend-{request.param}")
    repo, adapters = _repo(tiny_model, tmp, request.param)
    server = start_server(repo, tmp / "tritonserver.log")
    yield server, repo / "tensorrt_llm" / "probe.jsonl", adapters, repo / "tensorrt_llm" / "lora_cache.json"
    server.stop()


def _cache(path, **cache) -> None:
    path.write_text(json.dumps({"cached": [], "uncacheable": [4], "errors": {"5": OTHER_ERROR},
                                "weights_token_s": 0, **cache}))


def _llm_requests(log) -> list[dict]:
    """What reached tensorrt_llm since the last call, `stop` requests left out."""
    if not log.exists():
        return []
    records = [json.loads(line) for line in log.read_text().splitlines()]
    log.unlink()
    return [r for r in records if "stop" not in r["inputs"]]


def _bls(stream: bool, task: int | None = None, **extra) -> dict:
    inputs = {"text_input": np.array([[b"The quick brown fox"]], np.object_), "max_tokens": np.array([[3]], np.int32),
              "stream": np.array([[stream]]), **extra}
    if task is not None:
        inputs["lora_task_id"] = np.array([[task]], np.uint64)
    return inputs


def _text(responses) -> str:
    return "".join(r.as_numpy("text_output")[0].decode() for r in responses)


@pytest.mark.integration
@pytest.mark.parametrize("stream", [False, True])
def test_a_miss_is_answered_by_one_resend_and_its_responses_as_they_come(served, stream):
    server, log, adapters, cache = served
    _cache(cache)
    _llm_requests(log)
    plain = grpc_responses(server.grpc_url, "tensorrt_llm_bls", _bls(stream))
    _llm_requests(log)
    responses = grpc_responses(server.grpc_url, "tensorrt_llm_bls", _bls(stream, task=2))
    assert _text(responses) == _text(plain) and len(responses) == len(plain) == (3 if stream else 1)
    first, resent = _llm_requests(log)
    assert "lora_weights" not in first["inputs"] and first["inputs"]["lora_task_id"]["values"] == [2]
    # The same request, with the converted adapter added
    assert set(resent["inputs"]) == set(first["inputs"]) | {"lora_weights", "lora_config"}
    assert all(resent["inputs"][k] == v for k, v in first["inputs"].items())
    weights, config = np.load(adapters / "2" / WEIGHTS), np.load(adapters / "2" / CONFIG)
    assert resent["inputs"]["lora_weights"]["dtype"] == "float16"
    assert resent["inputs"]["lora_weights"]["shape"] == [1, 4, 10]
    assert resent["inputs"]["lora_weights"]["values"] == weights.reshape(-1)[:8].tolist()
    assert resent["inputs"]["lora_weights"]["sum"] == float(weights.astype(np.float64).sum())
    assert resent["inputs"]["lora_config"] == {"dtype": "int32", "shape": [1, 4, 3],
                                               "values": config.reshape(-1)[:8].tolist(), "sum": float(config.sum())}
    # The probe cached the task from the resend: the next request is answered at once.
    again = grpc_responses(server.grpc_url, "tensorrt_llm_bls", _bls(stream, task=2))
    assert _text(again) == _text(plain) and len(again) == len(plain)
    assert len(_llm_requests(log)) == 1


@pytest.mark.integration
@pytest.mark.parametrize("task, extra, error, sent", [
    (5, {}, f"tensorrt_llm: {OTHER_ERROR}", 1),  # any other error
    (4, {}, "tensorrt_llm: " + MISS.format(4), 2),  # a second miss
    # a request that brought its own weights is not resent
    (4, {"lora_weights": np.ones((1, 4, 10), np.float16), "lora_config": np.ones((1, 4, 3), np.int32)},
     "tensorrt_llm: " + MISS.format(4), 1),
])
def test_everything_else_reaches_the_client_unchanged(served, task, extra, error, sent):
    server, log, _, cache = served
    _cache(cache)
    _llm_requests(log)
    with pytest.raises(RuntimeError) as err:
        grpc_responses(server.grpc_url, "tensorrt_llm_bls", _bls(True, task=task, **extra))
    assert str(err.value).endswith(error)
    assert len(_llm_requests(log)) == sent


@pytest.mark.integration
def test_a_task_without_converted_files_is_a_bad_request_naming_the_task_and_folder(served):
    server, log, adapters, cache = served
    _cache(cache)
    with pytest.raises(RuntimeError) as err:
        grpc_responses(server.grpc_url, "tensorrt_llm_bls", _bls(True, task=9))
    assert str(err.value) == (
        f"[bad_request:lora_task_id] lora_task_id: 9 is not in the tensorrt_llm "
        f"model's LoRA cache and {adapters / '9'} has no converted adapter ({WEIGHTS}, {CONFIG}); use a task id of "
        "the deployment's adapters, or run `tritongen build` to convert them")
    assert len(_llm_requests(log)) == 1


@pytest.mark.integration
def test_a_client_that_leaves_during_the_resend_ends_it_with_one_final(served):
    """The resend streams a response every 2 s; the client leaves after the first. The BLS ends the request once (one
    completion in its statistics), stops the resend by its id, and serves on."""
    server, log, _, cache = served
    _cache(cache, weights_token_s=2)
    _llm_requests(log)
    before = _completions(server)
    assert _first_ending(server.grpc_url, _bls(True, task=1), after_first=lambda: "cancel") == (1, "cancelled", "")
    deadline = time.monotonic() + 30
    while _completions(server) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    # The probe sees the cancellation within its 2 s between responses, then takes the `stop` request.
    while time.monotonic() < deadline:
        records = [json.loads(line) for line in log.read_text().splitlines()]
        resent = [r["request_id"] for r in records if "lora_weights" in r["inputs"]]
        if resent and resent[0] in {r["request_id"] for r in records if "stop" in r["inputs"]}:
            break
        time.sleep(0.1)
    assert len(resent) == 1 and resent[0] in {r["request_id"] for r in records if "stop" in r["inputs"]}, records
    assert _completions(server) == before + 1  # one final, also once the probe has ended the resend
    _cache(cache)
    assert len(grpc_responses(server.grpc_url, "tensorrt_llm_bls", _bls(True, task=1))) == 3


@pytest.mark.integration
@pytest.mark.serial  # the server's exit within its grace period
@pytest.mark.parametrize("bls", ["native", "python"])
def test_a_server_stopping_during_the_resend_ends_it_with_one_final(tiny_model, tmp_path, bls):
    """SIGTERM while the resend streams (a response every 3 s): the request ends once, and the server exits within
    its grace period. The native BLS ends it after its 1 s drain with its stopping error; the python BLS, which has
    no drain of its own, lets the resend finish."""
    from tritongen.serve import TritonServer

    repo, _ = _repo(tiny_model, tmp_path, bls)
    _cache(repo / "tensorrt_llm" / "lora_cache.json", weights_token_s=3)
    server = TritonServer(repo, log_path=tmp_path / "tritonserver.log", grace_s=12, supervise=False,
                          env={**os.environ, "TRITONGEN_DRAIN_S": "1"}).start(300)
    try:
        stop = lambda: os.kill(server.process.pid, signal.SIGTERM)  # noqa: E731 (as a container runtime stops it)
        responses, ending, message = _first_ending(server.grpc_url, _bls(True, task=1), after_first=stop)
        code = server.process.wait(timeout=60)
    finally:
        server.stop(grace=5)
    assert code == 0, server.log_tail()
    if bls == "native":
        assert (responses, ending) == (1, "error") and "the server is stopping" in message, message
    else:
        assert (responses, ending) == (3, "final"), message


def _first_ending(url: str, inputs: dict, after_first) -> tuple[int, str, str]:
    """Streams one request to tensorrt_llm_bls and calls `after_first` on its first response (it returns "cancel"
    to leave then). (responses read, how it ended: final | error | cancelled, the error's message)."""
    import queue

    import tritonclient.grpc as grpcclient

    from streaming_text import grpc_tensor

    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    responses, ending = 0, ""
    try:
        client.async_stream_infer("tensorrt_llm_bls", [grpc_tensor(k, v) for k, v in inputs.items()],
                                  enable_empty_final_response=True)
        while True:
            result, error = results.get(timeout=60)
            if error is not None:
                ending = "error"
                return responses, ending, str(error)
            responses += bool(result.get_response().outputs)
            if responses == 1 and after_first() == "cancel":
                ending = "cancelled"
                return responses, ending, ""
            final = result.get_response().parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                ending = "final"
                return responses, ending, ""
    finally:
        client.stop_stream(cancel_requests=ending in ("cancelled", ""))
        client.close()


def _completions(server) -> int:
    """Requests tensorrt_llm_bls has ended (each counted once, at its final response)."""
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/tensorrt_llm_bls/stats", timeout=30) as r:
        stats = json.loads(r.read())["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"]) + int(stats["fail"]["count"])

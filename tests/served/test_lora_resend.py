"""The python BLS's answer to a LoRA cache miss of the tensorrt_llm model (tritongen.served.lora_resend): resend once
with the adapter's converted weights, as NVIDIA's docs/lora.md tells a client to.

TensorRT-LLM cannot run on this machine and the synthetic runtime has no LoRA cache to miss, so the downstream model
is a stand-in: a sequence of responses, the first of them TensorRT-LLM's cache-miss error (its text from
PeftCacheManager::addRequestPeft, cited in the module)."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

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

# Shipped by tritongen. The BLS's answer to a LoRA cache miss of the tensorrt_llm model: resend with the weights.
"""A request that names only `lora_task_id` fails in TensorRT-LLM when the task is not in its LoRA cache; NVIDIA's
protocol (tensorrtllm_backend docs/lora.md) is that the client then sends the request again with `lora_weights` and
`lora_config`. The BLS is that client for the tensorrt_llm model: on the miss it resends once with the adapter's
converted tensors from the folder the model prefetches (lora_prefetch_dir: <task id>/model.lora_weights.npy and
model.lora_config.npy, written by `tritongen build`), and passes the second answer on as it comes.

The error text is TensorRT-LLM's PeftCacheManager::addRequestPeft (NVIDIA/TensorRT-LLM
cpp/tensorrt_llm/batch_manager/peftCacheManager.cpp, index copy 9df6d722; not tied to the 1.2.1 tag):
"LoRA task <id> not found in cache. Please send LoRA weights with request". The backend may put words in front.
"""

import os
import re

from .error_kinds import BAD_REQUEST, RequestError

CACHE_MISS = re.compile(r"LoRA task ([0-9]+) not found in cache\. Please send LoRA weights with request")
WEIGHTS, CONFIG = "model.lora_weights.npy", "model.lora_config.npy"


def cache_miss(message):
    """The task id of a LoRA cache-miss error message; None for any other message."""
    found = CACHE_MISS.search(message or "")
    return None if found is None else int(found.group(1))


def adapter_tensors(lora_dir, task_id, batch):
    """(lora_weights float16 [batch, rows, width], lora_config int32 [batch, rows, 3]) of a task's converted adapter."""
    import numpy as np

    folder = os.path.join(lora_dir, str(task_id))
    try:
        weights = np.load(os.path.join(folder, WEIGHTS))
        config = np.load(os.path.join(folder, CONFIG))
    except OSError:
        raise RequestError(f"lora_task_id: {task_id} is not in the tensorrt_llm model's LoRA cache and {folder} "
                           f"has no converted adapter ({WEIGHTS}, {CONFIG}); use a task id of the deployment's "
                           "adapters, or run `tritongen build` to convert them", BAD_REQUEST, "lora_task_id") from None
    weights = weights.reshape(-1, *weights.shape[-2:]).astype(np.float16)
    config = config.reshape(-1, *config.shape[-2:]).astype(np.int32)
    return np.repeat(weights[:1], batch, axis=0), np.repeat(config[:1], batch, axis=0)


def with_resend(responses, task_ids, lora_dir, error_of, resend):
    """The LLM's responses, or, when the first is the cache-miss error for the request's task, the responses of one
    resend. `task_ids`: the request's lora_task_id values (None: it named none); `error_of(response)`: its error
    message or None; `resend(weights, config)`: the same request again with the two tensors, its responses."""
    it = iter(responses)
    first = next(it, None)
    if first is None:
        return
    missed = cache_miss(error_of(first))
    ids = set() if task_ids is None else {int(t) for t in task_ids}
    if missed is None or not lora_dir or ids != {missed}:
        yield first
        yield from _rest(it)
        return
    for _ in _rest(it):  # the failed request's error is its final response; nothing else is expected
        pass
    weights, config = adapter_tensors(lora_dir, missed, len(task_ids))
    yield from resend(weights, config)


def _rest(it):
    """The responses of `it` not read yet. By next() alone: iter() on the python backend's ResponseIterator once it
    has its final response starts it over from the first (python_backend src/pb_response_iterator.cc, Iter), so
    `yield from it` would send a one-response answer twice."""
    while True:
        try:
            response = next(it)
        except StopIteration:
            return
        yield response

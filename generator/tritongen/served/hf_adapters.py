# Shipped by tritongen, next to model.py of the hf runtime's `tensorrt_llm` model.
"""LoRA adapters of the hf runtime: loaded with PEFT when the model loads, chosen per request by `lora_task_id`,
and run together in one batch with PEFT's mixed-adapter forward (one adapter name per row, `__base__` for none).

transformers' continuous batching packs the tokens of every request in a step into one row ([1, T, hidden]),
while PEFT picks an adapter per row. So while a step mixes adapters, each LoRA layer sees its input as
[T, 1, hidden] with one adapter name per token (the adapter of the request that token belongs to) and its output
is turned back; a step whose requests all use one adapter (or none) keeps its one row and that one name. The names
per token come from the batch the batch processor has just prepared: its requests in order, each with its query
length, padding tokens last (`__base__`).
"""

import json

BASE = "__base__"
"""PEFT's adapter name for "no adapter" in a mixed batch."""


def parse(value):
    """The model parameter `lora_adapters` (JSON list of {task_id, name, path}) as {task_id: (name, path)}."""
    if not value:
        return {}
    entries = json.loads(value)
    return {int(e["task_id"]): (str(e["name"]), str(e["path"])) for e in entries}


class Adapters:
    """The adapters loaded into one model, and the adapter of every request in flight."""

    def __init__(self, model, adapters):
        """Load `adapters` ({task_id: (name, path)}) into `model` in place (PEFT injects its LoRA layers into the
        model's modules, so the model continuous batching runs is the adapted one) and hook its LoRA layers."""
        from peft import PeftModel
        from peft.tuners.lora import LoraLayer

        self.names = {task_id: name for task_id, (name, _) in adapters.items()}
        ordered = sorted(adapters.items())
        (_, (first, path)), rest = ordered[0], ordered[1:]
        self.peft = PeftModel.from_pretrained(model, path, adapter_name=first, is_trainable=False)
        for _, (name, path) in rest:
            self.peft.load_adapter(path, adapter_name=name, is_trainable=False)
        self.peft.eval()
        self.by_request = {}
        self.current = [BASE]
        self.mixed = False
        self.hooks = []
        for module in model.modules():
            if isinstance(module, LoraLayer):
                self.hooks.append(module.register_forward_pre_hook(self._before, with_kwargs=True))
                self.hooks.append(module.register_forward_hook(self._after))

    def describe(self):
        """Known task ids, for an error message: `0 (the base model), 1 (name), ...`."""
        return ", ".join(["0 (the base model)"] + [f"{i} ({n})" for i, n in sorted(self.names.items())])

    def name_of(self, task_id):
        """The adapter name of a task id (0: the base); KeyError for an unknown id."""
        return BASE if task_id == 0 else self.names[task_id]

    def assign(self, request_id, name):
        self.by_request[request_id] = name

    def release(self, request_id):
        self.by_request.pop(request_id, None)

    def install(self, processor):
        """Learn each step's tokens per request where the batch processor prepares the step's tensors."""
        io = processor.inputs_and_outputs
        prepare = io.prepare_batch_tensors

        def prepare_with_adapters(requests_in_batch, *args, **kwargs):
            names = []
            for future in requests_in_batch:
                names.extend([self.by_request.get(future.state.request_id, BASE)] * future.query_length)
            self.mixed = len(set(names)) > 1
            self.current = names if self.mixed else names[:1] or [BASE]
            return prepare(requests_in_batch, *args, **kwargs)

        io.prepare_batch_tensors = prepare_with_adapters

    # PEFT's LoRA layers take `adapter_names` (one per row of x) as a keyword of their forward.
    def _before(self, module, args, kwargs):
        x = args[0]
        if not self.mixed:
            return args, {**kwargs, "adapter_names": self.current * x.shape[0]}
        tokens = x.shape[1]
        names = self.current[:tokens] + [BASE] * (tokens - len(self.current))
        return (x.transpose(0, 1), *args[1:]), {**kwargs, "adapter_names": names}

    def _after(self, module, args, output):
        return output.transpose(0, 1) if self.mixed else output

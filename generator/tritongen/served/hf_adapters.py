# Shipped by tritongen, next to model.py of the hf runtime's `tensorrt_llm` model.
"""LoRA adapters of the hf runtime: loaded with PEFT when the model loads, chosen per request by `lora_task_id`,
and run together in one batch: requests for different adapters and the base share every step.

transformers' continuous batching packs the tokens of every request in a step into one row ([1, T, hidden]). The
adapter of each token comes from the batch the batch processor has just prepared: its requests in order, each with
its query length, padding tokens last (the base).

Batched LoRA (the path for plain LoRA on linear layers, what `tritongen demo-model` and most fine-tunes make): each
LoRA layer holds its adapters stacked, A as [N, r, in] and B as [N, r, out] with the adapter's scaling folded into B
(zeros where an adapter has no weights for that layer or a smaller rank). A step that holds adapter tokens takes the
k adapters it uses (all N without a gather), runs one matmul of its tokens against those k adapters' A ([T, k*r]),
zeroes every column block but the token's own adapter's with a [T, k] mask built once per step, and one matmul
against the k B blocks: four kernels a layer, whatever the mix, as vLLM's Punica kernels do in one. A step of base
tokens only skips LoRA. The extra work is k*r columns a layer, small beside the layer itself for the ranks adapters
use; the mask is built on the host each step, so CUDA graphs stay off with adapters.

Anything else PEFT loads (DoRA and other variants, LoRA on embeddings or convolutions, fan_in_fan_out, a LoRA bias)
runs through PEFT's own mixed-adapter forward, one adapter name per token: correct, but a loop over the adapters in
every layer (about 5x slower at 8 adapters on an H100, docs/benchmarks.md).
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


def _plain(module):
    """Whether PEFT's LoRA layer `module` is plain LoRA on a linear layer for every adapter it holds."""
    import torch
    from peft.tuners.lora.layer import Linear

    return (type(module) is Linear and not module.fan_in_fan_out and not getattr(module, "lora_variant", None)
            and not any(getattr(module, "use_dora", {}).values()) and not module.merged
            and all(isinstance(module.lora_A[n], torch.nn.Linear) and module.lora_A[n].bias is None
                    and module.lora_B[n].bias is None for n in module.lora_A))


def _stack(module, names):
    """(A [N, r, in], B [N, r, out]) of one LoRA layer over `names` in slot order, in the base layer's dtype, scaling
    folded into B, zeros where the layer lacks an adapter or the adapter's rank is smaller."""
    import torch

    weight = module.base_layer.weight
    held = [n for n in names if n in module.lora_A]
    rank = max(module.lora_A[n].weight.shape[0] for n in held)
    a = torch.zeros(len(names), rank, module.in_features, dtype=weight.dtype, device=weight.device)
    b = torch.zeros(len(names), rank, module.out_features, dtype=weight.dtype, device=weight.device)
    for slot, name in enumerate(names):
        if name in module.lora_A:
            wa, wb = module.lora_A[name].weight, module.lora_B[name].weight  # [r, in], [out, r]
            r = wa.shape[0]
            a[slot, :r] = wa.to(weight.dtype)
            b[slot, :r] = (wb.float().t() * module.scaling[name]).to(weight.dtype)
    return a, b


class Adapters:
    """The adapters loaded into one model, and the adapter of every request in flight."""

    def __init__(self, model, adapters):
        """Load `adapters` ({task_id: (name, path)}) into `model` in place (PEFT injects its LoRA layers into the
        model's modules, so the model continuous batching runs is the adapted one) and take over their forward."""
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
        # Slot of each adapter in the stacks (0 .. N-1, task id order); the base has none.
        self.slots = {name: slot for slot, (_, (name, _)) in enumerate(ordered)}
        layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
        self.batched = all(_plain(m) for m in layers)
        # Per step (install): the token slots (-1: base), the slots in use, and the mask built from them.
        self.step_slots, self.step_used, self.step_mask, self.step_index = [], None, None, None
        self.current, self.mixed = [BASE], False  # PEFT's path: adapter names per token, or one for the step
        self.hooks = []
        names = [name for _, (name, _) in ordered]
        for module in layers:
            if self.batched:
                module.forward = self._batched_forward(module, *_stack(module, names))
            else:
                self.hooks.append(module.register_forward_pre_hook(self._before, with_kwargs=True))
                self.hooks.append(module.register_forward_hook(self._after))
        if self.batched:  # the stacks are what runs; PEFT's copies of the weights are not needed on the device
            for module in layers:
                for name in list(module.lora_A):
                    module.lora_A[name].to("meta")
                    module.lora_B[name].to("meta")

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
            self.begin_step(names)
            return prepare(requests_in_batch, *args, **kwargs)

        io.prepare_batch_tensors = prepare_with_adapters

    def begin_step(self, names):
        """The adapter name of each token of the next forward, in packed order (tokens past the list: the base)."""
        if not self.batched:
            self.mixed = len(set(names)) > 1
            self.current = names if self.mixed else names[:1] or [BASE]
            return
        self.step_slots = [self.slots.get(n, -1) for n in names]
        used = sorted({s for s in self.step_slots if s >= 0})
        self.step_used = used or None
        self.step_mask = self.step_index = None

    def _used_index(self, device):
        """The slots in use this step as a device tensor, made once per step."""
        import torch

        if self.step_index is None or self.step_index.device != device:
            self.step_index = torch.tensor(self.step_used, dtype=torch.long).to(device, non_blocking=True)
        return self.step_index

    def _mask(self, tokens, device, dtype):
        """[tokens, k]: 1 where a token's adapter is the j-th adapter in use this step, built once per step."""
        import torch

        mask = self.step_mask
        if mask is None or mask.shape[0] != tokens or mask.device != device or mask.dtype != dtype:
            column = {slot: j for j, slot in enumerate(self.step_used)}
            cols = [column.get(s, -1) for s in self.step_slots[:tokens]]
            cols += [-1] * (tokens - len(cols))
            index = torch.tensor(cols, dtype=torch.long)
            host = torch.zeros(tokens, len(self.step_used) + 1, dtype=dtype)
            host[torch.arange(tokens), index] = 1  # -1: the last column, dropped (the base)
            mask = self.step_mask = host[:, :-1].to(device, non_blocking=True)
        return mask

    def _batched_forward(self, module, a, b):
        """module's forward: the base layer, plus each token's adapter from the stacks (nothing for base steps)."""
        import torch

        base = module.base_layer
        every = a.shape[0]

        def forward(x, *args, **kwargs):
            kwargs.pop("adapter_names", None)
            result = base(x, *args, **kwargs)
            if self.step_used is None:
                return result
            if len(self.step_used) == every:
                sa, sb = a, b
            else:
                index = self._used_index(a.device)
                sa, sb = a.index_select(0, index), b.index_select(0, index)
            k, rank = sa.shape[0], sa.shape[1]
            flat = x.reshape(-1, x.shape[-1]).to(a.dtype)
            tokens = flat.shape[0]
            h = torch.nn.functional.linear(flat, sa.reshape(k * rank, -1))  # [T, k*r]
            h = (h.view(tokens, k, rank) * self._mask(tokens, h.device, h.dtype)[:, :, None]).view(tokens, k * rank)
            delta = h @ sb.reshape(k * rank, -1)  # [T, out]
            return result + delta.view(*result.shape).to(result.dtype)

        return forward

    # PEFT's path: its LoRA layers take `adapter_names` (one per row of x) as a keyword of their forward.
    def _before(self, module, args, kwargs):
        x = args[0]
        if not self.mixed:
            return args, {**kwargs, "adapter_names": self.current * x.shape[0]}
        tokens = x.shape[1]
        names = self.current[:tokens] + [BASE] * (tokens - len(self.current))
        return (x.transpose(0, 1), *args[1:]), {**kwargs, "adapter_names": names}

    def _after(self, module, args, output):
        return output.transpose(0, 1) if self.mixed else output

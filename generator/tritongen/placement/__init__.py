"""Placement: which devices of an inventory run the model, how many instances each, and their KV budgets.

Pure: an `Inventory` and a `MemoryModel` in, a frozen `Placement` out. The rules (reference/mig_serving_load.md):

* One tritonserver process (a server group) per MIG instance, selected with CUDA_VISIBLE_DEVICES=MIG-<uuid>, GPU
  metrics off (Triton's DCGM metrics fail to start on MIG), ports of its own.
* Tensor/pipeline parallel engines (tp x pp > 1) need tp x pp full GPUs per server group: MIG instances have no
  P2P or NCCL between them, so such engines never run on MIG.
* Otherwise one server group per full GPU.
* KV budgets are absolute (max_tokens_in_paged_kv_cache) per instance; see generator/tritongen/placement/memory.py for the formula.
  A device "fits" when every instance's budget holds at least one sequence of max_seq_len tokens.

Refusals are SpecErrors (exit 2), whether the layout can never work (tp/pp > 1 on MIG, a TP group mixing MIG and
full GPUs) or this inventory cannot hold it (nothing fits, not enough GPUs); each names the field and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from tritongen.errors import SpecError, problem
from tritongen.placement.inventory import GIB, Gpu, Inventory, MigDevice, product_for
from tritongen.placement.memory import MemoryModel, with_mapping

# Factors tried on tp_size to answer "how many full GPUs would it take" (tp_size is a power of two in practice).
_TP_FACTORS = (2, 4, 8)


@dataclass(frozen=True)
class DeviceFit:
    """The verdict for one device (a full GPU or a MIG instance). Byte figures are per instance."""

    label: str
    kind: Literal["gpu", "mig"]
    gpu_index: int
    mig_index: int | None
    uuid: str | None
    profile: str
    """MIG profile, or the GPU's product name."""
    memory_bytes: int
    fits: bool
    reason: str
    """Why the device is not used; empty when it is."""
    instances: int
    weight_bytes: int
    headroom_bytes: int
    kv_tokens: int
    """max_tokens_in_paged_kv_cache of each instance."""
    kv_bytes: int
    max_batch_size: int
    """Sequences of max_seq_len tokens that one instance's KV budget holds at once (capped by the engine)."""
    server_group: str | None


@dataclass(frozen=True)
class ServerGroup:
    """One tritonserver process and the devices it sees."""

    name: str
    devices: tuple[str, ...]
    gpu_indices: tuple[int, ...]
    mig_profile: str | None
    cuda_visible_devices: str | None
    """None when the inventory has no MIG UUID: the deployment target (device plugin) then selects the instance."""
    gpu_metrics: bool
    http_port: int
    grpc_port: int
    metrics_port: int
    tp: int
    pp: int
    instances: int
    kv_tokens: int
    max_batch_size: int
    gpu_device_ids: str
    """tensorrt_llm `gpu_device_ids`: device ids as the process sees them, `,` within and `;` between instances."""

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    @property
    def ports(self) -> tuple[int, int, int]:
        return self.http_port, self.grpc_port, self.metrics_port

    @property
    def env(self) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": self.cuda_visible_devices} if self.cuda_visible_devices else {}


@dataclass(frozen=True)
class Placement:
    """Every device's verdict and the server groups that follow from them."""

    model: str
    tp: int
    pp: int
    max_seq_len: int
    kv_fraction: float
    instances_per_device: int
    devices: tuple[DeviceFit, ...]
    server_groups: tuple[ServerGroup, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (`tritongen plan --json`)."""
        data = asdict(self)
        for group, raw in zip(self.server_groups, data["server_groups"]):
            raw["env"] = group.env
        return data

    def to_table(self) -> str:
        """Plain-text tables: one row per device, then one per server group."""
        devices = [("device", "memory", "fits", "inst", "weights/inst", "kv tokens/inst", f"batch@{self.max_seq_len}",
                    "server group", "reason")]
        for d in self.devices:
            devices.append((d.label, _gib(d.memory_bytes), "yes" if d.fits else "no", str(d.instances),
                            _gib(d.weight_bytes) if d.fits else "-", f"{d.kv_tokens:,}" if d.fits else "-",
                            str(d.max_batch_size) if d.fits else "-", d.server_group or "-", d.reason))
        groups = [("server group", "devices", "CUDA_VISIBLE_DEVICES", "http/grpc/metrics", "world", "gpu metrics")]
        for g in self.server_groups:
            groups.append((g.name, ", ".join(g.devices), g.cuda_visible_devices or "(set by the deployment target)",
                           "/".join(map(str, g.ports)), str(g.world_size), "on" if g.gpu_metrics else "off"))
        return _table(devices) + "\n\n" + _table(groups) + "\n"


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _gpus(indices: Sequence[int]) -> str:
    return ("GPU " if len(indices) == 1 else "GPUs ") + ", ".join(map(str, indices))


def _check_ports(base_ports: tuple[int, int, int], stride: int, groups: int) -> None:
    # Group k uses base + k * stride; ports stay distinct across groups when the three bases lie within one stride.
    if len(set(base_ports)) != 3 or max(base_ports) - min(base_ports) >= stride:
        raise SpecError(problem("base_ports", f"{base_ports} must be three distinct ports less than {stride} apart",
                                "use e.g. 8000,8001,8002"))
    if max(base_ports) + (groups - 1) * stride > 65535:
        raise SpecError(problem("base_ports", f"{groups} server groups from {base_ports} run past port 65535",
                                "start from lower ports"))


def _select(inventory: Inventory, gpu_ids: Sequence[int] | None) -> list[Gpu]:
    if gpu_ids is None:
        return list(inventory.gpus)
    known = {g.index: g for g in inventory.gpus}
    missing = [i for i in gpu_ids if i not in known]
    if missing:
        raise SpecError(problem("placement.gpu_ids", f"{_gpus(missing)} not in the inventory ({inventory.source})",
                                f"use indices from {', '.join(map(str, sorted(known)))}"))
    return [known[i] for i in sorted(set(gpu_ids))]


def _needs(model: MemoryModel, max_seq_len: int, kv_fraction: float, instances: int) -> str:
    return f"needs {_gib(model.min_device_bytes(max_seq_len, kv_fraction, instances))} for {instances} " \
           f"instance{'s' if instances > 1 else ''} at max_seq_len {max_seq_len}"


def _verdict(gpu: Gpu, mig: MigDevice | None, model: MemoryModel, max_seq_len: int, kv_fraction: float,
             instances: int, group: str | None, *, sized_on: int | None = None, reason: str = "") -> DeviceFit:
    """Size `instances` instances on the device (a TP group sizes on its smallest GPU: `sized_on` bytes).

    A `reason`, when given, rules the device out before sizing.
    """
    memory = mig.memory_bytes if mig else gpu.memory_bytes
    tokens = 0 if reason else model.kv_token_budget(sized_on or memory, kv_fraction, instances)
    if not reason and tokens < max_seq_len:
        reason = f"{_needs(model, max_seq_len, kv_fraction, instances)}, has {_gib(sized_on or memory)}"
    where = {"label": mig.label if mig else gpu.label, "kind": "mig" if mig else "gpu", "gpu_index": gpu.index,
             "mig_index": mig.mig_index if mig else None, "uuid": mig.uuid if mig else gpu.uuid,
             "profile": mig.profile if mig else gpu.name, "memory_bytes": memory}
    if reason:
        return DeviceFit(**where, fits=False, reason=reason, instances=0, weight_bytes=0, headroom_bytes=0,
                         kv_tokens=0, kv_bytes=0, max_batch_size=0, server_group=None)
    batch = tokens // max_seq_len
    if model.max_batch_size:
        batch = min(batch, model.max_batch_size)
    return DeviceFit(**where, fits=True, reason="", instances=instances, weight_bytes=model.weight_bytes_per_rank,
                     headroom_bytes=model.runtime_headroom_bytes, kv_tokens=tokens,
                     kv_bytes=tokens * model.kv_bytes_per_token_per_rank, max_batch_size=batch, server_group=group)


def _group(fit: DeviceFit, devices: Sequence[DeviceFit], indices: tuple[int, ...], visible: str | None,
           mig_profile: str | None, model: MemoryModel, k: int, base: tuple[int, int, int], stride: int) -> ServerGroup:
    ids = ";".join([",".join(str(r) for r in range(model.world_size))] * fit.instances)
    http, grpc, metrics = (p + k * stride for p in base)
    return ServerGroup(fit.server_group, tuple(d.label for d in devices), indices, mig_profile, visible,
                       mig_profile is None, http, grpc, metrics, model.tp, model.pp, fit.instances, fit.kv_tokens,
                       fit.max_batch_size, ids)


def _no_fit_fix(gpus: Sequence[Gpu], model: MemoryModel, largest: int, max_seq_len: int, kv_fraction: float,
                instances: int) -> str:
    """Name the fewer instances, the smallest MIG profile, or the fewest full GPUs that would hold the model."""
    if instances > 1 and model.kv_token_budget(largest, kv_fraction) >= max_seq_len:
        fitting = max(n for n in range(1, instances) if model.kv_token_budget(largest, kv_fraction, n) >= max_seq_len)
        return f"lower the instances per device to {fitting}"
    need = model.min_device_bytes(max_seq_len, kv_fraction)
    if model.world_size == 1 and any(g.mig_enabled for g in gpus):
        products = {p for g in gpus if (p := product_for(g.name))}
        profiles = [(p.memory_bytes, p.sm_count, p.name, product.key)
                    for product in products for p in product.profiles if p.memory_bytes >= need]
        if profiles:
            _, _, name, key = min(profiles)
            return f"use a MIG profile of at least {name} ({key}), or a full GPU"
    full = max(g.memory_bytes for g in gpus)
    for factor in _TP_FACTORS:
        sharded = with_mapping(model, factor * model.tp, model.pp)
        if model.shape.num_heads % sharded.tp == 0 and sharded.min_device_bytes(max_seq_len, kv_fraction) <= full:
            return (f"build the engine with tp_size {sharded.tp} and run it on {sharded.world_size} full GPUs "
                    "(MIG off), or quantise it (engine.quantization)")
    return "quantise the model (engine.quantization), lower max_seq_len, or use larger GPUs"


def _place_single(gpus: Sequence[Gpu], model: MemoryModel, max_seq_len: int, kv_fraction: float,
                  instances: int) -> list[tuple[DeviceFit, tuple[int, ...], str | None, str | None]]:
    """tp = pp = 1: every MIG instance and every full GPU is a candidate server group of its own."""
    out = []
    for gpu in gpus:
        if gpu.mig_enabled:
            for mig in gpu.mig_devices:
                fit = _verdict(gpu, mig, model, max_seq_len, kv_fraction, instances,
                               f"gpu{gpu.index}-mig{mig.mig_index}")
                out.append((fit, (gpu.index,), mig.uuid, mig.profile))
        else:
            fit = _verdict(gpu, None, model, max_seq_len, kv_fraction, instances, f"gpu{gpu.index}")
            out.append((fit, (gpu.index,), str(gpu.index), None))
    return out


def _check_parallel(gpus: Sequence[Gpu], model: MemoryModel, explicit: bool) -> list[Gpu]:
    """The full GPUs a tp x pp engine may use; refuses MIG and MIG/full mixes."""
    path = "engine.tp_size" if model.tp > 1 else "engine.pp_size"
    mig = [g.index for g in gpus if g.mig_enabled]
    full = [g for g in gpus if not g.mig_enabled]
    if not full:
        raise SpecError(problem(path, f"tp_size {model.tp} x pp_size {model.pp} cannot run on MIG instances "
                                "(no P2P or NCCL between them)", "build the engine with tp_size 1 and pp_size 1 to "
                                f"run one replica per MIG instance, or disable MIG on {model.world_size} GPUs "
                                "(nvidia-smi -i <index> -mig 0)"))
    are = "is" if len(mig) == 1 else "are"
    if explicit and mig:
        raise SpecError(problem("placement.gpu_ids", f"{_gpus(mig)} {are} in MIG mode and "
                                f"{_gpus([g.index for g in full])} not; a tensor-parallel group cannot mix MIG "
                                "instances and full GPUs", f"list only full GPUs, or disable MIG on {_gpus(mig)}"))
    if len(full) < model.world_size:
        note = f" ({_gpus(mig)} {are} in MIG mode and cannot join a tensor-parallel group)" if mig else ""
        raise SpecError(problem(path, f"tp_size {model.tp} x pp_size {model.pp} needs {model.world_size} full "
                                  f"GPUs but {len(full)} are available{note}",
                                  "add GPUs, disable MIG, or build the engine with a smaller tp_size"))
    return full


def _place_parallel(gpus: Sequence[Gpu], full: list[Gpu], model: MemoryModel, max_seq_len: int,
                    kv_fraction: float, instances: int) -> tuple[list[DeviceFit], list[tuple]]:
    """tp x pp > 1: consecutive full GPUs form groups; MIG instances and left-over GPUs are reported unused."""
    world, fits, candidates = model.world_size, [], []
    for start in range(0, len(full) - world + 1, world):
        members = full[start:start + world]
        name = "gpu" + "-".join(str(g.index) for g in members)
        smallest = min(g.memory_bytes for g in members)
        row = [_verdict(g, None, model, max_seq_len, kv_fraction, instances, name, sized_on=smallest)
               for g in members]
        fits += row
        candidates.append((row, tuple(g.index for g in members)))
    for g in full[len(full) - len(full) % world:]:
        fits.append(_verdict(g, None, model, max_seq_len, kv_fraction, 0, None,
                             reason=f"left over: server groups take {world} GPUs each"))
    for g in gpus:
        for mig in g.mig_devices:
            fits.append(_verdict(g, mig, model, max_seq_len, kv_fraction, 0, None,
                                 reason=f"tp x pp = {world} cannot span MIG instances"))
    return fits, candidates


def place(inventory: Inventory, model: MemoryModel, *, max_seq_len: int, kv_fraction: float = 0.9,
          instances_per_device: int = 1, gpu_ids: Sequence[int] | None = None,
          base_ports: tuple[int, int, int] = (8000, 8001, 8002), port_stride: int = 10) -> Placement:
    """Place `instances_per_device` instances of `model` (built for model.tp x model.pp) on `inventory`.

    `gpu_ids` restricts the GPUs used (None: all). Server group k listens on base_ports + k * port_stride.
    """
    if model.max_seq_len and max_seq_len > model.max_seq_len:
        raise SpecError(problem("engine.max_seq_len", f"{max_seq_len} is more than the engine in {model.source} "
                                  f"was built for ({model.max_seq_len})", "lower it or rebuild the engine"))
    gpus = _select(inventory, gpu_ids)
    if model.world_size == 1:
        rows = _place_single(gpus, model, max_seq_len, kv_fraction, instances_per_device)
        devices = [fit for fit, *_ in rows]
        chosen = [(fit, (fit,), indices, visible, profile) for fit, indices, visible, profile in rows if fit.fits]
    else:
        full = _check_parallel(gpus, model, gpu_ids is not None)
        devices, candidates = _place_parallel(gpus, full, model, max_seq_len, kv_fraction, instances_per_device)
        chosen = [(row[0], row, indices, ",".join(map(str, indices)), None) for row, indices in candidates
                  if row[0].fits]
    if not devices:
        raise SpecError(problem("placement", f"no device to run on ({_gpus([g.index for g in gpus])} "
                                  f"{'has' if len(gpus) == 1 else 'have'} MIG on but no MIG instances)",
                                  "create MIG instances, disable MIG, or list other GPUs"))
    if not chosen:
        # Devices ruled out by structure (MIG under tp > 1, left-overs) say nothing about size.
        sized = [d for d in devices if d.reason.startswith("needs")] or devices
        largest = max(sized, key=lambda d: d.memory_bytes)
        what = (f"the model fits no device: it {_needs(model, max_seq_len, kv_fraction, instances_per_device)} "
                f"({_gib(model.weight_bytes_per_rank)} weights + {_gib(model.runtime_headroom_bytes)} runtime per "
                f"instance), the largest device is {largest.label} with {_gib(largest.memory_bytes)}")
        fix = _no_fit_fix(gpus, model, largest.memory_bytes, max_seq_len, kv_fraction, instances_per_device)
        raise SpecError(problem("placement", what, fix))
    _check_ports(base_ports, port_stride, len(chosen))
    groups = tuple(_group(fit, row, indices, visible, profile, model, k, base_ports, port_stride)
                   for k, (fit, row, indices, visible, profile) in enumerate(chosen))
    return Placement(model.source, model.tp, model.pp, max_seq_len, kv_fraction, instances_per_device,
                     tuple(devices), groups)

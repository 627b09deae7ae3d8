"""GPU inventory: the GPUs of one node and the MIG instances carved out of them.

`load_inventory(source)` reads one of three sources:

* ``"nvml"``: live discovery through NVML (package nvidia-ml-py, module ``pynvml``).
* A saved ``nvidia-smi -L`` listing (recognised by its first line, ``GPU 0: <name> (UUID: GPU-...)``).
  That text names GPUs and MIG profiles only, so memory and SM counts come from `CATALOGUE`, and a GPU counts as
  MIG-enabled when MIG lines follow it.
* An inventory file, YAML or JSON, for planning a node you are not on::

      driver: "615.61"                 # optional: the nodes' NVIDIA driver (plan checks the image's need)
      gpus:
        - name: NVIDIA H200              # product name as nvidia-smi prints it; picks the catalogue entry
          index: 0                       # optional, defaults to the position in the list
          uuid: GPU-5c89852c-...         # optional
          memory_gib: 140.0              # optional for catalogued GPUs, else required
          sm_count: 132                  # optional for catalogued GPUs, else required
          mig: [1g.18gb, 1g.18gb, 2g.35gb, 3g.71gb]   # omit (or null) when MIG is off
        - name: NVIDIA H200
          mig:                           # entries may also be mappings, e.g. to give UUIDs
            - {profile: 3g.71gb, uuid: MIG-c788539f-...}
            - {profile: 3g.71gb, uuid: MIG-b4b2228d-..., memory_gib: 66.5, sm_count: 60}

  A MIG entry's memory and SMs come from the catalogue unless given. Without a UUID, nobody can select the
  instance with CUDA_VISIBLE_DEVICES; the placement then leaves device selection to the deployment target.

Memory figures are GiB as nvidia-smi reports them (the comment on `CATALOGUE` says which are read off machines
and which are inferred); a discovered inventory always carries the driver's own numbers.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tritongen.errors import EnvironmentMissing, SpecError, problem
from tritongen.core.source import read_yaml

GIB = 1 << 30


@dataclass(frozen=True)
class MigProfile:
    """One MIG GPU-instance profile of a GPU product."""

    name: str
    memory_gib: float
    sm_count: int
    max_instances: int

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)


@dataclass(frozen=True)
class GpuProduct:
    """A GPU product as the catalogue knows it: full-GPU memory and SMs plus its MIG profiles."""

    key: str
    memory_gib: float
    sm_count: int
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


def _profiles(*rows: tuple[str, float, int, int]) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(*row) for row in rows)


# Profiles: (name, GiB as nvidia-smi reports, SMs, max instances). H200 and H100 80GB rows are from
# reference/mig_serving_load.md; values marked "inferred" there or missing from it (H200 1g.35gb/3g.71gb/4g.71gb,
# all of H100 94GB and A100) are scaled from the slice layout, rounded down so a plan errs on the safe side.
# Full-GPU memory is nvidia-smi's total (143771, 95830, 81559, 81920 and 40536 MiB; the A100 40GB PCIe figure,
# the lower of its two variants). SM counts are those of the SXM parts.
CATALOGUE: tuple[GpuProduct, ...] = (
    GpuProduct("H200 141GB", 140.4, 132, _profiles(
        ("1g.18gb", 16.0, 16, 7), ("1g.18gb+me", 16.0, 16, 1), ("1g.35gb", 32.5, 26, 4), ("2g.35gb", 32.5, 32, 3),
        ("3g.71gb", 66.5, 60, 2), ("4g.71gb", 66.5, 64, 1), ("7g.141gb", 140.0, 132, 1))),
    GpuProduct("H100 94GB", 93.58, 132, _profiles(
        ("1g.12gb", 11.0, 16, 7), ("1g.12gb+me", 11.0, 16, 1), ("1g.24gb", 22.75, 26, 4), ("2g.24gb", 22.75, 32, 3),
        ("3g.47gb", 46.0, 60, 2), ("4g.47gb", 46.0, 64, 1), ("7g.94gb", 93.0, 132, 1))),
    GpuProduct("H100 80GB", 79.65, 132, _profiles(
        ("1g.10gb", 9.75, 16, 7), ("1g.10gb+me", 9.75, 16, 1), ("1g.20gb", 19.62, 26, 4), ("2g.20gb", 19.62, 32, 3),
        ("3g.40gb", 39.5, 60, 2), ("4g.40gb", 39.5, 64, 1), ("7g.80gb", 79.25, 132, 1))),
    GpuProduct("A100 80GB", 80.0, 108, _profiles(
        ("1g.10gb", 9.5, 14, 7), ("1g.10gb+me", 9.5, 14, 1), ("1g.20gb", 19.5, 14, 4), ("2g.20gb", 19.5, 28, 3),
        ("3g.40gb", 39.25, 42, 2), ("4g.40gb", 39.25, 56, 1), ("7g.80gb", 78.75, 98, 1))),
    GpuProduct("A100 40GB", 39.59, 108, _profiles(
        ("1g.5gb", 4.75, 14, 7), ("1g.5gb+me", 4.75, 14, 1), ("1g.10gb", 9.62, 14, 4), ("2g.10gb", 9.62, 28, 3),
        ("3g.20gb", 19.5, 42, 2), ("4g.20gb", 19.5, 56, 1), ("7g.40gb", 39.25, 98, 1))),
)

# First match wins, so the 94GB H100 variants (NVL, "H100 94GB") are tested before the plain H100.
_PRODUCT_PATTERNS = (
    (re.compile(r"H200", re.I), "H200 141GB"),
    (re.compile(r"H100.*(NVL|94\s*GB)", re.I), "H100 94GB"),
    (re.compile(r"H100", re.I), "H100 80GB"),
    (re.compile(r"A100.*80\s*GB", re.I), "A100 80GB"),
    (re.compile(r"A100", re.I), "A100 40GB"),
)


def product_for(gpu_name: str) -> GpuProduct | None:
    """The catalogue entry for a GPU product name such as ``NVIDIA A100-SXM4-80GB``; None when unknown."""
    for pattern, key in _PRODUCT_PATTERNS:
        if pattern.search(gpu_name):
            return next(p for p in CATALOGUE if p.key == key)
    return None


@dataclass(frozen=True)
class MigDevice:
    """One MIG instance; `uuid` (``MIG-...``) is None when an inventory file did not give it."""

    gpu_index: int
    mig_index: int
    uuid: str | None
    profile: str
    memory_bytes: int
    sm_count: int

    @property
    def label(self) -> str:
        return f"GPU {self.gpu_index} MIG {self.mig_index} ({self.profile})"


@dataclass(frozen=True)
class Gpu:
    """One physical GPU. With MIG on, only its `mig_devices` can run work."""

    index: int
    uuid: str | None
    name: str
    memory_bytes: int
    sm_count: int
    mig_enabled: bool
    mig_devices: tuple[MigDevice, ...] = ()

    @property
    def label(self) -> str:
        return f"GPU {self.index}"


@dataclass(frozen=True)
class Inventory:
    """The GPUs of one node, sorted by index, and where that knowledge came from."""

    gpus: tuple[Gpu, ...]
    source: str
    driver: str | None = None
    """The NVIDIA driver version (NVML, or an inventory file's `driver`); None when the source does not say."""


# ---------------------------------------------------------------------------------------------- inventory files


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _MigEntry(_Strict):
    profile: str
    index: int | None = Field(None, ge=0)
    uuid: str | None = Field(None, pattern=r"^MIG-")
    memory_gib: float | None = Field(None, gt=0)
    sm_count: int | None = Field(None, ge=1)


class _GpuEntry(_Strict):
    name: str
    index: int | None = Field(None, ge=0)
    uuid: str | None = None
    memory_gib: float | None = Field(None, gt=0)
    sm_count: int | None = Field(None, ge=1)
    mig: list[_MigEntry] | None = None

    @field_validator("mig", mode="before")
    @classmethod
    def _profile_names(cls, value: Any) -> Any:
        # `mig: [3g.71gb, ...]` is shorthand for `mig: [{profile: 3g.71gb}, ...]`.
        if isinstance(value, list):
            return [{"profile": item} if isinstance(item, str) else item for item in value]
        return value


class _InventoryFile(_Strict):
    gpus: list[_GpuEntry] = Field(min_length=1)
    driver: str | None = Field(None, pattern=r"^\d+(\.\d+)*$")


def _mig_from_entry(gpu: _GpuEntry, gpu_index: int, position: int, path: str, entry: _MigEntry) -> MigDevice:
    product = product_for(gpu.name)
    known = product.profile(entry.profile) if product else None
    if known is None and (entry.memory_gib is None or entry.sm_count is None):
        names = ", ".join(p.name for p in product.profiles) if product else "none catalogued"
        raise SpecError(problem(path, f"{entry.profile!r} is not a MIG profile of {gpu.name} (known: {names})",
                                "fix the name, or give memory_gib and sm_count"))
    memory = entry.memory_gib if entry.memory_gib is not None else known.memory_gib
    sms = entry.sm_count if entry.sm_count is not None else known.sm_count
    index = entry.index if entry.index is not None else position
    return MigDevice(gpu_index, index, entry.uuid, entry.profile, int(memory * GIB), sms)


def _check_mig_layout(product: GpuProduct | None, migs: tuple[MigDevice, ...], path: str) -> None:
    """Catch hand-written layouts no GPU can hold: repeated MIG indices, or more instances than a profile allows."""
    indices = [m.mig_index for m in migs]
    if len(set(indices)) != len(indices):
        raise SpecError(problem(path, f"MIG indices repeat ({indices})", "give every MIG instance its own index"))
    for profile in sorted({m.profile for m in migs}):
        known = product.profile(profile) if product else None
        count = sum(m.profile == profile for m in migs)
        if known and count > known.max_instances:
            raise SpecError(problem(path, f"{count} x {profile} but a {product.key} holds at most "
                                    f"{known.max_instances}", "fix the MIG layout"))


def _gpu_from_entry(entry: _GpuEntry, index: int, path: str) -> Gpu:
    product = product_for(entry.name)
    if product is None and (entry.memory_gib is None or entry.sm_count is None):
        raise SpecError(problem(path, f"GPU {entry.name!r} is not in the catalogue",
                                "give memory_gib and sm_count for it in an inventory file (docs/inventory.md)"))
    memory = entry.memory_gib if entry.memory_gib is not None else product.memory_gib
    sms = entry.sm_count if entry.sm_count is not None else product.sm_count
    migs = tuple(_mig_from_entry(entry, index, i, f"{path}.mig.{i}", m) for i, m in enumerate(entry.mig or ()))
    _check_mig_layout(product, migs, f"{path}.mig")
    return Gpu(index, entry.uuid, entry.name, int(memory * GIB), sms, entry.mig is not None, migs)


def _build(entries: list[_GpuEntry], source: str, driver: str | None = None) -> Inventory:
    gpus = [_gpu_from_entry(e, e.index if e.index is not None else i, f"gpus.{i}") for i, e in enumerate(entries)]
    indices = [g.index for g in gpus]
    if len(set(indices)) != len(indices):
        raise SpecError(problem("gpus", f"GPU indices repeat ({indices})", "give every GPU its own index"))
    return Inventory(tuple(sorted(gpus, key=lambda g: g.index)), source, driver)


def inventory_from_mapping(data: Any, source: str = "(inventory)") -> Inventory:
    """Validate a parsed inventory file (format: docs/inventory.md, the module docstring) into an Inventory."""
    try:
        parsed = _InventoryFile.model_validate(data)
    except ValidationError as err:
        raise SpecError([_schema_problem(e) for e in err.errors()]) from None
    return _build(parsed.gpus, source, parsed.driver)


def _schema_problem(error: Any) -> str:
    loc = error["loc"]
    fix = "see the inventory file format in docs/inventory.md"
    if error["type"] == "extra_forbidden":
        # The location's depth says which entry the unknown key sits in: file, GPU, or MIG entry.
        model = {1: _InventoryFile, 3: _GpuEntry, 5: _MigEntry}.get(len(loc), _Strict)
        close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
        fix = f"did you mean `{close[0]}`?" if close else fix
    message = error["msg"][0].lower() + error["msg"][1:]
    return problem(".".join(str(p) for p in loc), message, fix)


# ------------------------------------------------------------------------------------------------ nvidia-smi -L

_SMI_GPU = re.compile(r"^GPU\s+(\d+):\s+(.+?)\s+\(UUID:\s+(GPU-[^)\s]+)\)\s*$")
# Drivers >= R470 print MIG-<uuid>; older ones MIG-GPU-<uuid>/<gi>/<ci>. Both are valid CUDA_VISIBLE_DEVICES values.
_SMI_MIG = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s+(MIG-[^)\s]+)\)\s*$")


def parse_nvidia_smi_list(text: str, source: str = "(nvidia-smi -L)") -> Inventory:
    """Parse `nvidia-smi -L` output; memory and SMs come from the catalogue by product name and MIG profile."""
    entries: list[_GpuEntry] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if gpu := _SMI_GPU.match(line):
            entries.append(_GpuEntry(name=gpu[2], index=int(gpu[1]), uuid=gpu[3]))
        elif (mig := _SMI_MIG.match(line)) and entries:
            # nvidia-smi numbers MIG devices itself (gaps appear when instances are destroyed); keep its numbers.
            last = entries[-1]
            migs = [*(last.mig or []), _MigEntry(profile=mig[1], index=int(mig[2]), uuid=mig[3])]
            entries[-1] = last.model_copy(update={"mig": migs})
        else:
            raise SpecError(problem(f"{source}:{number}", f"unrecognised line {line.strip()!r}",
                                    "pass the unmodified output of `nvidia-smi -L`"))
    if not entries:
        raise SpecError(problem(source, "lists no GPU", "pass the output of `nvidia-smi -L` from the target node "
                                "(formats: docs/inventory.md)"))
    return _build(entries, source)


# ------------------------------------------------------------------------------------------------------- NVML


def _text(value: str | bytes) -> str:
    # nvidia-ml-py < 11.515 returned bytes for names and UUIDs.
    return value.decode() if isinstance(value, bytes) else value


def _mig_profile_name(pynvml: Any, handle: Any, gpu_name: str, sms: int, memory: int) -> str:
    """A MIG device's name reads ``<GPU name> MIG 3g.71gb``; fall back to the catalogue profile it matches."""
    name = _text(pynvml.nvmlDeviceGetName(handle))
    if found := re.search(r"MIG\s+(\S+)$", name):
        return found[1]
    product = product_for(gpu_name)
    candidates = [p for p in (product.profiles if product else ()) if p.sm_count == sms]
    if not candidates:
        return f"{math.ceil(memory / GIB)}gb"
    return min(candidates, key=lambda p: abs(p.memory_bytes - memory)).name


def _nvml_sm_count(pynvml: Any, handle: Any, fallback: int) -> int:
    # nvmlDeviceGetAttributes is documented for MIG handles; on full GPUs older drivers answer NOT_SUPPORTED.
    try:
        return int(pynvml.nvmlDeviceGetAttributes(handle).multiprocessorCount)
    except pynvml.NVMLError:
        return fallback


def _nvml_mig_devices(pynvml: Any, handle: Any, gpu_index: int, gpu_name: str) -> tuple[bool, tuple[MigDevice, ...]]:
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError:
        return False, ()  # NOT_SUPPORTED: a GPU without MIG (e.g. consumer or pre-Ampere parts).
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return False, ()
    devices = []
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError:
            continue  # Empty slot: fewer instances exist than the GPU could hold.
        memory = int(pynvml.nvmlDeviceGetMemoryInfo(mig).total)
        sms = _nvml_sm_count(pynvml, mig, 0)
        profile = _mig_profile_name(pynvml, mig, gpu_name, sms, memory)
        devices.append(MigDevice(gpu_index, slot, _text(pynvml.nvmlDeviceGetUUID(mig)), profile, memory, sms))
    return True, tuple(devices)


def discover_nvml() -> Inventory:
    """Discover GPUs and MIG instances on this machine through NVML."""
    how = "install the NVIDIA driver, or plan from an inventory file or saved `nvidia-smi -L` output"
    try:
        import pynvml  # Imported here: planning from files must work where nvidia-ml-py is absent.
    except ImportError:
        raise EnvironmentMissing(problem("inventory", "nvidia-ml-py is not installed",
                                         "pip install nvidia-ml-py, or pass an inventory file")) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise EnvironmentMissing(problem("inventory", f"NVML could not start ({err})", how)) from None
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(pynvml.nvmlDeviceGetName(handle))
            product = product_for(name)
            sms = _nvml_sm_count(pynvml, handle, product.sm_count if product else 0)
            mig_enabled, migs = _nvml_mig_devices(pynvml, handle, index, name)
            gpus.append(Gpu(index, _text(pynvml.nvmlDeviceGetUUID(handle)), name,
                            int(pynvml.nvmlDeviceGetMemoryInfo(handle).total), sms, mig_enabled, migs))
    except pynvml.NVMLError as err:
        raise EnvironmentMissing(problem("inventory", f"NVML query failed ({err})", how)) from None
    finally:
        pynvml.nvmlShutdown()
    if not gpus:
        raise EnvironmentMissing(problem("inventory", "NVML reports no GPU", how))
    return Inventory(tuple(gpus), "nvml", driver)


def no_local_gpu() -> str | None:
    """Why this machine has no GPU to place on (NVML missing, not starting, or counting none); None if it has one."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return f"NVML could not start ({err})"
    try:
        return None if pynvml.nvmlDeviceGetCount() else "NVML reports no GPU"
    except pynvml.NVMLError as err:
        return f"NVML query failed ({err})"
    finally:
        pynvml.nvmlShutdown()


def load_inventory(source: str) -> Inventory:
    """Load an inventory from ``"nvml"``, an inventory YAML/JSON file, or saved ``nvidia-smi -L`` output."""
    if source == "nvml":
        return discover_nvml()
    path = Path(source)
    if not path.is_file():
        raise SpecError(problem("--inventory", f"{source} is not a file", "pass 'nvml', an inventory YAML/JSON file "
                                "or saved `nvidia-smi -L` output (formats: docs/inventory.md)"))
    with path.open("rb") as f:
        head = f.read(512).decode("utf-8", errors="replace")
    if _SMI_GPU.match(head.lstrip().split("\n", 1)[0]):
        return parse_nvidia_smi_list(path.read_bytes().decode("utf-8", errors="replace"), source)
    return inventory_from_mapping(read_yaml(path), source)

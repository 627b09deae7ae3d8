"""Upstream facts with their provenance, a runtime's pinned container, and NVIDIA's driver rule for it.

Every fact records where it was read (`Source`: repository, file, commit; a web page has no commit and says who read
it). Each runtime owns its pin (tensorrtllm/release.py, vllm/release.py); `tritongen pins` prints them and
tests/runtimes/test_pins.py fails when two facts about one release disagree.

The driver rule is NVIDIA's, in this order (`DriverRule.decide`):
1. a driver at or above the one bundled with the container's CUDA toolkit (the compatibility matrix's "CUDA Driver
   version" column) runs it;
2. a driver at or above the minimum the release notes state ("requires NVIDIA Driver release N or later") runs it;
3. on data-center GPUs, a driver branch that NVIDIA's data-center driver documentation lists as supporting the
   container's CUDA major version through compatibility (R580: "supports CUDA 13.x (through CUDA minor version
   compatibility)") runs it, with the limits of that compatibility: a warning, not a refusal;
4. anything else is refused, naming the rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal


SERVER = "triton-inference-server/server"
MATRIX = "docs/introduction/compatibility.md"
DATACENTER_DRIVERS = "datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html"


def driver_version(text: str) -> tuple[int, ...]:
    """`610.43.02` -> (610, 43, 2), for comparing driver versions."""
    return tuple(int(part) for part in re.findall(r"\d+", text))


@dataclass(frozen=True)
class Source:
    """Where a fact was read: a repository file at a commit, or a web page (commit None, `note` says how it was
    read)."""

    repo: str
    path: str
    commit: str | None
    note: str = ""

    def cite(self) -> str:
        at = f" @ {self.commit[:8]}" if self.commit else ""
        return f"{self.repo} {self.path}{at}" + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class Fact:
    value: str
    source: Source


@dataclass(frozen=True)
class Branch:
    """A data-center driver branch supporting a CUDA major version through compatibility."""

    branch: int
    """The driver branch (580 for R580)."""
    cuda_major: int
    source: Source


@dataclass(frozen=True)
class DriverDecision:
    verdict: Literal["ok", "warn", "refuse", "unknown"]
    rule: str
    """Which of NVIDIA's rules decided, in words, with its source."""


@dataclass(frozen=True)
class DriverRule:
    """NVIDIA's driver requirement for one container release."""

    cuda: Fact
    """The container's CUDA toolkit."""
    bundled: Fact
    """The driver bundled with that toolkit (the matrix's "CUDA Driver version" column): enough, not a minimum."""
    stated_minimum: Fact | None
    """The release notes' "NVIDIA Driver release N or later"; None where they state no number."""
    datacenter: tuple[Branch, ...] = ()
    """Data-center branches supporting the container's CUDA major version through compatibility."""

    def minimum_text(self) -> str:
        if self.stated_minimum is not None:
            return f"{self.stated_minimum.value} or later (release notes)"
        return f"not stated in the release notes; the bundled driver is {self.bundled.value}"

    def decide(self, driver: str | None, datacenter: bool | None) -> DriverDecision:
        """The rule for a node's driver; `datacenter`: every GPU is a data-center GPU (None: not known)."""
        if driver is None:
            return DriverDecision("unknown", f"the inventory does not say the NVIDIA driver; minimum: "
                                             f"{self.minimum_text()}")
        have = driver_version(driver)
        if have >= driver_version(self.bundled.value):
            return DriverDecision("ok", f"at or above {self.bundled.value}, the driver bundled with CUDA "
                                        f"{self.cuda.value} ({self.bundled.source.cite()})")
        if self.stated_minimum is not None and have >= driver_version(self.stated_minimum.value):
            return DriverDecision("ok", f"the release notes' minimum: {self.stated_minimum.value} or later "
                                        f"({self.stated_minimum.source.cite()})")
        major = int(self.cuda.value.split(".")[0])
        branch = next((b for b in self.datacenter if b.branch == have[0] and b.cuda_major == major), None)
        if branch is not None and datacenter is not False:
            where = "on data-center GPUs only; check the nodes' GPUs" if datacenter is None else "data-center GPUs"
            return DriverDecision("warn", f"data-center compatibility ({where}): NVIDIA lists R{branch.branch} as "
                                          f"supporting CUDA {major}.x through CUDA minor version compatibility, "
                                          f"below the {self.bundled.value} bundled with CUDA {self.cuda.value}, "
                                          f"within that compatibility's limits ({branch.source.cite()})")
        need = (f"the release notes' minimum {self.stated_minimum.value}" if self.stated_minimum is not None
                else f"the {self.bundled.value} bundled with CUDA {self.cuda.value} (the release notes state no "
                     f"minimum)")
        listed = ", ".join(f"R{b.branch}" for b in self.datacenter if b.cuda_major == major)
        compat = (f"; data-center compatibility ({listed}) does not apply: "
                  + ("the GPUs are not data-center GPUs" if datacenter is False and branch is not None
                     else f"R{have[0]} is not such a branch")) if listed else ""
        return DriverDecision("refuse", f"below {need}{compat}")


@dataclass(frozen=True)
class ContainerPin:
    """The container one runtime serves in, and the upstream facts about its release."""

    image: Fact
    release: str
    """The Triton release (`26.08`)."""
    date: Fact
    """When the release was cut (its server tag or release branch commit)."""
    tritonserver: Fact
    backend: Fact
    """The Triton backend that serves the runtime, at the release's branch and commit."""
    engine: Fact
    """What generates: TensorRT-LLM or vLLM, as the compatibility matrix states its version."""
    driver: DriverRule
    notes: tuple[Fact, ...] = ()
    """What a user must know about this line (e.g. the last release that ships it)."""
    newer: tuple[Fact, ...] = field(default=())
    """Newer releases of this image known to the facts (or that none exists)."""

    def facts(self) -> Iterable[tuple[str, Fact]]:
        yield from (("image", self.image), ("date", self.date), ("tritonserver", self.tritonserver),
                    ("backend", self.backend), ("engine", self.engine), ("cuda", self.driver.cuda),
                    ("bundled driver", self.driver.bundled))
        if self.driver.stated_minimum is not None:
            yield "stated minimum driver", self.driver.stated_minimum
        yield from (("note", f) for f in self.notes)
        yield from (("newer", f) for f in self.newer)


# NVIDIA's data-center driver documentation (web page, read here through a stored copy): "R580 ... Long Term
# Support Branch ... CUDA 13.0+ This driver branch supports CUDA 13.x (through CUDA minor version compatibility)".
R580_CUDA13 = Branch(580, 13, Source("docs.nvidia.com", DATACENTER_DRIVERS, None, "Table 2: R580 supports CUDA 13.x"))

_DATACENTER = re.compile(r"Tesla|\b(H200|H100|H800|H20|A100|A800|A30|A40|A10|A16|A2|L40S?|L20|L4|T4|V100|B200|"
                         r"B300|GB200|GB300)\b", re.I)
_CONSUMER = re.compile(r"GeForce|Quadro|TITAN|\bRTX\b", re.I)


def datacenter_gpus(names: Iterable[str]) -> bool | None:
    """True when every GPU is a data-center GPU (the products NVIDIA's data-center drivers serve), False when one
    is a GeForce / workstation GPU, None when a name is neither known one way nor the other (or there is none)."""
    kinds = [True if _DATACENTER.search(n) and not _CONSUMER.search(n) else False if _CONSUMER.search(n) else None
             for n in names]
    if False in kinds:
        return False
    return True if kinds and all(kinds) else None

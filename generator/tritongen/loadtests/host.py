"""Is the host, not the server, the limit? Host-wide CPU over a level, read at its start and end.

The load generator's own check (metadata.load_generator_cpu) sees only the Locust processes. On a shared host the
server and the load generator compete with everything else, and a level then measures the host. Over each level
this reads, for the whole host:
- the CPU the host spent busy (/proc/stat, every CPU: user, nice, system, irq, softirq), as cores;
- steal (/proc/stat): time the hypervisor gave this VM's CPUs to others;
- the load average (os.getloadavg) at the end, per CPU;
- the share of other processes: the host's busy cores minus the measurement's own (this process and its children,
  waited for or not, and the server under test with its backend stubs: the process listening on its ports, found
  through psutil).
A level is marked when other processes used more than OTHERS_SHARE of the host's CPUs, steal passed STEAL_SHARE,
or the run queue was longer than the CPUs while they were nearly all busy.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import psutil

OTHERS_SHARE = 0.25
"""Other processes' CPU over the host's CPUs above which a level is marked."""
STEAL_SHARE = 0.05
BUSY_SHARE = 0.9


def _proc_stat() -> tuple[float, float, float] | None:
    """(total, idle incl. iowait, steal) jiffies of the host's `cpu` line; None without /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    v = [float(x) for x in fields[1:]]
    v += [0.0] * (8 - len(v))
    # user nice system idle iowait irq softirq steal [guest guest_nice: already inside user and nice]
    return sum(v[:8]), v[3] + v[4], v[7]


def _listening(ports: tuple[int, ...]) -> list[psutil.Process]:
    """The processes listening on `ports` (the server under test, wherever it was started)."""
    if not ports:
        return []
    try:
        pids = {c.pid for c in psutil.net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port in ports and c.pid}
    except (psutil.Error, OSError):
        return []
    out = []
    for pid in pids:
        try:
            out.append(psutil.Process(pid))
        except psutil.Error:
            continue
    return out


def _ours(ports: tuple[int, ...]) -> dict[int, tuple[float, bool]]:
    """{pid: (CPU seconds, a descendant of this process)} of every live process of the measurement."""
    out: dict[int, tuple[float, bool]] = {}
    me = psutil.Process()
    for root in (me, *_listening(ports)):
        try:
            family = (root, *root.children(recursive=True))
        except psutil.Error:
            continue
        for p in family:
            if p.pid == me.pid or p.pid in out:
                continue
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            out[p.pid] = (t.user + t.system, root is me)
    return out


def _self_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system  # children: those waited for


class HostWatch:
    """Host-wide CPU between `start()` and `stop()` (the report's `levels[].host`); `ports`: the server's."""

    def __init__(self, ports: tuple[int, ...] = ()):
        self.ports = ports

    def start(self) -> HostWatch:
        self.t0, self.stat0, self.self0 = time.monotonic(), _proc_stat(), _self_cpu()
        self.ours0 = _ours(self.ports)
        return self

    def stop(self) -> dict | None:
        wall, stat1, self1, ours1 = time.monotonic() - self.t0, _proc_stat(), _self_cpu(), _ours(self.ports)
        if self.stat0 is None or stat1 is None or wall <= 0:
            return None
        cpus = psutil.cpu_count() or 1
        total = stat1[0] - self.stat0[0]
        if total <= 0:
            return None
        busy_share = 1 - (stat1[1] - self.stat0[1]) / total
        steal_share = (stat1[2] - self.stat0[2]) / total
        # A process alive at both reads: its difference; one that started in between: all of its time; one that
        # was waited for in between is in this process's children times.
        ours = (self1 - self.self0) + sum(c - self.ours0.get(pid, (0.0, False))[0] for pid, (c, _) in ours1.items())
        # A child of ours that ended and was waited for is in the children times whole, its past included.
        ours -= sum(c for pid, (c, mine) in self.ours0.items() if mine and pid not in ours1)
        busy_cores = busy_share * cpus
        others = max(0.0, busy_cores - ours / wall)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        reasons = []
        if others / cpus > OTHERS_SHARE:
            reasons.append(f"other processes used {others:.1f} of {cpus} CPUs")
        if steal_share > STEAL_SHARE:
            reasons.append(f"steal {steal_share:.0%}")
        if load is not None and load > cpus and busy_share > BUSY_SHARE:
            reasons.append(f"load average {load:.1f} on {cpus} CPUs, {busy_share:.0%} busy")
        warning = None
        if reasons:
            warning = ("WARNING: the host, not the server, may be the limit: " + "; ".join(reasons)
                       + ". The figures measure a shared host; rerun on a quiet one before acting on them.")
        return {"wall_s": wall, "cpus": cpus, "busy_cores": busy_cores, "ours_cores": ours / wall,
                "others_cores": others, "steal_fraction": steal_share, "load_average": load, "warning": warning}


def line(host: dict) -> str:
    return (f"host: {host['busy_cores']:.1f} of {host['cpus']} CPUs busy ({host['ours_cores']:.1f} the server and "
            f"load generator, {host['others_cores']:.1f} other processes), steal {host['steal_fraction']:.0%}, "
            "load average " + ("-" if host["load_average"] is None else f"{host['load_average']:.1f}"))


def ports(*urls: str | None) -> tuple[int, ...]:
    """The ports of `host:port` URLs (the server's endpoints)."""
    return tuple(int(m.group(1)) for url in urls if url for m in [re.search(r":(\d+)(?:/|$)", url)] if m)

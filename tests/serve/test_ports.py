"""Ports for the servers tritongen starts: outside the kernel's ephemeral range, and never handed to two processes
at once (CI lost a tritonserver's gRPC port to a neighbour while the server was still loading its models)."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys

from tritongen.ports import _ephemeral_range, free_ports


def _reservations():
    import tritongen.ports

    return tritongen.ports._RESERVATIONS


def test_ports_are_distinct_bindable_and_outside_the_ephemeral_range():
    low, high = _ephemeral_range()
    ports = free_ports(40)
    assert len(set(ports)) == 40
    assert not [p for p in ports if low <= p <= high]
    for port in ports:
        with socket.socket() as s:
            s.bind(("0.0.0.0", port))  # raises if anything holds it


def test_a_port_reserved_by_a_living_process_goes_to_no_other_until_it_exits():
    script = ("import json, sys\nfrom tritongen.ports import free_ports\n"
              "print(json.dumps(free_ports(int(sys.argv[1]))), flush=True)\nsys.stdin.read()\n")
    # A process holding most of a small draw's chances: this process's next draws must avoid every one of them.
    holder = subprocess.Popen([sys.executable, "-c", script, "600"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        held = set(json.loads(holder.stdout.readline()))
        assert len(held) == 600
        assert not held & set(free_ports(600))
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    # Its reservations went with it (so they do not leak): no file names it any more.
    left = []
    for f in _reservations().iterdir():
        with contextlib.suppress(FileNotFoundError):  # another process's reservation, released meanwhile
            if f.read_text() == str(holder.pid):
                left.append(f)
    assert not left


def test_a_reservation_left_by_a_dead_process_is_taken_over(monkeypatch):
    import tritongen.ports as ports

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    ports._RESERVATIONS.mkdir(parents=True, exist_ok=True)
    candidates = ports._candidates()
    port = next(p for p in candidates if not (ports._RESERVATIONS / str(p)).exists())
    (ports._RESERVATIONS / str(port)).write_text(dead)
    monkeypatch.setattr(ports, "_candidates", lambda: range(port, port + 1))
    assert free_ports(1) == [port]
    assert (ports._RESERVATIONS / str(port)).read_text() == str(__import__("os").getpid())


def test_a_reservation_being_written_is_not_taken(monkeypatch):
    """An empty file is a reservation whose owner has not yet written its pid: left alone while young."""
    import tritongen.ports as ports

    ports._RESERVATIONS.mkdir(parents=True, exist_ok=True)
    port = next(p for p in ports._candidates() if not (ports._RESERVATIONS / str(p)).exists())
    path = ports._RESERVATIONS / str(port)
    path.write_text("")
    try:
        monkeypatch.setattr(ports, "_candidates", lambda: range(port, port + 1))
        monkeypatch.setattr(ports, "_ATTEMPTS", 5)
        taken = free_ports(1)
        assert taken != [port]  # the kernel's fallback, never the port being reserved
        assert path.read_text() == ""
    finally:
        path.unlink()


def test_a_forked_childs_exit_keeps_the_parents_reservations():
    import os

    import tritongen.ports as ports

    mine = free_ports(3)
    pid = os.fork()
    if pid == 0:  # the child: a normal interpreter exit runs the atexit hooks it inherited
        try:
            ports._release_all()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    for port in mine:
        assert (ports._RESERVATIONS / str(port)).read_text() == str(os.getpid())

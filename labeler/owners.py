"""Which process owns a long job (an ingest, a judge or synth run), and whether it is still alive.

A job records its owner when it starts: the process id, the host name and the process's start time
(so a process id reused by another program after a crash is not mistaken for the owner). A job
whose row still says it is running but whose owner is gone was killed: an ingest is cleaned up, a
judge or synth run shows as ``interrupted``.
"""

from __future__ import annotations

import json
import os
import socket


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), or None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()  # the name in parentheses may hold spaces
    if fields[0] == b"Z":  # a zombie: it has exited, its parent has not collected it yet
        return -1
    return int(fields[19])


def current() -> str:
    """This process as an owner, as stored in the database (JSON)."""
    pid = os.getpid()
    return json.dumps({"pid": pid, "host": socket.gethostname(), "start": _start_time(pid)},
                      separators=(",", ":"))


def alive(owner: str | None) -> bool:
    """Whether the owner recorded as ``owner`` is still running. Unknown owners (rows written
    before owners were recorded, or another host's process) count as alive: only a process known
    to be gone makes a job interrupted."""
    if not owner:
        return True
    try:
        o = json.loads(owner)
        pid, host, start = int(o["pid"]), o["host"], o.get("start")
    except (ValueError, KeyError, TypeError):
        return True
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process with that id exists
    now = _start_time(pid)
    if now == -1:
        return False
    return start is None or now is None or now == start


def is_me(owner: str | None) -> bool:
    """Whether ``owner`` is this process."""
    try:
        return bool(owner) and int(json.loads(owner)["pid"]) == os.getpid() and alive(owner)
    except (ValueError, KeyError, TypeError):
        return False

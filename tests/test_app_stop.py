"""The server stops when told: ``labeler app`` and ``labeler demo`` started as real processes, killed
with SIGTERM or SIGINT (the labeler process only, as a service manager or ``kill PID`` does; or the
whole process group, as Ctrl-C in a terminal does), free their port within 5 s and leave no
Streamlit process behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from labeler.app.launch import GRACE_S

ROOT = Path(__file__).resolve().parents[1]
STOP_WITHIN_S = 5.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    """Every live process whose parent is ``pid`` (read from /proc: no psutil here)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it ended while we looked
            continue
        # the command name (in parentheses) may hold spaces: the fields after it are fixed
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _refuses(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) != 0


def _poll(condition, timeout_s: float, every_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every_s)
    return condition()


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.mark.parametrize(("command", "sig", "group"), [
    ("app", signal.SIGTERM, False), ("app", signal.SIGINT, False), ("demo", signal.SIGTERM, False),
    ("app", signal.SIGINT, True),  # Ctrl-C in a terminal: the whole process group gets it, Streamlit twice
])
def test_killing_labeler_stops_the_server(tmp_path, command, sig, group):
    port = _free_port()
    args = ["--db", str(tmp_path / "stop.db"), command, "--headless", "--port", str(port)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), STREAMLIT_SERVER_FILE_WATCHER_TYPE="none",
               STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    env.pop("LABELER_DB", None)
    log = open(tmp_path / "labeler.log", "w")
    labeler = subprocess.Popen([sys.executable, "-m", "labeler", *args], env=env, cwd=tmp_path,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    servers: list[int] = []
    try:
        assert _poll(lambda: _healthy(port) or labeler.poll() is not None, 60), "no server in 60 s"
        assert labeler.poll() is None, (tmp_path / "labeler.log").read_text()[-2000:]
        servers = _children(labeler.pid)
        assert servers, "labeler app runs Streamlit in a child process"

        if group:
            os.killpg(labeler.pid, sig)  # the session this test started: labeler and its server only
        else:
            labeler.send_signal(sig)
        freed = _poll(lambda: _refuses(port), STOP_WITHIN_S)
        assert freed, f"port {port} still served {STOP_WITHIN_S} s after {sig.name}"
        # labeler ends only once its server has ended (killed after GRACE_S if it hangs); a loaded
        # machine may take a moment between closing the port and the process going away
        assert labeler.wait(GRACE_S + STOP_WITHIN_S) in (0, 128 + sig)
        left = [pid for pid in servers if _alive(pid)]
        assert not left, f"Streamlit left running after labeler ended: {left}"
    finally:
        for pid in [*servers, labeler.pid]:  # only what this test started
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        labeler.wait()
        log.close()

"""How ``labeler app`` and ``labeler demo`` start Streamlit: the ``streamlit run`` command line,
with the app's packaged defaults (``config.toml`` next to this file) for every option the user has
not set.

Streamlit reads ``~/.streamlit/config.toml``, then ``./.streamlit/config.toml``, then
``STREAMLIT_*`` environment variables and command-line flags, each later source winning. The
defaults can only travel as flags (Streamlit reads no other file of ours), and a flag would beat
the user's files, so an option that either file or the environment sets is not passed at all.

``serve`` runs that command and stops it when the launcher is told to stop (SIGTERM, SIGINT), so a
killed ``labeler app`` leaves no server behind.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import LabelerError

APP = Path(__file__).with_name("streamlit_app.py")
DEFAULTS = "config.toml"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
GRACE_S = 10.0  # Streamlit stops in well under a second; one that hangs longer is killed


def packaged_defaults() -> dict[str, Any]:
    """The app's Streamlit defaults as ``{"section.option": value}``, e.g. ``{"theme.primaryColor": "#3b5bdb"}``."""
    return _flatten(tomllib.loads((resources.files(__package__) / DEFAULTS).read_text(encoding="utf-8")))


def env_var(option: str) -> str:
    """The environment variable Streamlit reads for an option, by Streamlit's own rule:
    ``server.maxUploadSize`` -> ``STREAMLIT_SERVER_MAX_UPLOAD_SIZE``."""
    name = option.replace(".", "_")
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return "STREAMLIT_" + re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).upper()


def user_options(*, cwd: Path | None = None, home: Path | None = None,
                 environ: Mapping[str, str] | None = None) -> set[str]:
    """The options the user set in ``~/.streamlit/config.toml``, ``./.streamlit/config.toml`` (of
    ``cwd``, where Streamlit will run) or, among the packaged defaults, a ``STREAMLIT_*`` variable."""
    environ = os.environ if environ is None else environ
    options: set[str] = set()
    for path in ((home or Path.home()) / ".streamlit" / "config.toml",
                 (cwd or Path.cwd()) / ".streamlit" / "config.toml"):
        if not path.is_file():
            continue
        try:
            options |= set(_flatten(tomllib.loads(path.read_text(encoding="utf-8"))))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise LabelerError(f"{path}: cannot read it as TOML ({e}); fix or remove the file") from e
    options |= {option for option in packaged_defaults() if env_var(option) in environ}
    return options


def default_flags(*, cwd: Path | None = None, home: Path | None = None,
                  environ: Mapping[str, str] | None = None) -> list[str]:
    """``--section.option value`` for each packaged default the user has not set."""
    taken = user_options(cwd=cwd, home=home, environ=environ)
    flags: list[str] = []
    for option, value in packaged_defaults().items():
        if option not in taken:
            flags += [f"--{option}", _flag_value(value)]
    return flags


def streamlit_command(*, host: str = "127.0.0.1", port: int | None = None, headless: bool = False,
                      cwd: Path | None = None, home: Path | None = None,
                      environ: Mapping[str, str] | None = None) -> list[str]:
    """The command that serves the app. Usage statistics stay off, the address is ``host`` and
    error details stay hidden whatever the user's config says; the rest follows the user's config,
    then the packaged defaults."""
    cmd = [sys.executable, "-m", "streamlit", "run", str(APP),
           *default_flags(cwd=cwd, home=home, environ=environ),
           "--browser.gatherUsageStats", "false", "--server.address", host, "--client.showErrorDetails", "type"]
    if port:
        cmd += ["--server.port", str(port)]
    if headless:
        cmd += ["--server.headless", "true"]
    return cmd


class _Stop(Exception):
    """Raised by the signal handler to break out of the child's wait and start the grace period."""


def serve(cmd: list[str], env: Mapping[str, str] | None = None) -> int:
    """Run ``cmd`` (the Streamlit server) until it exits and return its exit status (128 + N when
    signal N ended it, as a shell reports it). SIGTERM and SIGINT sent to this process are passed
    on to the server, which is then waited for (killed after ``GRACE_S``): ``subprocess.call``
    would die on SIGTERM and leave the server holding the port."""
    proc = subprocess.Popen(cmd, env=None if env is None else dict(env))

    def forward(signum: int, frame: object) -> None:
        if proc.poll() is None and sys.platform == "win32":
            proc.terminate()  # Windows sends a child no POSIX signal: terminate is its way to stop one
        elif proc.poll() is None:
            proc.send_signal(signum)
        raise _Stop

    previous: dict[int, Any] = {}
    deadline: float | None = None
    try:
        try:
            for s in STOP_SIGNALS:
                previous[s] = signal.signal(s, forward)
        except _Stop:  # told to stop while the handlers were going in
            deadline = time.monotonic() + GRACE_S
        except ValueError:  # not the main thread (an embedding caller): signals stay theirs
            pass
        while True:
            try:
                timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                code = proc.wait(timeout)
                break
            except _Stop:
                # a second signal while stopping passes on too but does not extend the grace period
                deadline = deadline or time.monotonic() + GRACE_S
            except subprocess.TimeoutExpired:
                proc.kill()
                deadline = None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if proc.poll() is None:  # an unexpected error in this process: the server goes with it
            proc.kill()
            proc.wait()
    return 128 - code if code < 0 else code


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            options.update(_flatten(value, f"{prefix}{key}."))
        else:
            options[f"{prefix}{key}"] = value
    return options


def _flag_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)

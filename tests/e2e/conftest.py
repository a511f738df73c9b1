"""Real-browser fixtures: `labeler app` on a free 127.0.0.1 port, driven by Playwright in Debian chromium."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("LABELER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppServer:
    def __init__(self, db_path: Path, env: dict | None = None, port: int | None = None, *,
                 base_env: dict | None = None):
        """``labeler app`` on ``db_path`` (cwd: its folder), healthy when this returns. ``env`` is
        added to ``base_env`` (default: this process's environment)."""
        self.db_path = db_path
        self.port = port or _free_port()  # the same port again: a restarted server the page reconnects to
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = db_path.with_suffix(f".server-{self.port}-{time.monotonic_ns()}.log")
        # started as a user starts it (`labeler app`), so the packaged configuration is what is
        # tested; in a session of its own, so that kill() takes the launcher and its server together
        cmd = [sys.executable, "-m", "labeler", "--db", str(db_path), "app", "--headless", "--port", str(self.port)]
        full_env = dict(os.environ if base_env is None else base_env, **(env or {}))
        self.proc = subprocess.Popen(cmd, env=full_env, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                     cwd=db_path.parent, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/_stcore/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"streamlit did not become healthy in 60 s: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL to the launcher and its Streamlit server at once: the server dies as a crash would."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """SIGTERM to `labeler app`, which passes it on to its server and waits for it."""
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()


@pytest.fixture(scope="module")
def browser():
    # module scope, not session: Playwright's sync API keeps an event loop registered on the main
    # thread while it runs, which would break later tests that start their own loop
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None and not os.environ.get("LABELER_CHROMIUM"):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: .ci/run must apt-get install chromium")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def start_app(tmp_path) -> Iterator:
    servers: list[AppServer] = []

    def start(db_path: Path, env: dict | None = None, port: int | None = None) -> AppServer:
        server = AppServer(db_path, env, port)
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(20_000)
    yield pg
    context.close()


def settle(page, quiet_ms: int = 250, timeout_s: float = 20.0) -> None:
    """Wait until the app has finished rerunning: no stale elements for ``quiet_ms``.

    A key pressed while a rerun is still drawing can race with it; tests settle before pressing."""
    import time as _time

    deadline = _time.monotonic() + timeout_s
    quiet_since = None
    while _time.monotonic() < deadline:
        stale = page.evaluate("() => document.querySelectorAll('[data-stale=true]').length")
        now = _time.monotonic()
        if stale:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif (now - quiet_since) * 1000 >= quiet_ms:
            return
        page.wait_for_timeout(25)


def wait_signed_in(page) -> None:
    """Wait until the page shows a signed-in session and the browser holds its session cookie.

    The cookie is written by a script in an ``st.html`` element, which Streamlit loads lazily and
    runs in an effect after the paint that already shows "Sign out": a reload or a new URL opened
    straight after the button appears can beat the cookie, so tests that navigate wait for both."""
    page.get_by_role("button", name="Sign out").wait_for()
    page.wait_for_function("() => document.cookie.includes('labeler_session=')")


def sign_in_by_name(page, url: str, name: str, path: str = "") -> None:
    """Open ``url + path`` and sign in with a name (no accounts set up): the name box, then the
    page at ``path``. The URL never signs anyone in; a browser with a live session cookie for this
    database is already signed in and goes straight to the page."""
    page.goto(url + path)
    name_box = page.get_by_label("Your name")
    name_box.or_(page.get_by_role("button", name="Sign out")).first.wait_for()
    if name_box.count():
        name_box.fill(name)
        page.get_by_role("button", name="Start labeling").click()
        wait_signed_in(page)
        if path:  # the first page after signing in is the default one; the session cookie holds
            page.goto(url + path)
    page.get_by_role("button", name="Sign out").wait_for()

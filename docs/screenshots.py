"""Retake the screenshots in docs/images/ (the Label, Metrics and Judge pages) from the demo data,
in a real headless Chromium, starting everything as a user does.

    python docs/screenshots.py           # needs Debian's chromium (apt-get install chromium) and playwright

Steps: `labeler demo --no-app` builds the demo database in a temporary folder; `labeler judge run`
calibrates the relevance judge on the 50 labeled demo questions against a local stand-in for the
LLM endpoint (tests/fake_openai.py on 127.0.0.1, whose grades follow the demo's human grades with a
seeded share moved by one step, so the Judge page shows real statistics without a paid model);
`labeler app --headless` serves the app; Playwright drives /usr/bin/chromium (launched with the
flags tests/e2e/conftest.py uses), signs in by name and saves each page once it has drawn its
content. The images are viewport-sized PNGs at 1400 x 900.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
CHROMIUM = os.environ.get("LABELER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
VIEWPORT = {"width": 1400, "height": 900}
LEAD = "lena"


def labeler(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run the `labeler` command of this checkout, as a user would type it; its stdout."""
    cmd = [sys.executable, "-m", "labeler", *args]
    result = subprocess.run(cmd, cwd=cwd, env={**checkout_env(), **(env or {})}, capture_output=True,
                            text=True, timeout=600)
    if result.returncode:
        raise SystemExit(f"labeler {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def checkout_env() -> dict[str, str]:
    """The environment with this checkout first on the path, so its labeler is the one that runs."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def human_grades(db_path: Path) -> dict[tuple[str, str], int]:
    """(question, chunk as the judge's prompt shows it: title, then text) -> the demo's human grade,
    for the stand-in judge to follow."""
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT q.question, d.title, d.text, max(r.grade) FROM relevance_labels r "
                          "JOIN queries q ON q.pk = r.query_pk JOIN documents d ON d.pk = r.doc_pk "
                          "GROUP BY r.query_pk, r.doc_pk").fetchall()
    return {(question, f"{title}\n{text}" if title else text or ""): grade
            for question, title, text, grade in rows}


def noisy(grades: dict[tuple[str, str], int]):
    """The stand-in judge's grade: the human one, one step higher for a seeded 15% of the pairs and
    one lower for another 10% (a judge that agrees well, not perfectly)."""

    def grade_of(question: str, text: str) -> int | None:
        grade = grades.get((question, text))
        if grade is None:
            return None
        draw = int(hashlib.sha256(f"{question}\0{text}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        return grade + 1 if draw < 0.15 else grade - 1 if draw < 0.25 else grade

    return grade_of


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"labeler app exited:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise SystemExit("labeler app did not become healthy in 90 s")


def settle(page, quiet_ms: int = 600) -> None:
    """Wait until no element is stale (the app finished its rerun) for ``quiet_ms``."""
    quiet_since = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stale = page.evaluate("() => document.querySelectorAll('[data-stale=true]').length")
        now = time.monotonic()
        if stale or quiet_since is None:
            quiet_since = None if stale else now
        elif (now - quiet_since) * 1000 >= quiet_ms:
            return
        page.wait_for_timeout(50)


def shoot(browser, url: str) -> None:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(url + "/label")
    page.get_by_label("Your name").fill(LEAD)  # no accounts: a name signs in; the first is the lead
    page.get_by_role("button", name="Start labeling").click()
    page.get_by_role("button", name="Sign out").wait_for()

    page.goto(url + "/label")
    page.get_by_text(re.compile(r"^0 of \d+ retrieved chunks graded")).wait_for()
    settle(page)
    page.keyboard.press("3")  # grade the first two chunks, as an annotator would, to show grades
    page.keyboard.press("0")
    page.get_by_text(re.compile(r"^2 of \d+ retrieved chunks graded")).wait_for()
    page.locator(".lb-save", has_text="saved").wait_for()
    settle(page)
    # the focus moved down the list and scrolled it; bring the question back into the picture
    page.get_by_text(re.compile(r"^Query q-")).first.scroll_into_view_if_needed()
    settle(page)
    page.screenshot(path=IMAGES / "label.png")

    page.goto(url + "/metrics")
    page.get_by_test_id("stMetricLabel").get_by_text("recall@5", exact=True).wait_for()
    page.get_by_test_id("stVegaLiteChart").first.wait_for()
    settle(page)
    page.screenshot(path=IMAGES / "metrics.png")

    page.goto(url + "/judge")
    page.get_by_text("Gate ", exact=False).first.wait_for()
    page.get_by_test_id("stVegaLiteChart").first.wait_for()
    settle(page)
    page.screenshot(path=IMAGES / "judge.png")
    context.close()


def main() -> None:
    sys.path.insert(0, str(ROOT))  # the stand-in LLM endpoint lives with the tests
    from playwright.sync_api import sync_playwright

    from tests.fake_openai import FakeOpenAI, grade_responder

    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install chromium")
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(labeler("demo", "--no-app", cwd=folder).strip())
        db_path = folder / "labeler-demo.db"
        with FakeOpenAI() as llm:
            llm.responder = grade_responder(noisy(human_grades(db_path)))
            env = {"OPENAI_BASE_URL": llm.url, "OPENAI_API_KEY": "sk-stand-in", "LABELER_MODEL": "stand-in"}
            print(labeler("--db", str(db_path), "judge", "run", "--judge", "relevance.v1", "--on", "labeled",
                          cwd=folder, env=env).strip().splitlines()[-1])
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = folder / "app.log"
        with open(log, "w") as out:
            server = subprocess.Popen([sys.executable, "-m", "labeler", "--db", str(db_path), "app",
                                       "--headless", "--port", str(port)],
                                      cwd=folder, env=checkout_env(), stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_healthy(url, server, log)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    shoot(browser, url)
                finally:
                    browser.close()
        finally:
            server.terminate()
            server.wait(30)
    for name in ("label", "metrics", "judge"):
        print(f"wrote {(IMAGES / f'{name}.png').relative_to(ROOT)}")


if __name__ == "__main__":
    main()

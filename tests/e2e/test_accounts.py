"""Accounts in a real browser: sign-in with a password, a reload that stays signed in, the URL
impersonation attempt, an annotator's Data page without upload or export, a one-time sign-in
link, throttled wrong passwords, a removed account's open tab, the session cookie's flags over
http and https, and `labeler app --host 0.0.0.0` refusing to start without sign-in."""

from __future__ import annotations

import datetime as dt
import os
import socket
import sqlite3
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import labeler
import labeler.labels as labels
from labeler import accounts
from tests.e2e.conftest import wait_signed_in
from tests.e2e.test_label_page import make_db, saved


def team_db(tmp_path):
    path = make_db(tmp_path)
    db = labeler.connect(path)
    accounts.add_user(db, "lena", "lead", password="lena-password")
    accounts.add_user(db, "bob", "annotator", password="bob-password")
    db.close()
    return path


def sign_in(page, url: str, name: str, password: str, *, path: str = "") -> None:
    page.goto(url + path)
    page.get_by_role("textbox", name="Name").fill(name)
    page.get_by_role("textbox", name="Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def session_cookie(page) -> dict:
    (cookie,) = [c for c in page.context.cookies() if c["name"] == "labeler_session" and c["value"]]
    return cookie


def nav_links(page) -> list[str]:
    return [t.strip() for t in page.locator('[data-testid="stSidebarNav"] a').all_inner_texts()]


def test_sign_in_reload_and_url_impersonation(tmp_path, start_app, page):
    path = team_db(tmp_path)
    server = start_app(path)
    # bob opens the lead's Settings page with the lead's name in the URL
    sign_in(page, server.url, "bob", "bob-password", path="/settings?annotator=lena")
    page.get_by_text("bob").first.wait_for()
    page.get_by_text("retrieved chunks graded").or_(page.get_by_text("Settings is for leads only")).first.wait_for()
    assert "Settings" not in nav_links(page) and "Adjudication" not in nav_links(page)
    page.goto(server.url + "/settings?annotator=lena")
    page.get_by_text("retrieved chunks graded").or_(page.get_by_text("for leads only")).first.wait_for()
    assert page.get_by_role("button", name="Save settings").count() == 0
    # a reload stays signed in as bob (the cookie session), and the grade is written as bob
    page.goto(server.url + "/?annotator=lena")
    page.get_by_text("retrieved chunks graded").wait_for()
    page.locator(".lb-chunk").first.wait_for()
    page.mouse.click(5, 5)
    page.keyboard.press("3")
    page.get_by_text("1 of 3 retrieved chunks graded").wait_for()
    saved(page)
    conn = sqlite3.connect(path)
    who = {r[0] for r in conn.execute("SELECT annotator FROM label_events WHERE field = 'grade'")}
    assert who == {"bob"}
    cookie = session_cookie(page)  # over plain http: SameSite=Strict, and Secure would lose it
    assert (cookie["sameSite"], cookie["secure"]) == ("Strict", False)
    # bob's Data page: counts, no upload, no export
    page.goto(server.url + "/data")
    page.get_by_text("Uploading logs and exporting the golden set are for leads.").wait_for()
    assert page.get_by_role("button", name="Ingest").count() == 0
    assert page.get_by_text("Download").count() == 0
    # signing out ends the session: the next visit asks for the password again
    page.get_by_role("button", name="Sign out").click()
    page.get_by_role("textbox", name="Password").wait_for()
    page.goto(server.url)
    page.get_by_role("textbox", name="Password").wait_for()


def test_wrong_passwords_are_throttled_per_name(tmp_path, start_app, page):
    path = team_db(tmp_path)
    server = start_app(path)
    for _ in range(accounts.FREE_FAILURES):
        sign_in(page, server.url, "lena", "wrong")
        page.get_by_text("wrong name or password").wait_for()
    # a guessing script goes on at lena's password, each try after the last wait ran out (its clock
    # is given: 1,000 s apart, past the longest wait): the throttle now holds for longer than any
    # machine takes to load the next page, however slow (a 2 s window raced with the browser)
    db = labeler.connect(path)
    at = dt.datetime.now(dt.UTC)
    for _ in range(3):
        at += dt.timedelta(seconds=1000)
        with pytest.raises(accounts.SignInError, match="wrong name or password"):
            accounts.authenticate(db, "lena", "wrong", now=at)
    db.close()
    sign_in(page, server.url, "lena", "lena-password")  # even the right password waits now
    page.get_by_text("too many failed sign-ins for lena").wait_for()
    assert "Settings" not in nav_links(page)
    # the throttle is per name: bob is not held up by guesses at lena's password
    sign_in(page, server.url, "bob", "bob-password")
    page.get_by_text("retrieved chunks graded").wait_for()


def test_lead_signs_in_and_opens_settings(tmp_path, start_app, page):
    server = start_app(team_db(tmp_path))
    sign_in(page, server.url, "lena", "lena-password")
    page.get_by_role("link", name="Settings").click()
    page.get_by_role("button", name="Save settings").wait_for()
    page.reload()
    page.get_by_role("button", name="Save settings").wait_for()


def test_one_time_link_sets_the_password(tmp_path, start_app, page):
    path = make_db(tmp_path)
    db = labeler.connect(path)
    accounts.add_user(db, "lena", "lead", password="lena-password")
    token = accounts.add_user(db, "cara").token
    db.close()
    server = start_app(path)
    page.goto(f"{server.url}/?invite={token}")
    page.get_by_role("textbox", name="New password").fill("cara-password")
    page.get_by_role("textbox", name="The same password again").fill("cara-password")
    page.get_by_role("button", name="Set password and sign in").click()
    page.get_by_text("retrieved chunks graded").wait_for()
    page.goto(f"{server.url}/?invite={token}")  # the link is used up; the session still holds
    page.get_by_text("retrieved chunks graded").wait_for()
    assert accounts.authenticate(labeler.connect(path), "cara", "cara-password").name == "cara"
    assert labels.get_role(labeler.connect(path), "cara") == "annotator"


def test_app_refuses_every_interface_without_sign_in(tmp_path):
    path = make_db(tmp_path)
    run = subprocess.run([sys.executable, "-m", "labeler", "--db", str(path), "app", "--host", "0.0.0.0",
                          "--headless"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr.startswith("Error: refusing to serve on 0.0.0.0 without sign-in")
    assert "Traceback" not in run.stderr


ENDINGS = {
    "removed": lambda db: accounts.remove_user(db, "bob", by="lena"),
    "password changed": lambda db: accounts.set_password(db, "bob", "bob-new-password", by="bob"),
}


@pytest.mark.parametrize("ending", ENDINGS)
def test_an_ended_sessions_open_tab_writes_nothing_and_is_signed_out(tmp_path, start_app, page, ending):
    path = team_db(tmp_path)
    server = start_app(path)
    sign_in(page, server.url, "bob", "bob-password")
    page.locator(".lb-chunk").first.wait_for()
    page.get_by_text("0 of 3 retrieved chunks graded").wait_for()
    ENDINGS[ending](labeler.connect(path))  # while bob's tab is open
    page.mouse.click(5, 5)
    page.keyboard.press("3")
    page.get_by_role("textbox", name="Password").wait_for()  # the rerun after the key's callback
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM label_events").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM relevance_labels").fetchone()[0] == 0
    page.get_by_text("Your session ended").wait_for()
    page.reload()  # the cookie of the ended session signs nobody in
    page.get_by_role("textbox", name="Password").wait_for()
    assert page.locator(".lb-chunk").count() == 0


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def _https_app(path: Path, cert: Path, key: Path) -> tuple[subprocess.Popen, str]:
    """The app served over https by Streamlit itself (server.sslCertFile / sslKeyFile)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = Path(labeler.__file__).parent / "app" / "streamlit_app.py"
    log = open(path.with_suffix(".https.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(app), "--server.headless", "true",
                             "--server.address", "127.0.0.1", "--server.port", str(port),
                             "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
                             "--server.sslCertFile", str(cert), "--server.sslKeyFile", str(key)],
                            env=dict(os.environ, LABELER_DB=str(path)), stdout=log, stderr=subprocess.STDOUT,
                            cwd=path.parent)
    url, trusted = f"https://127.0.0.1:{port}", ssl.create_default_context(cafile=str(cert))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(path.with_suffix(".https.log").read_text()[-2000:])
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=1, context=trusted) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("streamlit over https did not become healthy in 60 s")


def test_over_https_the_session_cookie_is_secure_and_strict(tmp_path, browser):
    path = team_db(tmp_path)
    proc, url = _https_app(path, *_self_signed(tmp_path))
    context = browser.new_context(ignore_https_errors=True)
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        sign_in(page, url, "bob", "bob-password")
        page.get_by_text("retrieved chunks graded").wait_for()
        wait_signed_in(page)
        cookie = session_cookie(page)
        assert (cookie["sameSite"], cookie["secure"]) == ("Strict", True)
        page.reload()  # and it works: the reload stays signed in
        page.get_by_text("retrieved chunks graded").wait_for()
    finally:
        context.close()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:  # a loaded machine: the server is stopped all the same
            proc.kill()
            proc.wait()

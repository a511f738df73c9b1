"""Nothing from the logs makes an annotator's browser fetch anything: on a database whose every logged
or user-written field carries markdown images, HTML images, links, ``javascript:`` links and bare
URLs pointing at a tracker server on 127.0.0.1 (tests/hostile.py), a lead and an annotator visit
every page (tabs, expanders and estimates opened, a file with a hostile name uploaded) and the
tracker records no request, and no page has a link or image to the tracker or a ``javascript:``
link. A request the test itself sends to the tracker from the page proves the browser reaches it.
Beyond the tracker, the browser sends no request at all (page.on("request")) to any host but the
app's own host:port: no favicon or font from an outside server, no analytics."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

import labeler
from labeler import accounts
from tests import hostile
from tests.e2e.conftest import settle, wait_signed_in

GIF = bytes.fromhex("47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b")


class Tracker:
    """A loopback HTTP server that answers every request with a 1x1 GIF and records its path."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.outside: Requests | None = None  # the requests the browser sent anywhere but the app
        self.lock = threading.Condition()
        tracker = self

        class Handler(BaseHTTPRequestHandler):
            def record(self) -> None:
                with tracker.lock:
                    tracker.paths.append(self.path)
                    tracker.lock.notify_all()
                self.send_response(200)
                self.send_header("Content-Type", "image/gif")
                self.send_header("Content-Length", str(len(GIF)))
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(GIF)

            do_GET = do_POST = do_HEAD = do_OPTIONS = do_PUT = record

            def log_message(self, format, *args) -> None:  # quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def leaks(self) -> list[str]:
        with self.lock:
            return [p for p in self.paths if not p.startswith("/control")]

    def wait_for(self, path: str, timeout: float = 10.0) -> bool:
        with self.lock:
            return self.lock.wait_for(lambda: path in self.paths, timeout)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def tracker():
    t = Tracker()
    yield t
    t.stop()


class Requests:
    """Every request a page sends (page.on("request")) that goes to a host:port other than the app's;
    data: and blob: URLs go nowhere. The test's own control images to the tracker are left out."""

    def __init__(self, app_url: str, control_base: str) -> None:
        self.app = urlsplit(app_url).netloc
        self.control = f"{control_base}/control-"
        self.foreign: list[str] = []

    def watch(self, page) -> None:
        page.on("request", lambda request: self.record(request.url))

    def record(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob", "about") or url.startswith(self.control):
            return
        if parts.netloc != self.app:
            self.foreign.append(url)


PASSWORD = "hostile-password"


def sign_in(page, server, name: str) -> None:
    """Sign ``name`` in with their account on a fresh page (the one place that knows how)."""
    page.goto(server.url)
    page.get_by_role("textbox", name="Name").fill(name)
    page.get_by_role("textbox", name="Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    wait_signed_in(page)


def control(page, tracker: Tracker, name: str) -> None:
    """The page itself loads an image from the tracker, and the tracker sees it: requests can get there."""
    page.evaluate("src => new Promise(done => { const i = new Image(); i.onload = i.onerror = done; i.src = src; })",
                  f"{tracker.base}/{name}")
    assert tracker.wait_for(f"/{name}"), tracker.paths


def assert_nothing_loaded(page, tracker: Tracker, where: str) -> None:
    settle(page)
    assert tracker.outside.foreign == [], (where, tracker.outside.foreign)
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete)")
    live = page.evaluate("""base => [
        ...Array.from(document.querySelectorAll('img, image, source, iframe, video, audio, object, embed'))
            .map(e => e.outerHTML).filter(h => h.includes(base)),
        ...Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'))
            .filter(h => h.includes(base) || h.trim().toLowerCase().startsWith('javascript:')),
    ]""", tracker.base)
    assert tracker.leaks() == [], (where, tracker.leaks())
    assert live == [], (where, live)


def pick(page, key: str, option: str) -> None:
    """Choose the first option of the selectbox with widget key ``key`` whose text contains ``option``."""
    box = page.locator(f".st-key-{key} input[role=combobox]")
    box.click()
    box.press("ArrowDown")  # Streamlit 1.67's combobox opens its list from the keyboard, not on a click
    page.get_by_role("option").filter(has_text=option).first.click()
    settle(page)


def visit(page, link: str, ready: str) -> None:
    page.get_by_role("link", name=link, exact=True).click()
    page.get_by_text(ready, exact=False).first.wait_for()
    settle(page)


def tab(page, name: str, ready: str | None) -> None:
    page.get_by_role("tab", name=name).click()
    if ready is None:  # a table only (drawn on a canvas, no text to wait for)
        page.locator("[role=tabpanel]:visible [data-testid=stDataFrame]").first.wait_for()
    else:
        page.get_by_text(ready, exact=False).first.wait_for()
    settle(page)


def label_page(page, tracker, h: hostile.Hostile, *, skip: bool) -> None:
    page.get_by_text("retrieved chunks graded").wait_for()
    # the question shows literally (the lead's upload on the Data page queued a new, older one)
    page.locator('.lb-plain[data-key="question"]', has_text=f"{h.base}/md-").wait_for()
    page.get_by_text("My history").click()
    page.get_by_role("button", name="submitted").first.wait_for()
    for expander in ("Guidelines", "Grades"):
        page.get_by_text(expander, exact=True).click()
    assert_nothing_loaded(page, tracker, "Label")
    if skip:  # the next item is the accepted synthetic question (seed chunks, proposal)
        page.get_by_role("button", name="Skip").click()
        page.get_by_text("Generator's proposal").wait_for()
        assert_nothing_loaded(page, tracker, "Label, synthetic item")


def common_pages(page, tracker, h: hostile.Hostile, upload: bytes, *, lead: bool) -> None:
    if not lead:
        visit(page, "Data", "are for leads")
        assert_nothing_loaded(page, tracker, "Data")
    else:
        upload_file(page, tracker, h, upload)
    # two logged retrievers with hostile names, none called production: the page names them and asks
    visit(page, "Metrics", "none is called production")
    assert_nothing_loaded(page, tracker, "Metrics, no retriever picked")
    pick(page, "m_retriever", "")
    page.get_by_text("Worst queries by").first.wait_for()
    page.get_by_text("Compare retrievers").first.wait_for()
    page.get_by_text("Topics and coverage").first.wait_for()
    assert_nothing_loaded(page, tracker, "Metrics")
    review_synth_judge(page, tracker, lead=lead)


def upload_file(page, tracker, h: hostile.Hostile, upload: bytes) -> None:
    visit(page, "Data", "Upload")
    page.locator("input[type=file]").set_input_files(
        {"name": hostile.file_name(h.base), "mimeType": "application/json", "buffer": upload})
    page.get_by_role("button", name="Ingest").click()
    page.get_by_text(" records: ", exact=False).first.wait_for()
    page.get_by_text(f"{h.base.removeprefix('http://')}/md-file) <img").first.wait_for()  # the file name, literally
    assert_nothing_loaded(page, tracker, "Data")
    pick(page, "export_format", "ragas")  # one retriever's ranking, several logged and none called production
    page.get_by_text("none called production").first.wait_for()
    page.get_by_role("button", name="Undo…").click()  # the preview names the hostile logs file
    page.get_by_text("Undo ingest").first.wait_for()
    assert_nothing_loaded(page, tracker, "Data, export and undo")


def review_synth_judge(page, tracker, *, lead: bool) -> None:
    visit(page, "Review", "Acceptance rate per generator setting")
    assert_nothing_loaded(page, tracker, "Review")

    visit(page, "Synth", "Questions written by an LLM")
    page.get_by_role("button", name="Estimate cost").click()
    page.get_by_text("Before you run").wait_for()
    tab(page, "Rejections", "quote_not_found")
    tab(page, "Distribution shift", "Compute the report")
    page.get_by_role("button", name="Compute the report").click()
    page.get_by_text("Length and wording").wait_for()
    tab(page, "Runs", None)
    assert_nothing_loaded(page, tracker, "Synth")

    visit(page, "Judge", "Confusion matrix")
    for name, ready in (("Disagreements", "Tags in this run" if lead else "it is for leads"), ("Compare runs", "is paired"),
                        ("Run a judge", "Sample size"), ("Stability & drift", "Agreement over time"),
                        ("Rubric & gate", "Calibration gate")):
        tab(page, name, ready)
        if name == "Run a judge":
            page.get_by_role("button", name="Estimate cost").click()
            page.get_by_text("with rubric").wait_for()
    assert_nothing_loaded(page, tracker, "Judge")


def test_hostile_logs_make_no_browser_request(tmp_path, tracker, start_app, browser):
    h = hostile.build(tmp_path / "hostile.db", tracker.base)
    db = labeler.connect(h.path)
    for name, role in ((h.lead, "lead"), (h.annotator, "annotator")):  # accounts, as a team runs it
        accounts.add_user(db, name, role, password=PASSWORD)
    db.close()
    upload = "".join(json.dumps(r) + "\n" for r in hostile.log_records(h.base, prefix="upload-")[:1]).encode()
    server = start_app(h.path, env={"LABELER_MODEL": h.p("model"), "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    outside = tracker.outside = Requests(server.url, tracker.base)

    for name in (h.lead, h.annotator):
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(30_000)
        outside.watch(page)
        try:
            sign_in(page, server, name)
            control(page, tracker, f"control-{len(tracker.paths)}")
            label_page(page, tracker, h, skip=name == h.lead)
            common_pages(page, tracker, h, upload, lead=name == h.lead)
            if name == h.lead:
                visit(page, "Adjudication", "item(s) to look at")
                page.get_by_text(f"{h.base.removeprefix('http://')}/md-query_id-0) <img").first.wait_for()
                assert_nothing_loaded(page, tracker, "Adjudication")
                visit(page, "Settings", "Accounts and roles")
                assert_nothing_loaded(page, tracker, "Settings")
                visit(page, "Items", "item(s) match")
                tab(page, "Flags (1)", "flagged by")
                assert_nothing_loaded(page, tracker, "Items")
                page.get_by_role("button", name="Open", exact=True).first.click()  # the lead view: everyone's grades
                page.get_by_text("Lead view · query").first.wait_for()
                assert_nothing_loaded(page, tracker, "Label, lead view")
                visit(page, "Annotators", "Each pair of annotators")
                assert_nothing_loaded(page, tracker, "Annotators")
            control(page, tracker, f"control-{len(tracker.paths)}")  # anything sent before has arrived too
        finally:
            context.close()
    assert tracker.leaks() == []
    assert outside.foreign == []

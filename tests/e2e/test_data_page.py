"""The Data page in a real browser: upload a small log, see the counts change, rows land in SQLite."""

from __future__ import annotations

import json
import sqlite3

from labeler.demo import build_demo
from tests.e2e.conftest import sign_in_by_name


def tile(page, label: str) -> str:
    label_el = page.get_by_test_id("stMetricLabel").get_by_text(label, exact=True)
    return page.get_by_test_id("stMetric").filter(has=label_el).get_by_test_id("stMetricValue").inner_text()


def test_upload_a_log_in_the_browser(tmp_path, start_app, page):
    db_path = tmp_path / "demo.db"
    build_demo(db_path)
    server = start_app(db_path)
    sign_in_by_name(page, server.url, "alice", "/data")
    page.get_by_test_id("stMetricLabel").get_by_text("Queries", exact=True).wait_for()
    assert tile(page, "Queries") == "166"

    log = tmp_path / "new-traffic.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in [
        {"question": "can i pay invoices with apple pay?", "retrieved": [{"id": "docs/billing-0011", "score": 0.4}]},
        {"question": "wie exportiere ich stunden", "retrieved": [{"id": "new-chunk-1", "text": "<b>x</b>", "score": 0.2}]},
    ]) + "\n")
    page.locator("input[type=file]").set_input_files(str(log))
    page.get_by_role("button", name="Ingest").click()
    page.get_by_text("new-traffic.jsonl: 2 records: 2 new").wait_for()
    assert tile(page, "Queries") == "168"

    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT count(*) FROM queries WHERE question = 'wie exportiere ich stunden'").fetchone() == (1,)
    assert conn.execute("SELECT text FROM documents WHERE doc_id = 'new-chunk-1'").fetchone() == ("<b>x</b>",)


def test_a_bad_upload_shows_the_error_and_writes_nothing(tmp_path, start_app, page):
    db_path = tmp_path / "demo.db"
    build_demo(db_path)
    server = start_app(db_path)
    sign_in_by_name(page, server.url, "alice", "/data")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "ok", "retrieved": []}\n{"retrieved": []}\n')
    page.locator("input[type=file]").set_input_files(str(bad))
    page.get_by_role("button", name="Ingest").click()
    page.get_by_text("bad.jsonl: 1 invalid record(s); nothing was written").wait_for()
    page.get_by_text("bad.jsonl:2: question: missing").wait_for()
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT count(*) FROM queries").fetchone() == (166,)


def test_upload_a_trace_written_by_the_otel_console_exporter(tmp_path, start_app, page):
    # what the OpenTelemetry console exporter wrote (tests/fixtures/tools): .txt, spans of a whole trace
    from pathlib import Path

    spans = Path(__file__).parent.parent / "fixtures" / "tools" / "otel" / "llamaindex_console.txt"
    db_path = tmp_path / "demo.db"
    build_demo(db_path)
    server = start_app(db_path)
    sign_in_by_name(page, server.url, "alice", "/data")
    page.locator("input[type=file]").set_input_files(str(spans))
    page.get_by_role("button", name="Ingest").click()
    page.get_by_text("llamaindex_console.txt: 2 records: 2 new").wait_for()
    page.get_by_text("skipped 24 spans that are not retrievals").wait_for()
    assert tile(page, "Queries") == "168"
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT count(*) FROM queries WHERE query_id IN ('2b491044d5e34124', 'defc044a09325626') "
                        "AND answer IS NOT NULL").fetchone() == (2,)


def test_an_upload_is_redacted_and_the_page_counts_types(tmp_path, start_app, page):
    db_path = tmp_path / "demo.db"
    build_demo(db_path)
    server = start_app(db_path)
    sign_in_by_name(page, server.url, "alice", "/data")
    page.get_by_test_id("stMetricLabel").get_by_text("Queries", exact=True).wait_for()
    log = tmp_path / "pii.jsonl"
    log.write_text(json.dumps({"question": "refund to card 4111 1111 1111 1111 please, mail jane.doe@example.com",
                               "retrieved": [{"id": "docs/billing-0011", "score": 0.4}]}) + "\n")
    page.locator("input[type=file]").set_input_files(str(log))
    page.get_by_role("button", name="Ingest").click()
    page.get_by_text("pii.jsonl: 1 records: 1 new").wait_for()
    page.get_by_text("redacted: CARD 1, EMAIL 1").wait_for()
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT count(*) FROM queries WHERE question = "
                        "'refund to card [CARD_1] please, mail [EMAIL_1]'").fetchone() == (1,)
    conn.close()
    data = b"".join(p.read_bytes() for p in tmp_path.glob("demo.db*"))
    assert b"jane.doe@example.com" not in data and b"4111 1111 1111 1111" not in data

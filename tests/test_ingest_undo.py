"""Undoing an ingest and removing single queries (labeler.ingest.undo, `labeler ingest list/undo`,
`labeler queries remove`)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from labeler import accounts
from labeler import db as store
from labeler.accounts.settings import set_setting
from labeler.cli import cli
from labeler.errors import RoleError
from labeler.ingest import ingest_corpus, ingest_logs
from labeler.ingest.undo import UndoRefused, list_ingests, remove_queries, undo_ingest
from labeler.labels import next_item, set_grade, set_status, sync_queue
from labeler.search import search_text

from .conftest import tiny_records

# bookkeeping that an undo changes on purpose (the ingest's row stays, marked undone; the audit
# trail gains the undo; the queue plans again); the FTS index is compared through its vocabulary
SKIP = {"ingests", "audit_events", "queue_meta", "_sqlite_migrations", "documents_fts", "documents_fts_data",
        "documents_fts_idx", "documents_fts_docsize", "documents_fts_config", "documents_fts_vocab"}


def dump(db) -> dict:
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    out = {t: sorted(map(repr, db.execute(f"SELECT * FROM [{t}]").fetchall())) for t in tables if t not in SKIP}
    out["fts_vocab"] = sorted(db.execute("SELECT term, doc, cnt FROM documents_fts_vocab").fetchall())
    return out


def ingest_ids(db) -> list[int]:
    return [i.id for i in list_ingests(db)]


def pk_of(db, query_id: str) -> int:
    return db.execute("SELECT pk FROM queries WHERE query_id = ?", [query_id]).fetchone()[0]


def doc_pk(db, doc_id: str) -> int:
    return db.execute("SELECT pk FROM documents WHERE doc_id = ?", [doc_id]).fetchone()[0]


def test_undo_of_an_ingest_that_brought_only_new_rows_restores_every_table(db, write_log):
    ingest_logs(db, write_log(tiny_records(4, prefix="a")))
    sync_queue(db)
    before = dump(db)
    ingest_logs(db, write_log(tiny_records(5, prefix="b")))
    sync_queue(db)
    assert search_text(db, "chunk about b2")
    second = ingest_ids(db)[-1]
    result = undo_ingest(db, second)
    assert (result.queries_removed, result.retrievals_removed, result.documents_removed) == (5, 15, 15)
    sync_queue(db)
    assert dump(db) == before
    # the search index forgets the removed chunks and still finds the others
    assert not [h for h in search_text(db, "b2 chunk") if h.doc_id.startswith("b")]
    assert search_text(db, "chunk about a1")[0].doc_id.startswith("a001")
    info = list_ingests(db)[-1]
    assert info.state == "undone" and info.undone_at and info.queries == 5
    assert store.stats(db)["ingests"] == 1  # the undone one no longer counts
    events = db.execute("SELECT action, target FROM audit_events WHERE action = 'ingest_undo'").fetchall()
    assert events == [("ingest_undo", f"{second} {info.path}")]


def test_undo_keeps_what_another_ingest_logged_too(db, write_log):
    """Keyless lines: the same question and ranking logged by two ingests is one query with two
    occurrences. Undoing the first keeps the query (and its ranking, documents) for the second,
    with one occurrence; a chunk both ingests' queries use stays."""
    base = tiny_records(2, prefix="s")
    for r in base:
        del r["query_id"]
    first_only = {"question": "only in the first?", "retrieved": [{"id": "s000-c0", "text": "chunk 0 about s0"},
                                                                    {"id": "solo", "text": "solo chunk zebra"}]}
    ingest_logs(db, write_log([*base, first_only]))
    first = ingest_ids(db)[-1]
    second_lines = [dict(base[0], timestamp="2026-03-01T00:00:00Z")]
    ingest_logs(db, write_log(second_lines))
    second = ingest_ids(db)[-1]
    shared = db.execute("SELECT pk, occurrences FROM queries WHERE question = ?", [base[0]["question"]]).fetchone()
    assert shared[1] == 2
    assert search_text(db, "solo zebra")

    result = undo_ingest(db, first)
    assert result.queries_kept == 1 and result.queries_removed == 2  # base[1] and first_only go
    rows = db.execute("SELECT pk, occurrences, ingest_id FROM queries").fetchall()
    assert rows == [(shared[0], 1, second)]
    assert db.execute("SELECT count(*), min(ingest_id) FROM retrievals").fetchone() == (3, second)
    assert db.execute("SELECT count(*) FROM log_lines").fetchone()[0] == 1
    # s000's chunks stay (the kept ranking uses them, also s000-c0 that first_only used); solo goes
    docs = {r[0] for r in db.execute("SELECT doc_id FROM documents")}
    assert docs == {"s000-c0", "s000-c1", "s000-c2"}
    assert not search_text(db, "solo zebra")
    # and then undoing the second leaves an empty database
    undo_ingest(db, second)
    assert db.execute("SELECT (SELECT count(*) FROM queries) + (SELECT count(*) FROM documents) + "
                      "(SELECT count(*) FROM retrievals) + (SELECT count(*) FROM log_lines)").fetchone()[0] == 0


def test_undo_removes_the_rankings_an_ingest_added_to_an_existing_query(db, write_log):
    ingest_logs(db, write_log(tiny_records(2, prefix="q")))
    before = dump(db)
    other = [dict(r, retriever="bm25", retrieved=[{"id": r["query_id"] + "-x", "text": "extra bm25 chunk"},
                                                   {"id": r["query_id"] + "-c0"}]) for r in tiny_records(2, prefix="q")]
    ingest_logs(db, write_log(other))
    assert db.execute("SELECT count(*) FROM retrievals WHERE retriever = 'bm25'").fetchone()[0] == 4
    result = undo_ingest(db, ingest_ids(db)[-1])
    assert (result.queries_removed, result.retrievals_removed, result.documents_removed) == (0, 4, 2)
    assert dump(db) == before


def test_undo_refuses_when_labeled_naming_them_then_force_removes_labels(db, write_log):
    ingest_logs(db, write_log(tiny_records(2, prefix="a")))
    ingest_logs(db, write_log(tiny_records(8, prefix="b")))
    second = ingest_ids(db)[-1]
    for i in range(7):
        pk = pk_of(db, f"b{i:03d}")
        set_grade(db, pk, doc_pk(db, f"b{i:03d}-c0"), "ann", 2)
    set_status(db, pk_of(db, "b000"), "ann", "submitted")
    before = dump(db)
    with pytest.raises(UndoRefused) as refused:
        undo_ingest(db, second)
    message = str(refused.value)
    assert "7 of the queries to remove have labels" in message
    assert "b000, b001, b002, b003, b004 and 2 more" in message and "--force" in message
    assert "\n" not in message
    assert dump(db) == before  # nothing written

    result = undo_ingest(db, second, force=True)
    assert result.queries_removed == 8 and result.labels_removed == 14  # 7 grades + their 7 item rows
    assert db.execute("SELECT count(*) FROM relevance_labels").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM label_events").fetchone()[0] == 0
    assert {r[0] for r in db.execute("SELECT query_id FROM queries")} == {"a000", "a001"}


def test_undo_twice_says_already_undone(db, write_log):
    ingest_logs(db, write_log(tiny_records(2)))
    first = ingest_ids(db)[0]
    undo_ingest(db, first)
    after = dump(db)
    again = undo_ingest(db, first)
    assert again.already_undone and "already undone" in again.summary()
    assert dump(db) == after
    assert db.execute("SELECT count(*) FROM audit_events WHERE action = 'ingest_undo'").fetchone()[0] == 1


def test_an_annotator_may_not_undo_and_nothing_is_written(db, write_log):
    accounts.add_user(db, "lena", "lead", password="lena-password")
    accounts.add_user(db, "bob", "annotator", password="bob-password")
    ingest_logs(db, write_log(tiny_records(2)))
    before = dump(db)
    audit_before = db.execute("SELECT count(*) FROM audit_events").fetchone()[0]
    with pytest.raises(RoleError, match="for leads only"):
        undo_ingest(db, ingest_ids(db)[0], by="bob")
    with pytest.raises(RoleError, match="for leads only"):
        remove_queries(db, ["q000"], by="bob")
    assert dump(db) == before
    assert db.execute("SELECT count(*) FROM audit_events").fetchone()[0] == audit_before
    assert undo_ingest(db, ingest_ids(db)[0], by="lena").queries_removed == 2
    assert db.execute("SELECT actor FROM audit_events WHERE action = 'ingest_undo'").fetchone()[0] == "lena"


def test_removed_items_leave_the_queue(db, write_log):
    ingest_logs(db, write_log(tiny_records(3, prefix="a")))
    ingest_logs(db, write_log(tiny_records(3, prefix="b")))
    db.execute("INSERT INTO settings (key, value) VALUES ('queue_order', '\"oldest\"')")
    held = next_item(db, "ann")  # a lease on the first item of "a"
    undo_ingest(db, ingest_ids(db)[0], force=True)
    seen = set()
    for _ in range(5):
        pk = next_item(db, "ann")
        if pk is None:
            break
        seen.add(db.execute("SELECT query_id FROM queries WHERE pk = ?", [pk]).fetchone()[0])
        set_status(db, pk, "ann", "submitted")
    assert held not in {pk_of(db, q) for q in seen}
    assert seen == {"b000", "b001", "b002"}
    assert db.execute("SELECT count(*) FROM queue").fetchone()[0] == 3


def test_undo_of_a_corpus_ingest_keeps_documents_in_use(db, write_log, tmp_path):
    ingest_logs(db, write_log(tiny_records(1, prefix="q")))
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(d) for d in [
        {"id": "corp-1", "text": "walrus manual page"}, {"id": "q000-c1", "text": "chunk 1 about q0"}]) + "\n")
    ingest_corpus(db, corpus)
    assert search_text(db, "walrus")
    result = undo_ingest(db, ingest_ids(db)[-1])
    assert result.documents_removed == 1
    assert not search_text(db, "walrus")
    assert db.execute("SELECT count(*) FROM documents WHERE doc_id = 'q000-c1'").fetchone()[0] == 1


def test_dry_run_counts_without_writing(db, write_log):
    ingest_logs(db, write_log(tiny_records(3)))
    set_grade(db, pk_of(db, "q001"), doc_pk(db, "q001-c0"), "ann", 3)
    before = dump(db)
    preview = undo_ingest(db, ingest_ids(db)[0], dry_run=True)
    assert (preview.queries_removed, preview.documents_removed, preview.labeled_queries) == (3, 9, ["q001"])
    assert dump(db) == before


def test_remove_queries(db, write_log):
    ingest_logs(db, write_log(tiny_records(3)))
    shared = tiny_records(3)[2]
    shared["retrieved"][0]["id"] = "q000-c0"  # q002 shares a chunk with q000
    set_grade(db, pk_of(db, "q001"), doc_pk(db, "q001-c0"), "ann", 3)
    with pytest.raises(UndoRefused, match=r"these queries: 1 of the queries to remove have labels \(q001\)"):
        remove_queries(db, ["q000", "q001"])
    with pytest.raises(Exception, match="unknown query id"):
        remove_queries(db, ["q000", "nope"])
    result = remove_queries(db, ["q000"])
    assert (result.queries_removed, result.retrievals_removed, result.documents_removed) == (1, 3, 3)
    assert {r[0] for r in db.execute("SELECT query_id FROM queries")} == {"q001", "q002"}
    assert not db.execute("SELECT 1 FROM documents WHERE doc_id LIKE 'q000%'").fetchall()
    assert db.execute("SELECT action FROM audit_events WHERE action = 'queries_remove'").fetchone()


# --- CLI -----------------------------------------------------------------------------------------

def run(db_path, *args):
    return CliRunner().invoke(cli, ["--db", str(db_path), *args])


def test_cli_ingest_list_undo_and_queries_remove(db_path, write_log):
    log = write_log(tiny_records(3, prefix="a"))
    assert run(db_path, "ingest", "logs", str(log)).exit_code == 0
    assert run(db_path, "ingest", "logs", str(write_log(tiny_records(2, prefix="b")))).exit_code == 0
    listed = run(db_path, "ingest", "list", "--json")
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert [(r["id"], r["queries"], r["retrievals"], r["state"]) for r in rows] == [(1, 3, 9, "done"), (2, 2, 6, "done")]
    assert rows[0]["sha256"] and rows[0]["path"].endswith(log.name)
    text = run(db_path, "ingest", "list")
    assert "a" in text.output and "done" in text.output

    db = store.connect(db_path)
    set_grade(db, pk_of(db, "b000"), doc_pk(db, "b000-c0"), "ann", 2)
    refused = run(db_path, "ingest", "undo", "2")
    assert refused.exit_code == 1
    assert refused.output.strip().count("\n") == 0 and "b000" in refused.output and "--force" in refused.output
    done = run(db_path, "ingest", "undo", "2", "--force", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["queries_removed"] == 2
    again = run(db_path, "ingest", "undo", "2")
    assert again.exit_code == 0 and "already undone" in again.output
    assert run(db_path, "ingest", "undo", "9").exit_code == 1

    removed = run(db_path, "queries", "remove", "a000", "a001")
    assert removed.exit_code == 0, removed.output
    assert "removed 2 queries" in removed.output
    assert run(db_path, "queries", "remove", "zzz").exit_code == 1
    assert [r[0] for r in db.execute("SELECT query_id FROM queries")] == ["a002"]


def test_list_counts_a_corpus_ingest_as_documents(db, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "c1", "text": "one"}) + "\n" + json.dumps({"id": "c2", "text": "two"}) + "\n")
    ingest_corpus(db, corpus)
    (info,) = list_ingests(db)
    assert (info.kind, info.queries, info.documents, info.state) == ("corpus", 0, 2, "done")


def test_a_golden_import_cannot_be_undone(db, tmp_path):
    from labeler.export import import_golden

    golden = tmp_path / "golden.jsonl"
    golden.write_text(json.dumps({"question": "what?", "relevant_ids": ["a"]}) + "\n")
    import_golden(db, golden, annotator="imp")
    (info,) = list_ingests(db)
    before = dump(db)
    with pytest.raises(Exception, match="golden import, whose rows do not record it, so it cannot be undone"):
        undo_ingest(db, info.id)
    assert dump(db) == before


def test_a_forced_undo_leaves_no_row_of_a_removed_query_in_any_table(db, write_log):
    """Foreign keys are off while an undo deletes, so every table that names a query (the queue's
    designs, the lead's desk, topics...) must lose the removed queries' rows: a new query may take
    a removed one's key and would inherit them."""
    from labeler.labels import desk
    from labeler.topics import build_topics

    ingest_logs(db, write_log(tiny_records(6, prefix="a")))
    set_setting(db, "overlap_fraction", 0)
    pk = next_item(db, "ann")  # recorded in queue_designs
    set_status(db, pk, "ann", "flagged", reason="unclear question")
    desk.resolve_flag(db, pk, "ann", "unflag", note="fine as is")
    desk.request_adjudication(db, pk)
    build_topics(db, k=2)
    undo_ingest(db, ingest_ids(db)[-1], force=True)
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    left = {t: n for t in tables
            if any(c[1] == "query_pk" for c in db.execute(f"PRAGMA table_info([{t}])"))
            and (n := db.execute(f"SELECT count(*) FROM [{t}] WHERE query_pk NOT IN (SELECT pk FROM queries)"
                                 ).fetchone()[0])}
    assert left == {}
    assert db.execute("SELECT count(*) FROM queue_designs").fetchone()[0] == 0


def test_an_undo_killed_half_way_hides_its_rows_and_a_rerun_finishes_it(db, write_log, monkeypatch):
    """The undo writes in short transactions; killed after two of them, the ingest shows as
    ``undoing``, its remaining queries are hidden from the Items list, another ingest
    can run, and undoing again finishes the job exactly."""
    import labeler.ingest.undo_steps as steps
    from labeler.labels import list_items

    ingest_logs(db, write_log(tiny_records(3, prefix="a")))
    sync_queue(db)
    before = dump(db)
    ingest_logs(db, write_log(tiny_records(7, prefix="b")))
    second = ingest_ids(db)[-1]
    sync_queue(db)
    assert list_items(db).total == 10
    monkeypatch.setattr(steps, "CHUNK_QUERIES", 2)
    real, calls = steps._short, []

    def killed_after_two(db):
        calls.append(1)
        if len(calls) > 2:
            raise KeyboardInterrupt  # the process dies here
        return real(db)

    monkeypatch.setattr(steps, "_short", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        undo_ingest(db, second)
    monkeypatch.setattr(steps, "_short", real)
    assert list_ingests(db)[-1].state == "undoing"
    left = db.execute("SELECT count(*) FROM queries WHERE query_id LIKE 'b%'").fetchone()[0]
    assert left == 3  # two chunks of two removed, three left: none of them shown
    assert list_items(db).total == 3
    assert {r.query_id for r in list_items(db).rows} == {"a000", "a001", "a002"}
    # a new ingest does not wait for (nor discard) the interrupted undo
    ingest_logs(db, write_log(tiny_records(1, prefix="c")))
    assert list_items(db).total == 4
    undo_ingest(db, ingest_ids(db)[-1])

    result = undo_ingest(db, second)  # finishes it
    assert result.queries_removed == 3 and not result.already_undone
    assert [i.state for i in list_ingests(db)] == ["done", "undone", "undone"]
    assert undo_ingest(db, second).already_undone
    sync_queue(db)
    assert dump(db) == before


def test_a_refused_undo_takes_its_mark_back(db, write_log):
    ingest_logs(db, write_log(tiny_records(2, prefix="b")))
    set_grade(db, pk_of(db, "b000"), doc_pk(db, "b000-c0"), "ann", 2)
    with pytest.raises(UndoRefused):
        undo_ingest(db, ingest_ids(db)[0])
    assert list_ingests(db)[0].state == "done" and list_ingests(db)[0].undone_at is None
    assert undo_ingest(db, ingest_ids(db)[0], force=True).queries_removed == 2

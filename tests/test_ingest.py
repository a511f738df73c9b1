"""Log and corpus ingest: readers, aliases, --map, Phoenix spans, dedupe, idempotence, bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import labeler
from labeler import IngestError
from labeler.ingest import canonical, normalize_question, parse_mapping


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def snapshot(db) -> list[str]:
    return list(db.conn.iterdump())


def rows(db, sql: str, params=()) -> list[tuple]:
    return [tuple(r) for r in db.execute(sql, params).fetchall()]


LINE = {"question": "How do I export invoices?", "answer": "Use Export.",
        "retrieved": [{"id": "d1", "text": "Export from the Invoices page.", "score": 0.8},
                      {"id": "d2", "text": "Invoices list.", "score": 0.5}]}


@pytest.fixture
def db(tmp_path):
    return labeler.connect(tmp_path / "t.db")


def test_canonical_line_lands_with_ranks_scores_and_documents(db, tmp_path):
    r = labeler.ingest_logs(db, write_jsonl(tmp_path / "a.jsonl", [LINE]))
    assert (r.records, r.new, r.retrievals, r.documents_new) == (1, 1, 2, 2)
    assert rows(db, "SELECT question, answer, origin, occurrences FROM queries") == [
        ("How do I export invoices?", "Use Export.", "log", 1)]
    assert rows(db, "SELECT r.rank, d.doc_id, r.score, r.retriever FROM retrievals r "
                    "JOIN documents d ON d.pk = r.doc_pk ORDER BY rank") == [
        (1, "d1", 0.8, "production"), (2, "d2", 0.5, "production")]
    assert rows(db, "SELECT doc_id, text FROM documents ORDER BY doc_id")[0] == ("d1", "Export from the Invoices page.")


@pytest.mark.parametrize("record", [
    {"query": "q?", "contexts": [{"doc_id": "x", "content": "t"}], "response": "a"},
    {"input": "q?", "documents": [{"chunk_id": "x", "page_content": "t"}], "output": "a"},
    {"user_input": "q?", "retrieved_contexts": [{"id": "x", "text": "t"}], "answer": "a"},
    {"question": "q?", "chunks": [{"page_content": "t", "metadata": {"id": "x"}}], "answer": "a"},
])
def test_aliases(db, tmp_path, record):
    labeler.ingest_logs(db, write_jsonl(tmp_path / "a.jsonl", [record]))
    assert rows(db, "SELECT question, answer FROM queries") == [("q?", "a")]
    assert rows(db, "SELECT doc_id, text FROM documents") == [("x", "t")]


def test_ragas_string_contexts_get_content_ids(db, tmp_path):
    labeler.ingest_logs(db, write_jsonl(tmp_path / "a.jsonl", [{"user_input": "q", "retrieved_contexts": ["alpha", "beta"]}]))
    ids = [r[0] for r in rows(db, "SELECT doc_id FROM documents")]
    assert len(ids) == 2 and all(i.startswith("sha1:") for i in ids)


def test_map_nested_paths_and_meta_kept(db, tmp_path):
    rec = {"inputs": {"query": "nested q"}, "outputs": {"documents": [{"id": "n1", "text": "t"}]},
           "user": "u7", "latency_ms": 120}
    mapping = parse_mapping(["question=inputs.query", "retrieved=outputs.documents"])
    labeler.ingest_logs(db, write_jsonl(tmp_path / "a.jsonl", [rec]), mapping=mapping)
    question, meta = rows(db, "SELECT question, meta FROM queries")[0]
    assert question == "nested q"
    assert json.loads(meta) == {"user": "u7", "latency_ms": 120}


def test_bad_map_option_is_a_clear_error():
    with pytest.raises(IngestError, match="expected FIELD=PATH"):
        parse_mapping(["question"])
    with pytest.raises(IngestError, match="unknown field 'questoin'"):
        parse_mapping(["questoin=a.b"])


def test_phoenix_openinference_spans_flat_and_nested(db, tmp_path):
    flat = {"context.span_id": "s1", "span_kind": "RETRIEVER", "attributes.input.value": "what is sso",
            "attributes.retrieval.documents.0.document.id": "sso-1",
            "attributes.retrieval.documents.0.document.content": "SSO text",
            "attributes.retrieval.documents.0.document.score": 0.9,
            "attributes.retrieval.documents.1.document.id": "sso-2",
            "attributes.retrieval.documents.1.document.score": 0.4}
    nested = {"context": {"span_id": "s2"}, "attributes": {"input.value": "reset password",
              "retrieval.documents": [{"document.id": "pw-1", "document.content": "Reset it", "document.score": 1.5}]}}
    labeler.ingest_logs(db, write_jsonl(tmp_path / "spans.jsonl", [flat, nested]))
    assert rows(db, "SELECT query_id, question FROM queries ORDER BY query_id") == [
        ("s1", "what is sso"), ("s2", "reset password")]
    assert rows(db, "SELECT q.query_id, r.rank, d.doc_id, r.score FROM retrievals r JOIN queries q ON q.pk = r.query_pk "
                    "JOIN documents d ON d.pk = r.doc_pk ORDER BY 1, 2") == [
        ("s1", 1, "sso-1", 0.9), ("s1", 2, "sso-2", 0.4), ("s2", 1, "pw-1", 1.5)]


def test_formats_give_the_same_rows(tmp_path):
    recs = [LINE, {"question": "second", "retrieved": [{"id": "d3", "score": 1}]}]
    files = {"jsonl": write_jsonl(tmp_path / "a.jsonl", recs)}
    (tmp_path / "a.json").write_text(json.dumps(recs, indent=2))
    files["json"] = tmp_path / "a.json"
    df = pd.DataFrame([{"question": r["question"], "answer": r.get("answer"),
                        "retrieved": json.dumps(r["retrieved"])} for r in recs])
    df.to_csv(tmp_path / "a.csv", index=False)
    files["csv"] = tmp_path / "a.csv"
    df.to_csv(tmp_path / "a.tsv", index=False, sep="\t")
    files["tsv"] = tmp_path / "a.tsv"
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "a.parquet")
    files["parquet"] = tmp_path / "a.parquet"
    with gzip.open(tmp_path / "a.jsonl.gz", "wt") as f:
        f.write(files["jsonl"].read_text())
    files["gz"] = tmp_path / "a.jsonl.gz"
    seen = {}
    for name, path in files.items():
        db = labeler.connect(tmp_path / f"{name}.db")
        r = labeler.ingest_logs(db, path)
        assert (r.new, r.retrievals) == (2, 3), name
        seen[name] = rows(db, "SELECT q.question, q.answer, d.doc_id, r.rank, r.score FROM retrievals r "
                              "JOIN queries q ON q.pk = r.query_pk JOIN documents d ON d.pk = r.doc_pk ORDER BY 1, 4")
    assert all(v == seen["jsonl"] for v in seen.values())


def test_reingest_changes_nothing(db, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [LINE, LINE, {**LINE, "query_id": "x1"}])
    first = labeler.ingest_logs(db, path)
    assert (first.new, first.merged) == (2, 1)
    # the logs of what was done (ingests, audit_events) grow; nothing else changes
    before = [r for r in snapshot(db) if "ingests" not in r and "audit_events" not in r]
    again = labeler.ingest_logs(db, path)
    assert (again.new, again.merged, again.unchanged) == (0, 0, 3)
    assert [r for r in snapshot(db) if "ingests" not in r and "audit_events" not in r] == before


def test_same_question_without_ids_merges_and_counts_occurrences(db, tmp_path):
    a = {**LINE, "timestamp": "2026-11-01T10:00:00Z"}
    b = {**LINE, "question": "  how do I EXPORT invoices? ", "timestamp": "2026-11-03T10:00:00Z", "answer": "other"}
    c = {**LINE, "timestamp": "2026-10-30T10:00:00Z"}
    labeler.ingest_logs(db, write_jsonl(tmp_path / "a.jsonl", [a, b]))
    r = labeler.ingest_logs(db, write_jsonl(tmp_path / "b.jsonl", [c]))
    assert r.merged == 1
    assert rows(db, "SELECT occurrences, first_seen, last_seen, answer FROM queries") == [
        (3, "2026-10-30T10:00:00.000000Z", "2026-11-03T10:00:00.000000Z", "Use Export.")]
    assert rows(db, "SELECT count(*) FROM retrievals") == [(2,)]


def test_same_question_with_another_retrieved_list_is_another_query(db, tmp_path):
    other = {**LINE, "retrieved": [{"id": "d9", "score": 0.1}]}
    r = labeler.ingest_logs(db, write_jsonl(tmp_path / "a.jsonl", [LINE, other]))
    assert r.new == 2


def test_same_query_id_with_other_content_is_an_error_naming_both_lines(db, tmp_path):
    labeler.ingest_logs(db, write_jsonl(tmp_path / "a.jsonl", [{**LINE, "query_id": "q1"}]))
    before = snapshot(db)
    changed = {**LINE, "query_id": "q1", "answer": "changed"}
    with pytest.raises(IngestError) as e:
        labeler.ingest_logs(db, write_jsonl(tmp_path / "b.jsonl", [changed]))
    assert f"{tmp_path / 'b.jsonl'}:1: query_id: 'q1' was already ingested from {tmp_path / 'a.jsonl'}:1" in str(e.value)
    assert snapshot(db) == before


def test_second_retriever_for_the_same_query_id_pools(db, tmp_path):
    labeler.ingest_logs(db, write_jsonl(tmp_path / "a.jsonl", [
        {**LINE, "query_id": "q1"}, {**LINE, "query_id": "q1", "retriever": "bm25",
                                     "retrieved": [{"id": "d7", "score": 3.0}]}]))
    assert rows(db, "SELECT retriever, count(*) FROM retrievals GROUP BY 1 ORDER BY 1") == [("bm25", 1), ("production", 2)]
    assert rows(db, "SELECT count(*) FROM queries") == [(1,)]


def test_corpus_fills_text_and_is_authoritative(db, tmp_path):
    labeler.ingest_logs(db, write_jsonl(tmp_path / "a.jsonl", [{"question": "q", "retrieved": [{"id": "c1"}, {"id": "c2", "text": "old"}]}]))
    assert labeler.stats(db)["documents_without_text"] == 1
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [
        {"id": "c1", "text": "one", "title": "T1"}, {"doc_id": "c2", "content": "new"}, {"id": "c3", "text": "three"}])
    r = labeler.ingest_corpus(db, corpus)
    assert (r.new, r.merged, r.unchanged) == (1, 2, 0)
    assert rows(db, "SELECT doc_id, text, title, in_corpus FROM documents ORDER BY doc_id") == [
        ("c1", "one", "T1", 1), ("c2", "new", None, 1), ("c3", "three", None, 1)]
    again = labeler.ingest_corpus(db, corpus)
    assert (again.new, again.merged, again.unchanged) == (0, 0, 3)


def test_corpus_duplicate_id_names_both_lines(db, tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "c1", "text": "a"}, {"id": "c1", "text": "b"}])
    with pytest.raises(IngestError, match=r"c.jsonl:2: id: duplicate id 'c1' \(first at .*c.jsonl:1\)"):
        labeler.ingest_corpus(db, path)
    assert rows(db, "SELECT count(*) FROM documents") == [(0,)]


def test_lenient_writes_valid_lines_and_rejects_file(db, tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(LINE) + "\n{oops\n" + json.dumps({"retrieved": []}) + "\n")
    r = labeler.ingest_logs(db, path, lenient=True)
    assert (r.new, r.rejected) == (1, 2)
    rejects = [json.loads(x) for x in Path(r.rejects_path).read_text().splitlines()]
    assert [(x["line"], x["field"]) for x in rejects] == [(2, "json"), (3, "question")]
    assert rows(db, "SELECT count(*) FROM queries") == [(1,)]


def test_normalize_question():
    assert normalize_question("  How   DO i\tReset ") == "how do i reset"


def test_canonical_keeps_unmapped_fields_in_meta():
    assert canonical({"question": "q", "retrieved": [], "tenant": "acme"})["meta"] == {"tenant": "acme"}


# --- bad input: each gives a clear message naming file:line and field, and writes nothing ---------

def _bad(tmp_path: Path, name: str, content: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(content)
    return p


def _line(rec) -> bytes:
    return (json.dumps(rec) + "\n").encode()


BAD_CASES = {
    "invalid_json": (b'{"question": "q", "retrieved": [}\n', ":1: json: invalid JSON"),
    "truncated_last_line": (_line(LINE) + b'{"question": "q", "retr', ":2: json: truncated or invalid JSON"),
    "missing_question": (_line({"retrieved": []}), ":1: question: missing (expected one of: question, query"),
    "empty_question": (_line({"question": "   ", "retrieved": []}), ":1: question: is empty"),
    "retrieved_not_list": (_line({"question": "q", "retrieved": "d1,d2"}), ":1: retrieved: expected a list of chunks, got str"),
    "chunk_without_id_or_text": (_line({"question": "q", "retrieved": [{"score": 1}]}), ":1: retrieved[0].id: missing"),
    "non_string_id": (_line({"question": "q", "retrieved": [{"id": 1.5}]}), ":1: retrieved[0].id: expected a string id, got float"),
    "null_id": (_line({"question": "q", "retrieved": [{"id": None, "text": None}]}), ":1: retrieved[0].id: missing"),
    "missing_retrieved": (_line({"question": "q", "docs_here": []}), ":1: retrieved: missing (expected one of: retrieved,"),
    "nan_score": (b'{"question": "q", "retrieved": [{"id": "d", "score": NaN}]}\n', ":1: retrieved[0].score: expected a finite number, got nan"),
    "text_score": (_line({"question": "q", "retrieved": [{"id": "d", "score": "high"}]}), ":1: retrieved[0].score: expected a number, got 'high'"),
    "duplicate_chunk": (_line({"question": "q", "retrieved": [{"id": "d"}, {"id": "d"}]}), ":1: retrieved[1].id: duplicate chunk id 'd' (also at retrieved[0])"),
    "non_utf8": (_line(LINE) + b'{"question": "caf\xe9", "retrieved": []}\n', ":2: question: not valid UTF-8 (byte 0xe9"),
    "not_an_object": (b'[1, 2]\n', ":1: json: expected a JSON object, got list"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_jsonl_input(db, tmp_path, case):
    content, expected = BAD_CASES[case]
    path = _bad(tmp_path, f"{case}.jsonl", content)
    labeler.ingest_logs(db, write_jsonl(tmp_path / "good.jsonl", [{**LINE, "query_id": "keep"}]))
    before = snapshot(db)
    with pytest.raises(IngestError) as e:
        labeler.ingest_logs(db, path)
    message = str(e.value)
    assert f"{path}{expected}" in message, message
    assert "nothing was written" in message
    assert snapshot(db) == before


def test_empty_file(db, tmp_path):
    path = _bad(tmp_path, "empty.jsonl", b"")
    with pytest.raises(IngestError, match="empty file: no records found"):
        labeler.ingest_logs(db, path)
    assert rows(db, "SELECT count(*) FROM ingests") == [(0,)]


def test_fifty_megabyte_line_is_rejected_without_reading_it_whole(db, tmp_path):
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as f:
        f.write(_line(LINE))
        f.write(b'{"question": "' + b"x" * (50 * 1024 * 1024) + b'", "retrieved": []}\n')
        f.write(_line({**LINE, "question": "after"}))
    before = snapshot(db)
    with pytest.raises(IngestError, match=r"big.jsonl:2: line: longer than the 16 MiB limit"):
        labeler.ingest_logs(db, path)
    assert snapshot(db) == before
    r = labeler.ingest_logs(db, path, lenient=True)
    assert (r.new, r.rejected) == (2, 1)


def test_ragged_csv_rows(db, tmp_path):
    path = _bad(tmp_path, "r.csv", b'question,retrieved\nq1,"[{""id"": ""a""}]"\nq2,"[]",extra\n')
    before = snapshot(db)
    with pytest.raises(IngestError, match=r"r.csv:3: row: has 3 fields, the header has 2"):
        labeler.ingest_logs(db, path)
    assert snapshot(db) == before


def test_csv_bad_json_column(db, tmp_path):
    path = _bad(tmp_path, "r.csv", b'question,retrieved\nq1,"[{oops"\n')
    with pytest.raises(IngestError, match=r"r.csv:2: retrieved: is not valid JSON"):
        labeler.ingest_logs(db, path)


def test_parquet_with_wrong_column_types(db, tmp_path):
    path = tmp_path / "w.parquet"
    pq.write_table(pa.table({"question": [1, 2], "retrieved": ["a", "b"]}), path)
    before = snapshot(db)
    with pytest.raises(IngestError) as e:
        labeler.ingest_logs(db, path)
    assert f"{path}:1: question: expected text, got int" in str(e.value)
    assert snapshot(db) == before


def test_unknown_extension(db, tmp_path):
    path = _bad(tmp_path, "logs.xml", b"<x/>")
    with pytest.raises(IngestError, match=r"unknown file extension .xml and cannot tell the format from its first character '<'.*use .jsonl, .json, .csv, .tsv or .parquet"):
        labeler.ingest_logs(db, path)


def test_missing_file(db, tmp_path):
    with pytest.raises(IngestError, match=r"nope.jsonl: no such file"):
        labeler.ingest_logs(db, tmp_path / "nope.jsonl")


def test_database_in_missing_folder(tmp_path):
    with pytest.raises(labeler.DatabaseError, match="folder .*missing does not exist"):
        labeler.connect(tmp_path / "missing" / "x.db")


def test_json_array_truncated(db, tmp_path):
    path = _bad(tmp_path, "a.json", b'[\n' + json.dumps(LINE).encode() + b',\n{"question": "q"')
    with pytest.raises(IngestError, match=r"a.json:3: json: truncated or invalid JSON"):
        labeler.ingest_logs(db, path)


def test_at_most_twenty_errors_are_listed(db, tmp_path):
    path = _bad(tmp_path, "many.jsonl", b"{bad\n" * 30)
    with pytest.raises(IngestError) as e:
        labeler.ingest_logs(db, path)
    message = str(e.value)
    assert message.count(": json: ") == 20
    assert "... and 10 more" in message
    assert e.value.total == 30
    assert message.startswith(f"{path}: 30 invalid record(s); nothing was written")


# --- parsing in a second process ---------------------------------------------------------------

def _mixed_log(n: int) -> list:
    """Ids and no ids, repeats that merge, a second retriever, text arriving late, int scores."""
    out = []
    for i in range(n):
        docs = [{"id": f"d{(i * 7 + j) % 23}", "score": j if i % 5 == 0 else 1.0 / (j + 1)} for j in range(4)]
        if i % 6 == 0:
            docs[0]["text"] = f"text of d{(i * 7) % 23}"
        rec = {"question": f"question {i % 17}?", "retrieved": docs, "timestamp": f"2026-11-{1 + i % 9:02d}"}
        if i % 3:
            rec["request_id"] = f"r{i}"
        if i % 11 == 0:
            rec["retriever"] = "bm25"
        out.append(rec)
    return out


def _state(db) -> dict:
    return {
        "queries": rows(db, "SELECT pk, query_id, question, norm_question, answer, occurrences, first_seen, last_seen, "
                            "meta, source FROM queries ORDER BY pk"),
        "versions": rows(db, "SELECT * FROM query_versions ORDER BY 1, 2"),
        "lines": rows(db, "SELECT * FROM log_lines ORDER BY 1"),
        "retrievals": rows(db, "SELECT * FROM retrievals ORDER BY 1, 2, 3"),
        "documents": rows(db, "SELECT pk, doc_id, text, title FROM documents ORDER BY pk"),
    }


def test_parsing_in_a_second_process_gives_the_same_database(tmp_path, monkeypatch):
    monkeypatch.setattr("labeler.ingest.batches.BATCH", 7)  # many batches; the forked child inherits it
    first = _mixed_log(40)
    second = first[:25] + _mixed_log(90)[40:] + [{"question": "", "retrieved": []}]
    second.append({**second[31], "answer": "changed"})  # same request_id, other content: a conflict
    for at in (3, 11, 12, 30, 44, 60):  # one line without an id, logged again and again (each an occurrence)
        second.insert(at, {"question": "the same line?", "retrieved": [{"id": "d1", "score": 0.5}]})
    a, b = write_jsonl(tmp_path / "a.jsonl", first), write_jsonl(tmp_path / "b.jsonl", second)
    lines = b.read_text().splitlines(keepends=True)  # blank lines: a shared-out file's blocks are of lines
    b.write_text("".join(lines[:20] + ["\n"] * 9 + lines[20:]))
    results = {}
    for parallel in (False, True):
        db = labeler.connect(tmp_path / f"{parallel}.db")
        r1 = labeler.ingest_logs(db, a, parallel=parallel)
        # the second file starts with lines already ingested (unchanged or merged), then new ones
        # whose chunks those lines also had: every chunk must still resolve to its document
        r2 = labeler.ingest_logs(db, b, parallel=parallel, lenient=True)
        results[parallel] = (_state(db), r1.to_dict(), r2.to_dict(), Path(r2.rejects_path).read_text())
    assert results[True] == results[False]
    state, r1, r2, rejects = results[True]
    assert r1["new"] > 10 and r2["unchanged"] + r2["merged"] >= 25 and r2["new"] > 20 and r2["rejected"] == 2
    assert '"field": "question", "error": "is empty"' in rejects and "with different content" in rejects
    assert [r[5] for r in state["queries"] if r[2] == "the same line?"] == [6]
    assert len(state["documents"]) == 23 and all(t is not None for _, d, t, _ in state["documents"]
                                                 if d in {f"d{(i * 7) % 23}" for i in range(0, 90, 6)})


@pytest.mark.parametrize("keep_raw", [False, True])
def test_a_batch_crosses_to_the_writer_as_it_was_made(tmp_path, keep_raw):
    """``batches.pack``/``unpack``, the way a batch crosses from the parsing process: every item
    comes back equal, whether its record travels as a flat tuple (the validated shape, nothing
    kept raw) or whole (a record redaction added counts to, records kept raw for a lenient
    ingest's rejects, a rejected one, a line that is no retrieval), with the batch's chunk ids
    and texts."""
    from labeler import privacy
    from labeler.ingest.batches import RECORD_KEYS, pack, parsed_batches, unpack

    records = _mixed_log(60)
    records[5]["question"] = "mail maria.rossi@example.com about it"  # redacted: the record gains counts
    records[9] = {"question": "", "retrieved": []}  # rejected
    records[13] = {"kind": "heartbeat"}
    records[17] = {"question": "a line without an id", "retrieved": [{"id": "d1", "score": 0.5}]}  # keyed by its line
    path = write_jsonl(tmp_path / "a.jsonl", records)
    db = labeler.connect(tmp_path / "t.db")
    redactor = privacy.redactor_for(db, True, None)
    batches = list(parsed_batches(path, "jsonl", False, None, 1 << 20, keep_raw, None, redactor, True))
    items = [item for batch in batches for item in batch.items]
    flat = [item[1] for item in items if item[1] is not None and item[3] is None and tuple(item[1].rec) == RECORD_KEYS]
    assert bool(flat) is not keep_raw
    assert not flat or any(row.line_key is not None and row.norm is not None for row in flat)
    assert any(item[1] is not None and "redactions" in item[1].rec for item in items)
    assert any(item[2] is not None for item in items)
    for batch in batches:
        assert unpack(pack(batch)) == batch


def test_strict_error_from_the_second_process_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr("labeler.ingest.batches.BATCH", 5)
    records = _mixed_log(30)
    records[17] = {"question": "ok?", "retrieved": [{"id": "x", "score": "high"}]}
    path = write_jsonl(tmp_path / "a.jsonl", records)
    messages = []
    for parallel in (False, True):
        db = labeler.connect(tmp_path / f"{parallel}.db")
        before = snapshot(db)
        with pytest.raises(IngestError) as e:
            labeler.ingest_logs(db, path, parallel=parallel)
        assert snapshot(db) == before
        messages.append(str(e.value))
    assert messages[0] == messages[1]
    assert f"{path}:18: retrieved[0].score: expected a number, got 'high'" in messages[1]


def test_unreadable_file_error_comes_back_from_the_second_process(db, tmp_path):
    path = tmp_path / "a.parquet"
    path.write_bytes(b"not parquet at all")
    before = snapshot(db)
    with pytest.raises(IngestError, match="a.parquet: not a readable Parquet file"):
        labeler.ingest_logs(db, path, parallel=True)
    assert snapshot(db) == before


@pytest.mark.parametrize("parallel", [False, True])
def test_a_title_without_text_names_the_new_document(db, tmp_path, parallel):
    labeler.ingest_logs(db, write_jsonl(tmp_path / "a.jsonl", [
        {"question": "q1?", "retrieved": [{"id": "t1", "title": "Billing FAQ"}, {"id": "t2"}]},
        {"question": "q2?", "retrieved": [{"id": "t2", "text": "later text", "title": "Plans"}]}]),
        parallel=parallel)
    assert rows(db, "SELECT doc_id, text, title FROM documents ORDER BY doc_id") == [
        ("t1", None, "Billing FAQ"), ("t2", "later text", "Plans")]


def test_an_ingest_leaves_no_file_open(tmp_path):
    """Plain and gzip files alike: the file under a GzipFile and under the counting wrapper is closed
    too (syncs and collects ingest a temporary file per batch, thousands in a day)."""
    import gc
    import gzip
    import warnings

    record = json.dumps({"question": "q?", "retrieved": [{"id": "a", "text": "t"}]}) + "\n"
    (tmp_path / "a.jsonl").write_text(record)
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.write(record.replace("q?", "another q?"))
    db = labeler.connect(tmp_path / "x.db")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for name in ("a.jsonl", "b.jsonl.gz"):
            labeler.ingest_logs(db, tmp_path / name)
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


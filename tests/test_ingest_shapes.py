"""Ingest of the record shapes real logs have: detection per record, chunks without ids, spans that
are not retrievals, --map into chunks, CSV cells that only look like JSON, timestamps."""

from __future__ import annotations

import csv
import json
import sqlite3

import pytest

import labeler
from labeler.errors import IngestError
from labeler.ingest.formats.spans import norm_id
from labeler.ingest.times import timestamp


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def rows(db, sql, params=()):
    return [tuple(r) for r in db.execute(sql, params).fetchall()]


def chunks(db, question):
    return rows(db, "SELECT d.doc_id, d.text, r.score FROM retrievals r JOIN queries q ON q.pk = r.query_pk "
                    "JOIN documents d ON d.pk = r.doc_pk WHERE q.question = ? ORDER BY r.rank", [question])


def span(span_id, kind, *, parent=None, trace="t1", docs=None, value="q", output=None):
    attrs = {"openinference.span.kind": kind, "input.value": value}
    if output is not None:
        attrs["output.value"] = output
    for i, (cid, text, score) in enumerate(docs or []):
        if cid is not None:
            attrs[f"retrieval.documents.{i}.document.id"] = cid
        attrs[f"retrieval.documents.{i}.document.content"] = text
        attrs[f"retrieval.documents.{i}.document.score"] = score
    return {"name": kind.lower(), "context": {"trace_id": trace, "span_id": span_id}, "parent_id": parent,
            "start_time": "2026-11-30T10:00:00+01:00", "attributes": attrs}


def test_a_span_layout_seen_before_without_documents_does_not_decide_the_next(db, tmp_path):
    # same top-level keys, first without documents: detection is per record, never cached by keys
    inner = span("a1", "RETRIEVER", parent="r1", value='{"query_str": "x"}')
    outer = span("a2", "RETRIEVER", parent="r1", docs=[("d1", "text one", 0.5)], value="how to pay")
    root = span("r1", "CHAIN", value="how do I pay?", output="By card.")
    for name in ("one.jsonl", "two.jsonl"):  # and a second file in the same process
        path = write_jsonl(tmp_path / name, [inner, outer, root])
        db = labeler.connect(tmp_path / f"{name}.db")
        r = labeler.ingest_logs(db, path)
        assert (r.new, r.skipped) == (1, 2), r
        assert r.skipped_reasons == {"retriever spans without documents": 1, "spans that are not retrievals": 1}
        assert rows(db, "SELECT query_id, question, answer, first_seen FROM queries") == [
            ("a2", "how do I pay?", "By card.", "2026-11-30T09:00:00.000000Z")]
        meta = json.loads(db.execute("SELECT meta FROM queries").fetchone()[0])
        assert meta["retriever_input"] == "how to pay" and meta["trace_id"] == "t1"


def test_chunks_without_ids_get_content_ids_and_the_summary_counts_them(db, tmp_path):
    docs = [{"page_content": "Refunds take 5 days.", "metadata": {"source": "faq.md"}, "type": "Document", "id": None},
            {"page_content": "Cards are charged monthly.", "metadata": {"source": "faq.md"}}]
    path = write_jsonl(tmp_path / "lc.jsonl", [{"question": "refund?", "documents": docs}])
    r = labeler.ingest_logs(db, path)
    assert r.content_ids == 2
    assert any("2 retrieved chunk(s) had no id" in n for n in r.notes())
    got = chunks(db, "refund?")
    assert [t for _, t, _ in got] == ["Refunds take 5 days.", "Cards are charged monthly."]
    assert all(cid.startswith("sha1:") and len(cid) == 21 for cid, _, _ in got)
    # the same text always gets the same id: a second log with it points at the same chunk
    labeler.ingest_logs(db, write_jsonl(tmp_path / "b.jsonl", [{"question": "other", "contexts": [docs[0]["page_content"]]}]))
    assert chunks(db, "other")[0][0] == got[0][0]


def test_langchain_dumpd_and_llamaindex_nodes_are_chunks(db, tmp_path):
    dumpd = {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "document", "Document"],
             "kwargs": {"page_content": "Helmets are free.", "metadata": {"id": "h-1"}, "type": "Document"}}
    node = {"node": {"id_": "n-7", "text": "Bikes unlock by app.", "metadata": {}, "class_name": "TextNode"},
            "score": 0.81, "class_name": "NodeWithScore"}
    path = write_jsonl(tmp_path / "x.jsonl", [{"query": "helmets?", "documents": [dumpd]},
                                              {"query": "unlock?", "response": "Use the app.", "source_nodes": [node]}])
    labeler.ingest_logs(db, path)
    assert chunks(db, "helmets?") == [("h-1", "Helmets are free.", None)]
    assert chunks(db, "unlock?") == [("n-7", "Bikes unlock by app.", 0.81)]
    assert rows(db, "SELECT answer FROM queries WHERE question = 'unlock?'") == [("Use the app.",)]


def test_ragas_ids_are_kept(db, tmp_path):
    rec = {"user_input": "late fee?", "retrieved_contexts": ["Late fees are 2 EUR.", "Returns close at 9."],
           "retrieved_context_ids": ["fees#2", "hours#1"], "reference_context_ids": ["fees#2"], "response": "2 EUR"}
    labeler.ingest_logs(db, write_jsonl(tmp_path / "r.jsonl", [rec]))
    assert [c[0] for c in chunks(db, "late fee?")] == ["fees#2", "hours#1"]
    bad = {**rec, "retrieved_context_ids": ["only-one"]}
    with pytest.raises(IngestError, match=r"r2.jsonl:1: retrieved_context_ids: expected a list as long as the contexts \(2\)"):
        labeler.ingest_logs(db, write_jsonl(tmp_path / "r2.jsonl", [bad]))


def test_a_missing_retrieved_field_is_an_error_and_a_file_without_chunks_fails(db, tmp_path):
    with pytest.raises(IngestError, match=r":1: retrieved: missing \(expected one of: retrieved, contexts"):
        labeler.ingest_logs(db, write_jsonl(tmp_path / "a.jsonl", [{"question": "q", "hits": [{"id": "d"}]}]))
    with pytest.raises(IngestError, match="no record had retrieved chunks"):
        labeler.ingest_logs(db, write_jsonl(tmp_path / "b.jsonl", [{"question": "q", "retrieved": []}]))
    only_chains = write_jsonl(tmp_path / "c.jsonl", [span("s1", "CHAIN"), span("s2", "LLM", parent="s1")])
    with pytest.raises(IngestError, match="no retrievals found: skipped 2 spans that are not retrievals"):
        labeler.ingest_logs(db, only_chains)
    assert db.execute("SELECT count(*) FROM queries").fetchone()[0] == 0
    # lenient: the record is a reject, the valid one is written
    mixed = write_jsonl(tmp_path / "d.jsonl", [{"question": "q", "hits": []}, {"question": "ok", "retrieved": [{"id": "d"}]}])
    r = labeler.ingest_logs(db, mixed, lenient=True)
    assert (r.new, r.rejected) == (1, 1)


def test_map_reaches_chunk_fields(db, tmp_path):
    rec = {"question": "where?", "documents": [{"page_content": "At the station.", "metadata": {"source": "kb/where.md"}}]}
    path = write_jsonl(tmp_path / "m.jsonl", [rec])
    labeler.ingest_logs(db, path, mapping=labeler.parse_mapping(["chunk.id=metadata.source"]))
    assert chunks(db, "where?") == [("kb/where.md", "At the station.", None)]
    with pytest.raises(IngestError, match="unknown field 'chunk.colour'"):
        labeler.parse_mapping(["chunk.colour=x"])


def test_format_names_a_tool_to_force_its_reader(db, tmp_path):
    path = write_jsonl(tmp_path / "s.jsonl", [span("s9", "RETRIEVER", docs=[("d1", "t", 1.0)], value="forced")])
    r = labeler.ingest_logs(db, path, fmt="phoenix")
    assert (r.tool, r.format, r.new) == ("phoenix", "jsonl", 1)
    with pytest.raises(IngestError, match="s2.jsonl:1: run_type: missing"):
        labeler.ingest_logs(db, write_jsonl(tmp_path / "s2.jsonl", [{"question": "q", "retrieved": []}]), tool="langsmith")
    with pytest.raises(IngestError, match="unknown tool format 'zipkin'"):
        labeler.ingest_logs(db, path, tool="zipkin")


def test_csv_cells_are_text_except_the_chunks(db, tmp_path):
    path = tmp_path / "q.csv"
    big = "x" * (200 * 1024)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["question", "retrieved", "note"])
        w.writerow(["[beta] how do I export", json.dumps([{"id": "d1"}]), "{not json"])
        w.writerow(["{curly} question", "['ctx one', 'ctx two']", big])  # pandas writes lists like this
    r = labeler.ingest_logs(db, path)
    assert r.new == 2
    assert [c[1] for c in chunks(db, "{curly} question")] == ["ctx one", "ctx two"]
    meta = json.loads(db.execute("SELECT meta FROM queries WHERE question LIKE '[beta]%'").fetchone()[0])
    assert meta == {"note": "{not json"}
    bad = tmp_path / "bad.csv"
    bad.write_text('question,retrieved\nq,"[{""id"": oops}]"\n')
    with pytest.raises(IngestError, match=r"bad.csv:2: retrieved: is not valid JSON"):
        labeler.ingest_logs(db, bad)


@pytest.mark.parametrize("raw, expected", [
    ("2026-11-30T10:00:00Z", "2026-11-30T10:00:00.000000Z"),
    ("2026-11-30T11:00:00+01:00", "2026-11-30T10:00:00.000000Z"),
    ("2026-11-30 10:00:00.5", "2026-11-30T10:00:00.500000Z"),
    (1796032800, "2026-11-30T10:00:00.000000Z"),
    (1796032800123, "2026-11-30T10:00:00.123000Z"),
    (1796032800123456, "2026-11-30T10:00:00.123456Z"),
    ("1796032800123456789", "2026-11-30T10:00:00.123456Z"),
    (1796032800.25, "2026-11-30T10:00:00.250000Z"),
])
def test_timestamps_become_utc_iso(raw, expected):
    assert timestamp(raw) == expected


def test_timestamps_compare_as_times(db, tmp_path):
    line = {"question": "q", "retrieved": [{"id": "d"}]}
    # epoch ms and an offset time: as text "1796..." > "2026-..." though it is earlier
    path = write_jsonl(tmp_path / "t.jsonl", [{**line, "ts": "2026-12-01T12:00:00+01:00"}, {**line, "ts": 1796032800000}])
    labeler.ingest_logs(db, path)
    assert rows(db, "SELECT first_seen, last_seen FROM queries") == [
        ("2026-11-30T10:00:00.000000Z", "2026-12-01T11:00:00.000000Z")]
    with pytest.raises(IngestError, match=r"bad.jsonl:1: timestamp: cannot read 'yesterday' as a time"):
        labeler.ingest_logs(db, write_jsonl(tmp_path / "bad.jsonl", [{**line, "ts": "yesterday"}]))


@pytest.mark.parametrize("raw", ["0x5B8EFFF798038103", "5b8efff798038103", "W47/95gDgQM="])
def test_span_ids_are_normalised(raw):
    assert norm_id(raw) == "5b8efff798038103"


def test_eval_reads_llamaindex_nodes_and_documents_without_ids():
    from types import SimpleNamespace

    from labeler.harness.pipeline import read_output

    # the attribute shapes of llama_index NodeWithScore (node.id_, node.text) and of a LangChain
    # Document from a splitter (no id): what a pipeline under `labeler eval` returns
    node = SimpleNamespace(node=SimpleNamespace(id_="n-1", node_id="n-1", text="Bikes unlock by app.", metadata={}),
                           score=0.7)
    doc = SimpleNamespace(id=None, page_content="Refunds take 5 days.", metadata={"source": "faq.md"})
    ids, answer = read_output(([node, doc], "ok"))
    assert ids == ["n-1", "sha1:" + __import__("hashlib").sha1(b"Refunds take 5 days.").hexdigest()[:16]]
    dumped = {"node": {"id_": "n-2", "text": "t"}, "score": 0.1}  # a NodeWithScore dump in an HTTP response
    assert read_output({"response": "r", "source_nodes": [dumped]}) == (["n-2"], "r")


def test_a_byte_order_mark_is_not_part_of_the_first_record(db, tmp_path):
    rec = {"question": "bom?", "retrieved": [{"id": "d1"}]}
    (tmp_path / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + json.dumps(rec).encode() + b"\n")
    (tmp_path / "b.json").write_bytes(b"\xef\xbb\xbf" + json.dumps([{**rec, "question": "bom 2?"}]).encode())
    assert labeler.ingest_logs(db, tmp_path / "a.jsonl").new == 1
    assert labeler.ingest_logs(db, tmp_path / "b.json").new == 1


def test_cli_format_tool_with_standard_input(tmp_path):
    from click.testing import CliRunner

    from labeler.cli import cli

    run = json.dumps(span("s1", "RETRIEVER", docs=[("d1", "t", 1.0)], value="from a pipe")) + "\n"
    r = CliRunner().invoke(cli, ["--db", str(tmp_path / "x.db"), "ingest", "logs", "-", "--format", "phoenix", "--json"],
                           input=run)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["tool"], out["format"], out["new"]) == ("phoenix", "jsonl", 1)


def test_float_noise_in_scores_is_the_same_content_and_old_hashes_still_match(db, tmp_path):
    from labeler.ingest.batches import content_hash
    from labeler.ingest.validate import validate_log

    rec = {"query_id": "s1", "question": "q", "retrieved": [{"id": "d", "score": 0.2895190638}]}
    labeler.ingest_logs(db, write_jsonl(tmp_path / "a.jsonl", [rec]))
    noisy = {**rec, "retrieved": [{"id": "d", "score": 0.28951906380000003}]}  # the same span from Parquet
    assert labeler.ingest_logs(db, write_jsonl(tmp_path / "b.jsonl", [noisy])).unchanged == 1
    with pytest.raises(IngestError, match="different content"):
        labeler.ingest_logs(db, write_jsonl(tmp_path / "c.jsonl", [{**rec, "retrieved": [{"id": "d", "score": 0.29}]}]))
    # a database written before rounding holds the exact hash: re-ingesting the file still changes nothing
    exact = content_hash(validate_log({**labeler.ingest.canonical(noisy), "content_ids": 0}), exact=True)
    db.execute("UPDATE query_versions SET content_hash = ?", [exact])
    db.conn.commit()
    assert labeler.ingest_logs(db, write_jsonl(tmp_path / "d.jsonl", [noisy])).unchanged == 1


def test_scores_rounded_for_a_whole_batch_are_pythons_round_to_the_bit():
    """The content hash rounds every score to 9 decimals; a batch's scores are rounded at once
    (numpy), and must give the very floats round(v, 9) gives, or re-ingests would see new content."""
    import math
    import random

    import numpy as np

    from labeler.ingest.batches import round_scores

    rng = random.Random(7)
    values = [rng.random() * 10.0 ** rng.randint(-14, 14) * rng.choice((1, -1)) for _ in range(200_000)]
    values += [round(rng.random(), rng.randint(0, 12)) for _ in range(50_000)]  # as logged: few decimals
    values += [(k + 0.5) / 1e9 for k in range(-20_000, 20_000)]  # ties at the 9th decimal, and near them
    values += [k / 1e9 + 5e-10 for k in range(-20_000, 20_000)]
    values += [0.0, -0.0, -1e-12, 2.5e-9, 1.0000000005, 8796.0930223, 2.0 ** 43 / 1e9, 2.0 ** 53, 1e300, -1e300,
               5e-324, float(2 ** 60)]
    values += [v for v in np.random.default_rng(7).standard_normal(50_000).tolist()]
    bits = np.frombuffer(np.random.default_rng(8).bytes(8 * 50_000), dtype=np.float64).tolist()
    values += [v for v in bits if math.isfinite(v)]  # every exponent
    columns = [values[i:i + 10] for i in range(0, len(values), 10)]
    columns[3] = [None, *columns[3][1:]]  # a chunk without a score
    columns.append([])
    columns.append([None, None])
    got = round_scores(columns)
    want = [[None if v is None else round(v, 9) for v in column] for column in columns]
    assert [len(c) for c in got] == [len(c) for c in want]
    mismatched = [(v, a, b) for column, g, w in zip(columns, got, want, strict=True)
                  for v, a, b in zip(column, g, w, strict=True)
                  if not (a is b is None or (a == b and math.copysign(1, a) == math.copysign(1, b)))]
    assert mismatched == []
    assert round_scores([]) == [] and round_scores([[]]) == [[]]


def test_the_default_retriever(db, tmp_path):
    from labeler.retrievers import RetrieverError, default_retriever

    with pytest.raises(RetrieverError, match="no retriever logged any rankings yet"):
        default_retriever(db)
    labeler.ingest_logs(db, write_jsonl(tmp_path / "a.jsonl", [{"question": "q", "retriever": "tfidf", "retrieved": [{"id": "d"}]}]))
    assert default_retriever(db) == "tfidf"
    labeler.ingest_logs(db, write_jsonl(tmp_path / "b.jsonl", [{"question": "q", "retriever": "bm25", "retrieved": [{"id": "d"}]}]))
    with pytest.raises(RetrieverError, match=r"several retrievers logged rankings \(bm25, tfidf\) and none is called 'production'"):
        default_retriever(db)
    assert default_retriever(db, "bm25") == "bm25"
    with pytest.raises(RetrieverError, match="retriever 'dense' logged no rankings; logged: bm25, tfidf"):
        default_retriever(db, "dense")
    labeler.ingest_logs(db, write_jsonl(tmp_path / "c.jsonl", [{"question": "q", "retrieved": [{"id": "d"}]}]))
    assert default_retriever(db) == "production"


def test_synthetic_candidates_do_not_make_production_the_default(db, tmp_path):
    from labeler.retrievers import default_retriever

    labeler.ingest_logs(db, write_jsonl(tmp_path / "a.jsonl", [{"question": "q", "retriever": "tfidf", "retrieved": [{"id": "d"}]}]))
    # a synthetic question keeps its candidate chunks under 'production' (labeler.synth)
    with db.conn:
        db.execute("INSERT INTO queries (query_id, question, norm_question, origin, occurrences, created_at) "
                   "VALUES ('s-1', 'synthetic?', 'synthetic?', 'synthetic', 0, '2026-12-01')")
        db.execute("INSERT INTO retrievals (query_pk, retriever, rank, doc_pk) SELECT q.pk, 'production', 1, d.pk "
                   "FROM queries q, documents d WHERE q.query_id = 's-1'")
    assert default_retriever(db) == "tfidf"
    assert default_retriever(db, "production") == "production"  # named explicitly: the candidates' report


@pytest.mark.parametrize(("rows", "shared"), [(0, 0), (1, 0), (165, 0), (166, 0), (167, 0), (333, 0), (1000, 0),
                                             (1, 2), (248, 2), (249, 2), (250, 2), (498, 2), (1000, 2)])
def test_rows_go_in_several_to_a_statement_all_of_them_in_order(rows, shared):
    """writer.insert_columns: whole statements of as many rows as stay under 999 parameters (166
    rows of 6 values; 249 rows of 4 with 2 values shared by every row) and the rest in statements
    of 128, 64, ..., 1 rows; every row lands once, as given, with the shared values in each."""
    from labeler.ingest.writer import insert_columns

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a INTEGER, b TEXT, c REAL, d, e, f)")
    values = [(i, f"r{i}", i / 7, None, b"x", "const") for i in range(rows)]
    columns = [list(column) for column in zip(*values, strict=True)] if values else [[] for _ in range(6)]
    if shared:
        insert_columns(conn, "t (a, e, b, c, f, d)", "(?, $1, ?, ?, $2, ?)", columns[:4], (b"x", "const"))
    else:
        insert_columns(conn, "t (a, b, c, d, e, f)", "(?, ?, ?, ?, ?, ?)", columns)
    assert conn.execute("SELECT * FROM t ORDER BY rowid").fetchall() == values



def test_rows_of_any_count_go_in_through_a_few_statement_shapes():
    """writer.insert_columns: whatever the number of rows, the statements are of a few sizes (the
    full one and powers of two), so SQLite prepares each once and the connection's cache keeps
    them; a statement sized to each transaction's leftover rows was compiled afresh every time."""
    from labeler.ingest.writer import _statement, insert_columns

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a INTEGER, b TEXT, c REAL, d, e, f)")
    _statement.cache_clear()
    for rows in range(1, 600):
        columns = [list(range(rows)), ["x"] * rows, [0.5] * rows, [None] * rows, [b"y"] * rows, [rows] * rows]
        insert_columns(conn, "t (a, b, c, d, e, f)", "(?, ?, ?, ?, ?, ?)", columns)
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == sum(range(1, 600))
    assert _statement.cache_info().currsize <= 9  # 166 rows, then 128, 64, 32, 16, 8, 4, 2, 1

@pytest.mark.parametrize("parallel", [False, True])
def test_a_batch_written_in_several_transactions_is_the_batch_written_in_one(tmp_path, monkeypatch, parallel):
    """A batch split into transactions (to keep each lock hold short) resolves each part's new
    chunks alone: the same documents with the same keys, texts and titles, and the same rows, as
    when one transaction takes the whole batch. Chunks come back across parts and batches, some
    first without a text, some with a title only, some in rows that are rejected (whose chunks
    become no documents)."""
    import random

    from labeler.ingest import logs

    rng = random.Random(3)
    records = []
    for i in range(6000):
        chunks = []
        for d in rng.sample(range(3000), rng.randint(1, 8)):
            chunk = {"id": f"doc-{d}", "score": round(rng.random(), 3)}
            if d % 3 and rng.random() < 0.7:
                chunk["text"] = f"the text of {d}" + (" (again)" if rng.random() < 0.05 else "")
            elif d % 5 == 0:
                chunk["title"] = f"title {d}"
            chunks.append(chunk)
        qid = f"r{i}" if i < 5000 or i % 50 else "r1"  # late in the file, a rejected row: its id, another question
        if qid == "r1" and i >= 5000:
            chunks.append({"id": f"only-rejected-{i}", "score": 0.5, "text": "never stored"})
        records.append({"request_id": qid, "question": f"question {i}", "retrieved": chunks})
    log = tmp_path / "a.jsonl"
    write_jsonl(log, records)

    def ingest(name: str, size: int | None) -> dict:
        if size is not None:
            monkeypatch.setattr(logs._Sizer, "take", lambda self, remaining: min(size, remaining))
        else:
            monkeypatch.setattr(logs._Sizer, "take", lambda self, remaining: remaining)
        db = labeler.connect(tmp_path / f"{name}.db")
        result = labeler.ingest_logs(db, log, lenient=True, parallel=parallel)
        return {"new": result.new, "rejected": len(result.problems),
                "documents": rows(db, "SELECT pk, doc_id, text, title FROM documents ORDER BY pk"),
                "retrievals": rows(db, "SELECT query_pk, retriever, rank, doc_pk, score FROM retrievals "
                                       "ORDER BY query_pk, retriever, rank")}

    whole = ingest("whole", None)
    assert whole["rejected"] == 20 and len(whole["documents"]) > 2500
    assert not [d for d in whole["documents"] if d[1].startswith("only-rejected")]  # a rejected row makes nothing
    assert ingest("parts", 37) == whole

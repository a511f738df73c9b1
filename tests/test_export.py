"""labeler.export: every format's shape, deterministic bytes and the manifest, the exports table,
filters, the TREC files reproducing `labeler metrics` under pytrec_eval (CISI), import of golden files
(matching, creating, strict/lenient bad lines) and the round trip export -> import -> export."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest
import pytrec_eval
from click.testing import CliRunner

import labeler
from labeler import export as E
from labeler import labels as L
from labeler import report as R
from labeler.cli import cli
from labeler.errors import IngestError, LabelerError
from labeler.ingest import ingest_corpus, ingest_logs
from tests import cisi
from tests.test_report import TREC, build, cisi_golden, label, pk, write


@pytest.fixture
def small(file_db, tmp_path):
    build(file_db, tmp_path)
    L.set_query_fields(file_db, pk(file_db, "qa"), "alice", expected_answer="A is the answer.",
                       answer_faithful="yes")
    return file_db


def run_cli(*args: str) -> object:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def read_lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


# --- formats -------------------------------------------------------------------------------------------

def test_jsonl_golden_set(small, tmp_path):
    result = E.export_golden(small, tmp_path / "golden.jsonl", "jsonl")
    lines = read_lines(tmp_path / "golden.jsonl")
    assert [x["query_id"] for x in lines] == ["qa", "qb", "qc", "qd"]
    assert list(lines[0]) == ["query_id", "question", "relevant_ids", "relevance", "expected_answer", "origin",
                              "annotators", "conflict", "answer_faithful", "answer_relevant"]
    assert lines[0] == {"query_id": "qa", "question": "question qa?", "relevant_ids": ["a1", "a3"],
                        "relevance": {"a1": 3, "a2": 0, "a3": 2}, "expected_answer": "A is the answer.",
                        "origin": "log", "annotators": ["alice"], "conflict": False, "answer_faithful": "yes",
                        "answer_relevant": None}
    assert lines[2]["relevant_ids"] == [] and lines[2]["relevance"] == {"c1": 0, "c2": 0, "c3": 0}
    assert lines[3]["relevant_ids"] == ["missed"]  # a chunk the retriever missed
    # the plain Python of the RAG-evaluation practice can use it as is
    retrieved = {"qa": ["a2", "a3", "a1"]}
    item = lines[0]
    hits = len(set(retrieved[item["query_id"]][:2]) & set(item["relevant_ids"]))
    assert hits / len(item["relevant_ids"]) == 0.5
    assert result.counts == {"queries": 4, "queries_by_origin": {"log": 4, "synthetic": 0, "import": 0},
                             "queries_without_relevant": 1, "judged_pairs": 13, "relevant_pairs": 4, "conflicts": 0,
                             "queries_not_run": 0}


def test_trec_files(small, tmp_path):
    E.export_golden(small, tmp_path / "trec", "trec")
    qrels = (tmp_path / "trec" / "qrels.txt").read_text().splitlines()
    run = (tmp_path / "trec" / "run.production.txt").read_text().splitlines()
    # qc has no relevant chunk: trec_eval would score it, labeler leaves it out; so it is not written
    assert qrels[:3] == ["qa 0 a1 3", "qa 0 a2 0", "qa 0 a3 2"] and not any(x.startswith("qc ") for x in qrels)
    assert len(qrels) == 10 and "qd 0 missed 3" in qrels
    assert run[:3] == ["qa Q0 a1 1 3 production", "qa Q0 a2 2 2 production", "qa Q0 a3 3 1 production"]
    assert len(run) == 9



def test_trec_run_leaves_out_queries_the_retriever_never_ran(small, tmp_path):
    E.import_golden(small, write(tmp_path / "g.jsonl", [{"query_id": "new", "question": "new?",
                                                           "relevant_ids": ["missed"]}]), annotator="carol")
    result = E.export_golden(small, tmp_path / "trec", "trec")
    # the qrels belong to no retriever: they hold it; the run of a retriever that never ran it does not
    assert "new 0 missed 3" in (tmp_path / "trec" / "qrels.txt").read_text().splitlines()
    assert not any(x.startswith("new ") for x in (tmp_path / "trec" / "run.production.txt").read_text().splitlines())
    assert result.counts["queries"] == 5 and result.counts["queries_not_run"] == 1
    assert result.manifest["metrics"] == R.retrieval_report(small).to_dict()


def test_beir_layout(small, tmp_path):
    E.export_golden(small, tmp_path / "beir", "beir")
    root = tmp_path / "beir"
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == [
        "corpus.jsonl", "qrels/test.graded.tsv", "qrels/test.tsv", "queries.jsonl"]
    corpus = read_lines(root / "corpus.jsonl")
    assert corpus[0] == {"_id": "a1", "title": "", "text": "chunk a1"}
    assert len(corpus) == 19 and {"_id": "missed", "title": "", "text": "the chunk the retriever missed"} in corpus
    assert read_lines(root / "queries.jsonl")[0] == {"_id": "qa", "text": "question qa?"}
    # test.tsv: only grades >= the threshold (2), with their grade; qb's grade-1 chunk b1 is left out
    assert (root / "qrels" / "test.tsv").read_text().splitlines() == [
        "query-id\tcorpus-id\tscore", "qa\ta1\t3", "qa\ta3\t2", "qb\tb2\t2", "qd\tmissed\t3"]
    # test.graded.tsv: every judged grade of the queries that have a relevant chunk (not qc)
    graded = (root / "qrels" / "test.graded.tsv").read_text().splitlines()
    assert graded[0] == "query-id\tcorpus-id\tscore" and graded[1:4] == ["qa\ta1\t3", "qa\ta2\t0", "qa\ta3\t2"]
    assert "qb\tb1\t1" in graded and not any(x.startswith("qc\t") for x in graded) and len(graded) == 11


def test_ragas_columns(small, tmp_path):
    E.export_golden(small, tmp_path / "ragas.jsonl", "ragas")
    rows = read_lines(tmp_path / "ragas.jsonl")
    assert len(rows) == 4
    assert all(list(r) == ["user_input", "retrieved_contexts", "retrieved_context_ids", "response", "reference",
                           "reference_contexts", "reference_context_ids"] for r in rows)
    assert rows[0] == {"user_input": "question qa?", "retrieved_contexts": ["chunk a1", "chunk a2", "chunk a3"],
                       "retrieved_context_ids": ["a1", "a2", "a3"], "response": "answer qa",
                       "reference": "A is the answer.", "reference_contexts": ["chunk a1", "chunk a3"],
                       "reference_context_ids": ["a1", "a3"]}
    assert rows[2]["reference_contexts"] == rows[2]["reference_context_ids"] == []  # qc: nothing relevant
    assert rows[3]["reference_contexts"] == ["the chunk the retriever missed"]
    assert rows[3]["reference_context_ids"] == ["missed"]


def test_csv_one_row_per_judged_pair(small, tmp_path):
    E.export_golden(small, tmp_path / "pairs.csv", "csv")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "pairs.csv").read_text())))
    assert len(rows) == 13 and list(rows[0]) == list(E.CSV_COLUMNS)
    assert rows[0] == {"query_id": "qa", "question": "question qa?", "doc_id": "a1", "grade": "3", "relevant": "1",
                       "rank": "1", "score": "0.9", "n_annotators": "1", "conflict": "0", "adjudicated": "0",
                       "origin": "log"}
    missed = [r for r in rows if r["doc_id"] == "missed"][0]
    assert (missed["rank"], missed["score"], missed["relevant"]) == ("", "", "1")
    assert [r["doc_id"] for r in rows if r["query_id"] == "qd"] == ["d1", "d2", "d3", "missed"]


def test_export_data_gives_the_bytes_and_records_the_export(small, tmp_path):
    data, result = E.export_data(small, "csv", target="stdout")
    E.export_golden(small, tmp_path / "pairs.csv", "csv")
    assert data == (tmp_path / "pairs.csv").read_bytes()
    assert (result.path, result.manifest_path, result.files) == ("stdout", None, {
        "stdout": hashlib.sha256(data).hexdigest()})
    assert small.execute("SELECT path FROM exports WHERE version = ?", [result.version]).fetchone() == ("stdout",)
    with pytest.raises(LabelerError, match="the trec format writes a folder of files, not one stream"):
        E.export_data(small, "trec")


def test_unknown_format_and_bad_paths(small, tmp_path):
    with pytest.raises(LabelerError, match="unknown export format 'xml'; use one of: jsonl, trec, beir, ragas, csv"):
        E.export_golden(small, tmp_path / "x", "xml")
    with pytest.raises(LabelerError, match="does not exist"):
        E.export_golden(small, tmp_path / "nope" / "g.jsonl")
    (tmp_path / "afile").write_text("")
    with pytest.raises(LabelerError, match="writes a folder"):
        E.export_golden(small, tmp_path / "afile", "trec")


def test_ids_with_white_space_cannot_go_to_trec(db, tmp_path):
    ingest_logs(db, write(tmp_path / "l.jsonl", [{"query_id": "q 1", "question": "q?", "retrieved": [{"id": "d"}]}]))
    labeler.set_setting(db, "overlap_fraction", 0)
    label(db, "q 1", {"d": 3})
    with pytest.raises(LabelerError, match="query_id 'q 1' contains white space.*export jsonl or csv instead"):
        E.export_golden(db, tmp_path / "t", "trec")


# --- manifest, determinism, the exports table ----------------------------------------------------------

def test_manifest_and_exports_table(small, tmp_path):
    result = E.export_golden(small, tmp_path / "trec", "trec", origin="log")
    manifest = json.loads((tmp_path / "trec.manifest.json").read_text())
    assert manifest == result.manifest
    assert set(manifest) == {"manifest_version", "labeler_version", "version", "format", "created_at", "sha256", "files",
                             "filters", "threshold", "grade_names", "counts", "metrics", "run_metrics"}
    for name, sha in manifest["files"].items():
        assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == sha
    assert sorted(manifest["files"]) == ["trec/qrels.txt", "trec/run.production.txt"]
    assert manifest["filters"] == {"origin": "log", "min_annotators": 1, "include_unreviewed_synthetic": False,
                                   "retriever": "production"}
    assert manifest["threshold"] == 2 and manifest["counts"]["queries"] == 4 and manifest["format"] == "trec"
    metrics = R.retrieval_report(small, origin="log").to_dict()
    assert manifest["metrics"] == metrics and manifest["run_metrics"] == {"production": metrics}
    row = small.execute("SELECT version, format, path, sha256, filters, counts FROM exports").fetchall()
    assert row == [(manifest["version"], "trec", str(tmp_path / "trec"), manifest["sha256"],
                    labeler.db.dumps(manifest["filters"]), labeler.db.dumps(manifest["counts"]))]


def test_an_export_that_fails_leaves_no_data_without_a_manifest(small, tmp_path):
    # the export's database write fails (here a trigger; in the issue, a busy database): nothing
    # is left in the folder, neither data files nor temporary ones
    before = sorted(p.name for p in tmp_path.iterdir())
    small.execute("CREATE TEMP TRIGGER no_exports BEFORE INSERT ON exports BEGIN "
                  "SELECT RAISE(ABORT, 'simulated failure'); END")
    for fmt, target in (("jsonl", tmp_path / "g.jsonl"), ("trec", tmp_path / "trec")):
        with pytest.raises(Exception, match="simulated failure"):
            E.export_golden(small, target, fmt)
    after = sorted(p.name for p in tmp_path.iterdir())
    assert [n for n in after if n not in before] == ["trec"]  # the folder the TREC export made ...
    assert list((tmp_path / "trec").iterdir()) == []  # ... and nothing in it


def test_an_export_waits_for_a_busy_database_then_writes_data_and_manifest(small, db_path, tmp_path):
    import threading

    holder = labeler.connect(db_path)
    holder.conn.execute("BEGIN IMMEDIATE")
    threading.Timer(1.0, lambda: holder.conn.execute("COMMIT")).start()  # another writer, for 1 s
    result = E.export_golden(small, tmp_path / "g.jsonl", "jsonl")
    manifest = json.loads((tmp_path / "g.jsonl.manifest.json").read_text())
    assert manifest["files"] == result.files
    assert hashlib.sha256((tmp_path / "g.jsonl").read_bytes()).hexdigest() == manifest["files"]["g.jsonl"]
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("fmt", list(E.FORMATS))
def test_exports_are_deterministic(small, tmp_path, fmt):
    a = E.export_golden(small, tmp_path / f"a-{fmt}", fmt)
    b = E.export_golden(small, tmp_path / f"b-{fmt}", fmt)
    files_a = {n.partition("/")[2]: (tmp_path / n).read_bytes() for n in a.files}
    files_b = {n.partition("/")[2]: (tmp_path / n).read_bytes() for n in b.files}
    assert files_a == files_b and files_a
    assert b.version == a.version + 1
    same = {k: v for k, v in a.manifest.items() if k not in ("version", "created_at", "files", "sha256")}
    assert same == {k: v for k, v in b.manifest.items() if k not in ("version", "created_at", "files", "sha256")}
    assert sorted(a.files.values()) == sorted(b.files.values())


def test_download_archive_is_a_deterministic_zip(small):
    name, data, result = E.export_archive(small, "beir")
    assert name == "golden-beir.zip"
    z = zipfile.ZipFile(io.BytesIO(data))
    assert sorted(z.namelist()) == ["golden-beir.manifest.json", "golden-beir/corpus.jsonl",
                                    "golden-beir/qrels/test.graded.tsv", "golden-beir/qrels/test.tsv",
                                    "golden-beir/queries.jsonl"]
    manifest = json.loads(z.read("golden-beir.manifest.json"))
    assert manifest["version"] == result.version and result.path == "download:golden-beir.zip"
    _, again, _ = E.export_archive(small, "beir")
    z2 = zipfile.ZipFile(io.BytesIO(again))
    assert all(z.read(n) == z2.read(n) for n in z.namelist() if not n.endswith("manifest.json"))
    name, data, _ = E.export_archive(small, "csv")
    assert name == "golden.csv" and data.startswith(b"query_id,question,doc_id,grade")
    assert E.archive_name("ragas") == "golden-ragas.jsonl"


# --- filters -------------------------------------------------------------------------------------------

def test_min_annotators_and_origin_filters(small, tmp_path):
    labeler.set_setting(small, "overlap_fraction", 1.0)
    L.sync_queue(small, force=True)
    label(small, "qa", {"a1": 1, "a2": 0, "a3": 2}, annotator="bob")  # 3 vs 1: a conflict
    counts = E.export_counts(small, min_annotators=2)
    assert (counts["queries"], counts["conflicts"]) == (1, 1)
    E.export_golden(small, tmp_path / "two.jsonl", min_annotators=2)
    (line,) = read_lines(tmp_path / "two.jsonl")
    assert line["annotators"] == ["alice", "bob"] and line["conflict"] is True
    assert line["relevance"]["a1"] == 2  # median of 3 and 1, rounded half up
    assert E.export_counts(small, origin="import")["queries"] == 0
    with pytest.raises(LabelerError, match="min_annotators must be a whole number >= 1"):
        E.export_counts(small, min_annotators=0)


def test_unreviewed_synthetic_only_when_asked(small, tmp_path):
    E.import_golden(small, write(tmp_path / "s.jsonl", [
        {"query_id": "syn-1", "question": "synthetic?", "relevant_ids": ["missed"], "origin": "synthetic"}]),
        annotator="carol")
    assert E.export_counts(small)["queries_by_origin"]["synthetic"] == 1  # imported labeled = accepted
    small.execute("INSERT INTO queries (query_id, question, norm_question, origin, review_state, meta, created_at) "
                  "VALUES ('syn-2', 'pending one?', 'pending one?', 'synthetic', 'pending', ?, '2026-01-01')",
                  [json.dumps({"expected_answer": "proposed"})])
    small.execute("UPDATE queries SET review_state = 'rejected' WHERE query_id = 'syn-1'")
    assert E.export_counts(small)["queries_by_origin"]["synthetic"] == 0
    E.export_golden(small, tmp_path / "with.jsonl", include_unreviewed_synthetic=True)
    synthetic = [x for x in read_lines(tmp_path / "with.jsonl") if x["origin"] == "synthetic"]
    assert synthetic == [{"query_id": "syn-2", "question": "pending one?", "relevant_ids": [], "relevance": {},
                          "expected_answer": "proposed", "origin": "synthetic", "annotators": [], "conflict": False,
                          "answer_faithful": None, "answer_relevant": None}]


# --- import --------------------------------------------------------------------------------------------

def test_import_matches_by_id_then_question_and_creates_the_rest(small, tmp_path):
    golden = write(tmp_path / "g.jsonl", [
        {"query_id": "qe", "question": "whatever the file says", "relevance": {"e1": 2, "e2": 0},
         "expected_answer": "E.", "answer_relevant": "partly"},
        {"question": "  QUESTION   qf? ", "relevant_ids": ["f2"]},  # matched by normalized question
        {"question": "a new question", "relevant_ids": ["new-chunk", "missed"], "expected_answer": "New."},
    ])
    result = E.import_golden(small, golden, annotator="dana")
    assert (result.records, result.new, result.merged, result.unchanged, result.rejected) == (3, 1, 2, 0, 0)
    assert result.documents_new == 1
    new = small.execute("SELECT query_id, origin FROM queries WHERE question = 'a new question'").fetchone()
    assert new[0].startswith("g-") and new[1] == "import"
    golden_rows = L.golden_labels(small, annotator="dana")
    grades = {(r.query_pk, r.doc_pk): r.grade for r in golden_rows.itertuples()}
    assert grades[(pk(small, "qf"), small.execute("SELECT pk FROM documents WHERE doc_id = 'f2'").fetchone()[0])] == 3
    assert len(grades) == 5
    assert L.get_role(small, "dana") == "annotator"
    status = small.execute("SELECT status, expected_answer, answer_relevant FROM query_labels WHERE annotator = 'dana' "
                           "AND query_pk = ?", [pk(small, "qe")]).fetchone()
    assert status == ("submitted", "E.", "partly")
    events = small.execute("SELECT count(*) FROM label_events WHERE annotator = 'dana'").fetchone()[0]
    assert events == 5 + 3 + 3  # grades, statuses, answer fields (qe: 2, the new one: 1)
    assert L.next_item(small, "dana") is None or L.next_item(small, "dana") not in {pk(small, "qe"), pk(small, "qf")}
    again = E.import_golden(small, golden, annotator="dana")
    assert (again.unchanged, again.changes) == (3, 0)


def test_import_replaces_the_annotators_earlier_labels(small, tmp_path):
    E.import_golden(small, write(tmp_path / "g.jsonl", [{"query_id": "qa", "question": "x", "relevance": {"a1": 0}}]),
                    annotator="alice")
    rows = small.execute("SELECT d.doc_id, l.grade FROM relevance_labels l JOIN documents d ON d.pk = l.doc_pk "
                         "WHERE l.annotator = 'alice' AND l.query_pk = ?", [pk(small, "qa")]).fetchall()
    assert rows == [("a1", 0)]
    assert small.execute("SELECT count(*) FROM label_events WHERE field = 'grade' AND new IS NULL").fetchone()[0] == 2


BAD_LINES = [
    ('{"question": "ok", "relevant_ids": ["a1"]}', None),
    ('{"question": "no ids"}', "relevant_ids: missing: give relevant_ids (a list of chunk ids) or relevance {id: grade}"),
    ('{"relevant_ids": ["a1"]}', "question: missing (expected one of: question, query, input, user_input, user_query)"),
    ('{"question": "g", "relevance": {"a1": 9}}', "relevance.a1: grade 9 is not on the scale; use a whole number from 0 to 3"),
    ('{"question": "r", "relevance": {"a1": 1}, "relevant_ids": ["a2"]}', "relevant_ids[0]: 'a2' has no grade in relevance; add it there"),
    ('{"question": "o", "relevant_ids": ["a1"], "origin": "web"}', "origin: 'web' is unknown; use one of: log, synthetic, import (or leave it out)"),
    ('{"question": "j", "relevant_ids": ["a1"], "answer_faithful": "maybe"}', "answer_faithful: 'maybe' is not allowed; use one of: yes, partly, no (or null)"),
    ('not json', "json: invalid JSON"),
    ('{"question": "OK", "relevant_ids": ["a2"]}', "question: the same query as line 1; keep one line per query"),
]


def test_import_strict_writes_nothing_and_lists_every_bad_line(small, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(line for line, _ in BAD_LINES) + "\n")
    before = small.execute("SELECT count(*) FROM relevance_labels").fetchone()[0]
    with pytest.raises(IngestError) as e:
        E.import_golden(small, path, annotator="erin")
    message = str(e.value)
    assert message.startswith(f"{path}: 8 invalid record(s); nothing was written (fix them, or pass --lenient")
    for i, (_, problem) in enumerate(BAD_LINES, 1):
        if problem:
            assert f"{path}:{i}: {problem}" in message, problem
    assert small.execute("SELECT count(*) FROM relevance_labels").fetchone()[0] == before
    assert L.get_role(small, "erin") is None and small.execute("SELECT count(*) FROM queries").fetchone()[0] == 6


def test_import_lenient_writes_valid_lines_and_rejects_file(small, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(line for line, _ in BAD_LINES) + "\n")
    result = E.import_golden(small, path, annotator="erin", lenient=True)
    assert (result.records, result.new, result.rejected) == (9, 1, 8)
    rejects = read_lines(Path(result.rejects_path))
    assert [r["line"] for r in rejects] == [2, 3, 4, 5, 6, 7, 8, 9]
    assert rejects[0] == {"line": 2, "field": "relevant_ids", "error": BAD_LINES[1][1].split(": ", 1)[1],
                          "record": {"question": "no ids"}}


def test_import_empty_missing_and_bad_annotator(small, tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(IngestError, match="empty file: no records found"):
        E.import_golden(small, tmp_path / "empty.jsonl", annotator="x")
    with pytest.raises(IngestError, match="no such file"):
        E.import_golden(small, tmp_path / "missing.jsonl", annotator="x")
    with pytest.raises(LabelerError, match="annotator name"):
        E.import_golden(small, tmp_path / "empty.jsonl", annotator=" ")


def test_round_trip_export_import_export_is_byte_identical(small, tmp_path):
    first = E.export_golden(small, tmp_path / "one.jsonl")
    fresh = labeler.connect(tmp_path / "fresh.db")
    result = E.import_golden(fresh, tmp_path / "one.jsonl", annotator="alice")
    assert (result.new, result.rejected) == (4, 0)
    E.export_golden(fresh, tmp_path / "two.jsonl")
    assert (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    # the new database has the labels but no production rankings
    assert E.export_counts(fresh) == first.counts | {"queries_not_run": 4} and result.warnings == []
    other = labeler.connect(tmp_path / "other.db")
    labeler.set_setting(other, "threshold", 3)
    warned = E.import_golden(other, tmp_path / "one.jsonl", annotator="alice")
    assert warned.warnings == ["one.jsonl.manifest.json says the set was exported with threshold 2, this database "
                               "uses 3: relevant_ids and binary metrics will differ (change it in Settings)"]


# --- CLI -----------------------------------------------------------------------------------------------

def test_cli_export_and_import(small, db_path, tmp_path):
    r = run_cli("--db", str(db_path), "export", "--format", "csv", "-o", str(tmp_path / "p.csv"))
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"{tmp_path / 'p.csv'}: 4 queries, 13 judged pairs (4 relevant) as csv")
    r = run_cli("--db", str(db_path), "export", "-o", str(tmp_path / "g.jsonl"), "--json")
    out = json.loads(r.output)
    assert out["format"] == "jsonl" and out["manifest_path"] == str(tmp_path / "g.jsonl.manifest.json")
    fresh = tmp_path / "fresh.db"
    r = run_cli("--db", str(fresh), "import", "golden", str(tmp_path / "g.jsonl"), "--annotator", "alice")
    assert r.exit_code == 0, r.output
    assert "4 lines: 4 new queries, 0 updated, 0 unchanged, 0 rejected" in r.output
    (tmp_path / "bad.jsonl").write_text('{"question": "x"}\n')
    r = CliRunner().invoke(cli, ["--db", str(fresh), "import", "golden", str(tmp_path / "bad.jsonl"),
                                 "--annotator", "alice"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"{tmp_path / 'bad.jsonl'}:1: relevant_ids: missing" in r.output
    r = CliRunner().invoke(cli, ["--db", str(fresh), "export", "-o", str(tmp_path / "nope" / "x.jsonl")])
    assert r.exit_code == 1 and r.output.startswith("Error: cannot write")


# --- real data: the exported TREC files under pytrec_eval equal `labeler metrics` -------------------------

def test_cisi_trec_export_reproduces_labeler_metrics(tmp_path):
    cisi.require_cisi()
    db = labeler.connect(tmp_path / "cisi.db")
    ingest_logs(db, cisi.write_logs(tmp_path / "logs.jsonl"))
    ingest_corpus(db, cisi.write_corpus(tmp_path / "corpus.jsonl"))
    labeler.set_setting(db, "threshold", 1)
    E.import_golden(db, write(tmp_path / "golden.jsonl", cisi_golden()), annotator="cisi")
    E.export_golden(db, tmp_path / "trec", "trec")
    qrels: dict[str, dict[str, int]] = {}
    for line in (tmp_path / "trec" / "qrels.txt").read_text().splitlines():
        q, _, d, g = line.split()
        qrels.setdefault(q, {})[d] = int(g)
    run: dict[str, dict[str, float]] = {}
    for line in (tmp_path / "trec" / "run.production.txt").read_text().splitlines():
        q, _, d, _, score, _ = line.split()
        run.setdefault(q, {})[d] = float(score)
    assert len(qrels) == 76  # the two labeled queries without a relevant document are left out
    trec = pytrec_eval.RelevanceEvaluator(qrels, set(TREC.values()), relevance_level=1).evaluate(run)
    report = R.retrieval_report(db, list(TREC))
    per_query = report.per_query.set_index("query_id")
    for q, measures in trec.items():
        for spec, measure in TREC.items():
            assert per_query.loc[q, spec] == pytest.approx(measures[measure], abs=1e-9), (q, spec)
    for spec, measure in TREC.items():
        assert report.metrics[spec]["mean"] == pytest.approx(
            sum(m[measure] for m in trec.values()) / len(trec), abs=1e-12)
    # and the golden JSONL round trip on real data
    E.export_golden(db, tmp_path / "one.jsonl")
    fresh = labeler.connect(tmp_path / "fresh.db")
    labeler.set_setting(fresh, "threshold", 1)
    E.import_golden(fresh, tmp_path / "one.jsonl", annotator="cisi")
    E.export_golden(fresh, tmp_path / "two.jsonl")
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()

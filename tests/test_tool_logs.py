"""Logs written by the real tools (tests/fixtures/tools, made by make_fixtures.py with Phoenix, the
OpenTelemetry SDK and JS OTLP serializer, langsmith, langchain-core, llama-index-core, ragas and
datasets): each file ingests with no flags into the queries, chunk ids, texts, scores and answers
that expected.json lists (derived from the generator's inputs), and nothing else."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

import labeler

TOOLS = Path(__file__).parent / "fixtures" / "tools"
EXPECTED = json.loads((TOOLS / "expected.json").read_text())
FILES = sorted(k for k in EXPECTED if not k.startswith("_"))


def content_id(text: str) -> str:
    return "sha1:" + hashlib.sha1(text.encode()).hexdigest()[:16]


def stored(db) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for pk, qid, question, answer in db.execute("SELECT pk, query_id, question, answer FROM queries"):
        chunks = db.execute("SELECT d.doc_id, d.text, r.score FROM retrievals r JOIN documents d ON d.pk = r.doc_pk "
                            "WHERE r.query_pk = ? ORDER BY r.rank", [pk]).fetchall()
        out[question + "|" + qid] = {"query_id": qid, "question": question, "answer": answer,
                                     "chunks": [tuple(c) for c in chunks]}
    return out


def expected_ids(query: dict, name: str = "") -> list[str]:
    # LangChain spans: the ids are in the span's output (not in get_retrieved_documents() rows)
    native = query.get("ids_in_output_value") if "retrieved_documents" not in name else None
    return [native[i] if native else (c["id"] or content_id(c["text"])) for i, c in enumerate(query["chunks"])]


@pytest.mark.parametrize("name", FILES)
def test_a_tool_export_ingests_as_its_inputs_with_no_flags(tmp_path, name):
    want = EXPECTED[name]
    db = labeler.connect(tmp_path / "t.db")
    r = labeler.ingest_logs(db, TOOLS / name)
    assert (r.new, r.rejected, r.skipped) == (len(want["queries"]), 0, want["non_retrieval_records"]), r.to_dict()
    got = list(stored(db).values())
    assert len(got) == len(want["queries"])
    for query in want["queries"]:
        matches = [g for g in got if g["question"] == query["question"]
                   and g["query_id"] == (query.get("span_id") or query.get("run_id") or g["query_id"])]
        assert len(matches) == 1, (query["question"], got)
        g = matches[0]
        assert g["answer"] == query["answer"]
        assert [c[0] for c in g["chunks"]] == expected_ids(query, name)
        assert [c[1] for c in g["chunks"]] == [c["text"] for c in query["chunks"]]
        for (_, _, score), c in zip(g["chunks"], query["chunks"], strict=True):
            assert (score is None) == (c["score"] is None) and (score is None or math.isclose(score, c["score"],
                                                                                            abs_tol=1e-6))
    without_ids = sum(1 for q in want["queries"] for i in expected_ids(q, name) if i.startswith("sha1:"))
    assert r.content_ids == without_ids


@pytest.mark.parametrize("app", ["langchain", "llamaindex"])
def test_the_same_spans_from_phoenix_and_opentelemetry_are_the_same_queries(tmp_path, app):
    db = labeler.connect(tmp_path / "t.db")
    first = labeler.ingest_logs(db, TOOLS / "phoenix" / f"{app}_spans.jsonl")
    before = stored(db)
    for other in (f"phoenix/{app}_spans.parquet", f"phoenix/{app}_spans_rest.json", f"otel/{app}_console.txt",
                  f"otel/{app}_otlp.json", f"otel/{app}_otlp_protojson_base64ids.json"):
        r = labeler.ingest_logs(db, TOOLS / other)
        assert (r.new, r.unchanged) == (0, first.new), (other, r.to_dict())
    assert stored(db) == before


def test_retrieved_documents_rows_join_their_spans(tmp_path):
    # get_retrieved_documents() has no answer and no ids: the same span ids, grouped by span
    db = labeler.connect(tmp_path / "t.db")
    r = labeler.ingest_logs(db, TOOLS / "phoenix" / "llamaindex_retrieved_documents.parquet")
    spans = {q["span_id"] for q in EXPECTED["phoenix/llamaindex_retrieved_documents.parquet"]["queries"]}
    assert {g["query_id"] for g in stored(db).values()} == spans and r.new == 2


def test_the_cli_summary_says_what_was_skipped(tmp_path):
    from click.testing import CliRunner

    from labeler.cli import cli

    r = CliRunner().invoke(cli, ["--db", str(tmp_path / "x.db"), "ingest", "logs", str(TOOLS / "otel" / "llamaindex_console.txt")])
    assert r.exit_code == 0, r.output
    assert "skipped 24 spans that are not retrievals" in r.output
    assert "skipped 2 retriever spans without documents" in r.output

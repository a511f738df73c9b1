"""Hostile JSON in every file that comes in: a lone surrogate (an emoji cut in half, as a ``\\ud83d``
escape and as the raw first bytes of its UTF-8 sequence), an integer of thousands of digits, and
nesting deeper than Python's recursion limit. Each is one line naming file:line and the field, with
exit code 1 and no traceback; strict mode writes nothing, ``--lenient`` rejects that record (counted
and listed) and writes the rest. Logs (JSON lines, a JSON array, CSV cells, Parquet cells, tool
formats), corpus files and ``labeler import golden`` alike."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import labeler
from labeler import IngestError
from labeler.cli import cli

DEPTH = 100_000  # far past sys.getrecursionlimit() and orjson's 1024 levels
DIGITS = 5000  # past Python's int_max_str_digits (4300)
CHUNKS = '[{"id": "d1", "text": "Refunds take five days."}]'

# shape -> (the hostile JSON value as source text, bytes or str)
SURROGATE = '"cut \\ud83d here"'
RAW_CUT = b'"cut \xf0\x9f here"'
HUGE = "9" * DIGITS
DEEP = "[" * DEPTH + "]" * DEPTH

# shape -> the start of the problem line after FILE:LINE:, for a value placed at ``FIELD``
SHAPES = {
    "surrogate": (SURROGATE, "{field}: has a lone surrogate (\\ud83d"),
    "raw_cut_bytes": (RAW_CUT, "{field}: not valid UTF-8 (byte 0xf0"),
    "huge_integer": (HUGE, f"{{field}}: an integer of {DIGITS} digits is too large"),
    "deep_nesting": (DEEP, "{field}: nested more than 200 levels deep"),
}


def _b(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode()


def snapshot(db) -> list[str]:
    return list(db.conn.iterdump())


# --- the files: (name, content with the value at line 2, field named in the problem) ---------------

def log_jsonl(value: bytes, shape: str) -> tuple[str, bytes, str]:
    good = b'{"question": "How long do refunds take?", "retrieved": ' + _b(CHUNKS) + b"}\n"
    if shape in ("surrogate", "raw_cut_bytes"):
        bad = b'{"question": ' + value + b', "retrieved": ' + _b(CHUNKS) + b"}\n"
        return "logs.jsonl", good + bad, "question"
    if shape == "huge_integer":
        bad = b'{"question": "q2", "retrieved": [{"id": "d2", "text": "t", "score": ' + value + b"}]}\n"
        return "logs.jsonl", good + bad, "retrieved[0].score"
    bad = b'{"question": "q2", "retrieved": ' + _b(CHUNKS) + b', "meta": ' + value + b"}\n"
    return "logs.jsonl", good + bad, "meta[0][0][0]..."


def log_json_array(value: bytes, shape: str) -> tuple[str, bytes, str]:
    _, content, fld = log_jsonl(value, shape)
    first, second = content.rstrip(b"\n").split(b"\n")
    return "logs.json", b"[" + first + b",\n" + second + b"]\n", fld


def log_csv_json_cell(value: bytes, shape: str) -> tuple[str, bytes, str]:
    """The retrieved chunks as JSON in a CSV cell (quotes doubled)."""
    if shape in ("surrogate", "raw_cut_bytes"):
        chunks = b'[{"id": "d2", "text": ' + value + b"}]"
        fld = "retrieved[0].text" if shape == "surrogate" else "retrieved"  # raw bytes: the cell itself
    elif shape == "huge_integer":
        chunks, fld = b'[{"id": "d2", "score": ' + value + b"}]", "retrieved[0].score"
    else:
        chunks, fld = value, "retrieved[0][0][0][0]..."
    cell = b'"' + chunks.replace(b'"', b'""') + b'"'
    good = b'q1,"' + _b(CHUNKS).replace(b'"', b'""') + b'"\n'
    return "logs.csv", b"question,retrieved\n" + good + b"q2," + cell + b"\n", fld


def log_otel_span(value: bytes, shape: str) -> tuple[str, bytes, str]:
    """An OpenTelemetry console-exporter span whose ``input.value`` is JSON text (a tool format: the
    file's own JSON is sound, the attribute's is hostile). Its field is the attribute, with the
    place inside its JSON in brackets."""
    def span(n: int, attribute: str) -> bytes:
        return json.dumps({
            "name": "retrieve", "kind": "SpanKind.INTERNAL", "parent_id": None,
            "context": {"trace_id": f"t{n}", "span_id": f"s{n}"},
            "attributes": {"openinference.span.kind": "RETRIEVER", "input.value": attribute,
                           "retrieval.documents.0.document.id": f"d{n}",
                           "retrieval.documents.0.document.content": "Refunds take five days."}}).encode()
    text = value.decode()
    attribute = '{"query": "q", "n": ' + text + "}" if shape == "huge_integer" else '{"query": ' + text + "}"
    inner = {"surrogate": "query", "huge_integer": "n", "deep_nesting": "query[0][0][0]..."}[shape]
    content = span(1, '{"query": "How long do refunds take?"}') + b"\n" + span(2, attribute) + b"\n"
    return "spans.jsonl", content, f"attributes.input.value ({inner})"


def corpus_jsonl(value: bytes, shape: str) -> tuple[str, bytes, str]:
    good = b'{"id": "d1", "text": "Refunds take five days."}\n'
    if shape in ("surrogate", "raw_cut_bytes"):
        return "corpus.jsonl", good + b'{"id": "d2", "text": ' + value + b"}\n", "text"
    if shape == "huge_integer":
        return "corpus.jsonl", good + b'{"id": "d2", "text": "t", "pages": ' + value + b"}\n", "pages"
    return "corpus.jsonl", good + b'{"id": "d2", "text": "t", "metadata": ' + value + b"}\n", "metadata[0][0][0]..."


def golden_jsonl(value: bytes, shape: str) -> tuple[str, bytes, str]:
    good = b'{"question": "How long do refunds take?", "relevance": {"d1": 3}}\n'
    if shape in ("surrogate", "raw_cut_bytes"):
        bad = b'{"question": "q2", "relevance": {"d1": 2}, "expected_answer": ' + value + b"}\n"
        return "golden.jsonl", good + bad, "expected_answer"
    if shape == "huge_integer":
        return "golden.jsonl", good + b'{"question": "q2", "relevance": {"d1": ' + value + b"}}\n", "relevance.d1"
    return "golden.jsonl", good + b'{"question": "q2", "relevance": {"d1": 2}, "notes": ' + value + b"}\n", "notes[0][0][0]..."


# command -> (file maker, CLI arguments after the file)
TARGETS: dict[str, tuple[Callable[[bytes, str], tuple[str, bytes, str]], list[str]]] = {
    "logs_jsonl": (log_jsonl, ["ingest", "logs"]),
    "logs_json_array": (log_json_array, ["ingest", "logs"]),
    "logs_csv_cell": (log_csv_json_cell, ["ingest", "logs"]),
    "logs_otel_span": (log_otel_span, ["ingest", "logs"]),
    "corpus_jsonl": (corpus_jsonl, ["ingest", "corpus"]),
    "golden_jsonl": (golden_jsonl, ["import", "golden"]),
}
# every target with every shape, except raw bytes cut inside an OTel span's JSON string attribute:
# that file is the plain JSONL case (the cut is in the line's bytes, not in an attribute)
CASES = [(t, s) for t in sorted(TARGETS) for s in sorted(SHAPES) if (t, s) != ("logs_otel_span", "raw_cut_bytes")]


def _write(tmp_path: Path, target: str, shape: str) -> tuple[Path, str]:
    """The file, and what its problem line says from FILE: on (the hostile record is the second,
    on line 2; line 3 in a CSV file, after its header)."""
    maker, _ = TARGETS[target]
    name, content, fld = maker(_b(SHAPES[shape][0]), shape)
    path = tmp_path / name
    path.write_bytes(content)
    return path, f"{3 if name.endswith('.csv') else 2}: " + SHAPES[shape][1].format(field=fld)


def _invoke(db_path: Path, target: str, path: Path, *more: str):
    args = ["--db", str(db_path), *TARGETS[target][1], str(path), *more]
    if target == "golden_jsonl":
        args += ["--annotator", "alice"]
    return CliRunner().invoke(cli, args)


def _problem_lines(output: str, path: Path) -> list[str]:
    return [x for x in output.splitlines() if x.startswith(f"{path}:")]


@pytest.mark.parametrize(("target", "shape"), CASES)
def test_hostile_value_is_one_line_naming_file_line_and_field_and_strict_writes_nothing(
        tmp_path, target, shape):
    path, expected = _write(tmp_path, target, shape)
    db_path = tmp_path / "t.db"
    db = labeler.connect(db_path)
    before = snapshot(db)
    r = _invoke(db_path, target, path)
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    problems = _problem_lines(r.output, path)
    assert len(problems) == 1, r.output
    assert problems[0].startswith(f"{path}:{expected}"), problems[0]
    assert "nothing was written" in r.output
    assert snapshot(labeler.connect(db_path)) == before


@pytest.mark.parametrize(("target", "shape"), CASES)
def test_hostile_value_is_a_counted_reject_with_lenient(tmp_path, target, shape):
    path, expected = _write(tmp_path, target, shape)
    db_path = tmp_path / "t.db"
    r = _invoke(db_path, target, path, "--lenient", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    result = out[0] if isinstance(out, list) else out
    assert (result["records"], result["rejected"], result["new"]) == (2, 1, 1), result
    assert len(result["problems"]) == 1
    assert result["problems"][0].startswith(f"{path}:{expected}")
    rejects = [json.loads(x) for x in Path(result["rejects_path"]).read_text(encoding="utf-8").splitlines()]
    assert [x["line"] for x in rejects] == [3 if path.suffix == ".csv" else 2]
    # what was written can be read back (no lone surrogate reached SQLite)
    db = labeler.connect(db_path)
    assert db.execute("SELECT count(*) FROM queries").fetchone()[0] == (0 if target == "corpus_jsonl" else 1)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_library_raises_one_problem_for_each_shape(tmp_path, shape):
    path, expected = _write(tmp_path, "logs_jsonl", shape)
    db = labeler.connect(tmp_path / "t.db")
    before = snapshot(db)
    with pytest.raises(IngestError) as e:
        labeler.ingest_logs(db, path)
    assert [str(p) for p in e.value.problems][0].startswith(f"{path}:{expected}")
    assert len(e.value.problems) == 1
    assert snapshot(db) == before
    r = labeler.ingest_corpus(db, _write(tmp_path, "corpus_jsonl", shape)[0], lenient=True)
    assert (r.new, r.rejected) == (1, 1)


@pytest.mark.parametrize("shape", ["surrogate", "huge_integer", "deep_nesting"])
def test_parquet_cell_holding_json_for_a_tool_format(tmp_path, shape):
    """Phoenix's span dataframe as Parquet: attributes are text cells holding JSON."""
    value = SHAPES[shape][0]
    query = {"surrogate": '{"query": ' + value + "}", "huge_integer": '{"query": "q", "n": ' + value + "}",
             "deep_nesting": '{"query": ' + value + "}"}[shape]
    table = pa.table({
        "context.span_id": ["s1", "s2"], "context.trace_id": ["t1", "t2"], "parent_id": [None, None],
        "name": ["retrieve", "retrieve"], "span_kind": ["RETRIEVER", "RETRIEVER"],
        "attributes.input.value": ['{"query": "How long do refunds take?"}', query],
        "attributes.retrieval.documents": [[{"document.id": "d1", "document.content": "t"}],
                                           [{"document.id": "d2", "document.content": "t"}]],
    })
    path = tmp_path / "spans.parquet"
    pq.write_table(table, path)
    db_path = tmp_path / "t.db"
    r = _invoke(db_path, "logs_jsonl", path)
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    problems = _problem_lines(r.output, path)
    assert len(problems) == 1 and problems[0].startswith(f"{path}:2: attributes.input.value ("), r.output


def test_parquet_string_cell_that_is_not_utf8_names_its_column(tmp_path):
    question = pa.array([b"How long do refunds take?", b"cut \xf0\x9f here"], type=pa.binary()).view(pa.string())
    chunks = pa.array([[{"id": "d1", "text": "t"}], [{"id": "d2", "text": "t"}]])
    path = tmp_path / "logs.parquet"
    pq.write_table(pa.table({"question": question, "retrieved": chunks}), path)
    db_path = tmp_path / "t.db"
    r = _invoke(db_path, "logs_jsonl", path)
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert _problem_lines(r.output, path) == [f"{path}:2: question: not valid UTF-8 (invalid continuation byte)"]
    r = _invoke(db_path, "logs_jsonl", path, "--lenient", "--json")
    assert r.exit_code == 0, r.output
    assert (json.loads(r.output)[0] if r.output.startswith("[") else json.loads(r.output))["rejected"] == 1


def test_otlp_int_value_of_thousands_of_digits(tmp_path):
    def request(n: int, extra: dict) -> dict:
        attrs = [{"key": "openinference.span.kind", "value": {"stringValue": "RETRIEVER"}},
                 {"key": "input.value", "value": {"stringValue": f"question {n}"}},
                 {"key": "retrieval.documents.0.document.id", "value": {"stringValue": f"d{n}"}}, extra]
        return {"resourceSpans": [{"scopeSpans": [{"spans": [
            {"name": "r", "traceId": f"a{n}", "spanId": f"b{n}", "attributes": attrs}]}]}]}
    path = tmp_path / "otlp.jsonl"
    path.write_text(json.dumps(request(1, {"key": "n", "value": {"intValue": "12"}})) + "\n"
                    + json.dumps(request(2, {"key": "n", "value": {"intValue": HUGE}})) + "\n")
    r = _invoke(tmp_path / "t.db", "logs_jsonl", path)
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert _problem_lines(r.output, path) == [
        f"{path}:2: attributes.intValue: 99999999999999999999... ({DIGITS} characters) is not a 64-bit integer"]


def test_nesting_a_log_record_uses_stays_readable(tmp_path):
    """Only nesting past the limit is refused: 150 levels (deeper than any real span) go in."""
    meta = "[" * 150 + "]" * 150
    path = tmp_path / "logs.jsonl"
    path.write_text('{"question": "q", "retrieved": ' + CHUNKS + ', "meta": {"m": ' + meta + "}}\n"
                    + '{"question": "q2 \\ud83d\\ude00", "retrieved": ' + CHUNKS + "}\n")
    db = labeler.connect(tmp_path / "t.db")
    r = labeler.ingest_logs(db, path)
    assert (r.new, r.rejected) == (2, 0)
    assert db.execute("SELECT question FROM queries ORDER BY pk").fetchall()[1][0] == "q2 \U0001f600"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_standard_input_and_a_sniffed_extension_read_hostile_values_the_same(tmp_path, shape):
    """Without a known extension the format is told from the first line, which is decoded to tell:
    a first line nested 100,000 deep must not break the telling either."""
    _, content, fld = log_jsonl(_b(SHAPES[shape][0]), shape)
    first_bad = content.split(b"\n")[1] + b"\n" + content.split(b"\n")[0] + b"\n"  # the hostile line first
    expected = "1: " + SHAPES[shape][1].format(field=fld)
    r = CliRunner().invoke(cli, ["--db", str(tmp_path / "t.db"), "ingest", "logs", "-"], input=first_bad)
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    problems = _problem_lines(r.output, Path("<stdin>"))
    assert len(problems) == 1 and problems[0].startswith(f"<stdin>:{expected}"), r.output
    path = tmp_path / "logs.txt"
    path.write_bytes(first_bad)
    r = _invoke(tmp_path / "t.db", "logs_jsonl", path)
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    problems = _problem_lines(r.output, path)
    assert len(problems) == 1 and problems[0].startswith(f"{path}:{expected}"), r.output


@pytest.mark.parametrize("target", ["logs_jsonl", "corpus_jsonl", "golden_jsonl"])
def test_a_file_name_that_is_not_utf8_is_shown_and_stored_with_a_replacement_character(tmp_path, target):
    """Python hands such a name over with lone surrogates (``surrogateescape``), which SQLite cannot
    store: the name is kept as shown, with U+FFFD for the byte."""
    maker, _ = TARGETS[target]
    _, content, _ = maker(_b(SHAPES["surrogate"][0]), "surrogate")
    good = content.split(b"\n")[0] + b"\n"
    path = tmp_path / os.fsdecode(b"caf\xe9.jsonl")
    path.write_bytes(good)
    db_path = tmp_path / "t.db"
    r = _invoke(db_path, target, path)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    shown = str(tmp_path / "caf\ufffd.jsonl")
    assert r.output.startswith(shown), r.output
    stored = labeler.connect(db_path).execute("SELECT path FROM ingests").fetchall()
    assert [row[0] for row in stored] == [shown]
    r = _invoke(db_path, target, tmp_path / os.fsdecode(b"gone\xff.jsonl"))
    assert r.exit_code == 1 and r.output == f"Error: {tmp_path / 'gone'}\ufffd.jsonl: no such file\n", r.output


def test_a_json_array_reads_on_after_a_record_nested_too_deep(tmp_path):
    """The deep record is skipped to its closing bracket, so --lenient keeps the records after it."""
    record = '{"question": "q%d", "retrieved": [{"id": "d%d", "text": "t"}]}'
    deep = '{"question": "deep", "retrieved": [], "meta": {"s": "]]}", "x": ' + DEEP + "}}"
    path = tmp_path / "logs.json"
    path.write_text("[" + record % (1, 1) + ",\n" + deep + ",\n" + record % (2, 2) + "]\n")
    db = labeler.connect(tmp_path / "t.db")
    with pytest.raises(IngestError) as e:
        labeler.ingest_logs(db, path)
    assert [str(p) for p in e.value.problems] == [f"{path}:2: meta.x[0][0]...: nested more than 200 levels deep"]
    r = labeler.ingest_logs(db, path, lenient=True)
    assert (r.records, r.new, r.rejected) == (3, 2, 1)
    assert db.execute("SELECT question FROM queries ORDER BY pk").fetchall() == [("q1",), ("q2",)]


@pytest.mark.parametrize("shape", ["huge_integer", "deep_nesting"])
def test_a_hostile_manifest_next_to_a_golden_file_is_only_a_missing_hint(tmp_path, shape):
    path, _ = _write(tmp_path, "golden_jsonl", shape)
    path.write_bytes(path.read_bytes().split(b"\n")[0] + b"\n")  # the good line only
    Path(str(path) + ".manifest.json").write_text('{"threshold": ' + SHAPES[shape][0] + "}")
    r = _invoke(tmp_path / "t.db", "golden_jsonl", path)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output

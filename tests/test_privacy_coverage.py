"""Redaction with no way around it, tested as an attacker would: content ids that cannot be
brute-forced back to the value they hide, and one distinct planted value per stored field and per
way in (log formats, gzip, stdin, every tool export, corpus, golden import, what annotators and
leads type, LLM requests and answers), none of which may appear in the database file, its WAL or
any export."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pydantic
import pytest
from click.testing import CliRunner

import labeler
from labeler import labels as L
from labeler import llm
from labeler.cli import cli
from labeler.export import import_golden
from tests.fake_openai import FakeOpenAI
from tests.planted_pii import Plants, database_bytes, dumps_lines, expected_strings, luhn_complete, plant_file

TOOLS = Path(__file__).parent / "fixtures" / "tools"
EXPECTED = json.loads((TOOLS / "expected.json").read_text())
EXPORTS = ("jsonl", "csv", "ragas", "trec", "beir")


def run(*argv: str, input: bytes | None = None):
    return CliRunner().invoke(cli, list(argv), input=input, catch_exceptions=False)


def plain_content_id(text: str) -> str:
    """How a chunk without an id was identified before: anyone can compute it from a guess."""
    return "sha1:" + hashlib.sha1(text.encode()).hexdigest()[:16]


def export_all(db_path: Path, out: Path) -> list[Path]:
    paths = []
    db = labeler.connect(db_path)
    names = sorted({r[0] for r in db.execute("SELECT DISTINCT retriever FROM retrievals")} - {"production"})
    db.close()
    for fmt in EXPORTS:
        one = ["--retriever", names[0]] if fmt in ("csv", "ragas") and names else []
        r = run("--db", str(db_path), "export", "--format", fmt, "-o", str(out / f"export-{fmt}"), *one)
        assert r.exit_code == 0, r.output
        paths += sorted(out.glob(f"export-{fmt}*"))
    return paths


def submit_everything(db, annotator: str = "alice") -> None:
    labeler.set_setting(db, "overlap_fraction", 0)
    for (qpk,) in db.execute("SELECT pk FROM queries WHERE discarded_at IS NULL AND pk NOT IN "
                             "(SELECT query_pk FROM query_labels WHERE annotator != ?)", [annotator]).fetchall():
        for (dpk,) in db.execute("SELECT doc_pk FROM retrievals WHERE query_pk = ?", [qpk]).fetchall():
            L.set_grade(db, qpk, dpk, annotator, 3)
        L.set_status(db, qpk, annotator, "submitted")


# --- content ids -----------------------------------------------------------------------------

CARD = luhn_complete("411111000042123")
PHONE = "+1 415 555 0132"


def test_content_ids_cannot_be_brute_forced_from_the_redacted_text(tmp_path):
    texts = [f"Customer card {CARD} was charged twice.", f"Call the customer back on {PHONE} today."]
    log = tmp_path / "ragas.jsonl"  # Ragas style: contexts are bare texts, identified by their content
    log.write_text(dumps_lines([{"question": "why was I charged twice", "contexts": texts,
                                 "answer": "A refund is on its way."}]))
    db_path = tmp_path / "t.db"
    assert run("--db", str(db_path), "ingest", "logs", str(log)).exit_code == 0
    db = labeler.connect(db_path)
    submit_everything(db)
    exported = b"".join(p.read_bytes() if p.is_file() else b"".join(x.read_bytes() for x in p.rglob("*") if x.is_file())
                        for p in export_all(db_path, tmp_path))
    ids = set(re.findall(rb"sha1:[0-9a-f]{16}", exported))
    assert len(ids) == 2  # the attacker has the ids ...
    stored = dict(db.execute("SELECT doc_id, text FROM documents").fetchall())
    redacted = sorted(stored.values())
    assert redacted == ["Call the customer back on [PHONE_1] today.", "Customer card [CARD_1] was charged twice."]
    assert all(t.encode() in exported for t in redacted)  # ... and the redacted texts
    # every card number within 500 of the real one, every phone number of its exchange
    cards = [redacted[1].replace("[CARD_1]", str(n)) for n in range(int(CARD) - 500, int(CARD) + 500)]
    phones = [redacted[0].replace("[PHONE_1]", f"+1 415 555 {n:04d}") for n in range(10_000)]
    assert texts[0] in cards and texts[1] in phones  # the true value is among the guesses
    hits = [t for t in cards + phones if plain_content_id(t).encode() in ids]
    assert hits == []
    db.close()


def test_content_ids_stay_stable_within_a_database_and_unchanged_without_a_value(tmp_path):
    secret_text = f"Customer card {CARD} was charged twice."
    plain_text = "Refunds are paid within five days."
    first = tmp_path / "a.jsonl"
    second = tmp_path / "b.jsonl"
    first.write_text(dumps_lines([{"question": "charged twice?", "contexts": [secret_text, plain_text]}]))
    second.write_text(dumps_lines([{"question": "refund when?", "contexts": [plain_text, secret_text]}]))
    db = labeler.connect(tmp_path / "t.db")
    labeler.ingest_logs(db, first)
    labeler.ingest_logs(db, second)
    again = labeler.ingest_logs(db, first)
    assert (again.new, again.unchanged) == (0, 1)  # a re-ingest still deduplicates
    ids = dict(db.execute("SELECT text, doc_id FROM documents").fetchall())
    assert len(ids) == 2  # the same chunk in two files and two queries is one document
    assert ids[plain_text] == plain_content_id(plain_text)  # nothing found: the id of old databases
    keyed = ids["Customer card [CARD_1] was charged twice."]
    assert keyed.startswith("sha1:") and len(keyed) == 21 and keyed != plain_content_id(secret_text)
    other = labeler.connect(tmp_path / "other.db")
    labeler.ingest_logs(other, first)
    assert other.execute("SELECT doc_id FROM documents WHERE text LIKE 'Customer%'").fetchone()[0] != keyed
    off = labeler.connect(tmp_path / "off.db")
    labeler.ingest_logs(off, first, redact=False)
    assert {r[0] for r in off.execute("SELECT doc_id FROM documents")} == {plain_content_id(secret_text),
                                                                          plain_content_id(plain_text)}
    for d in (db, other, off):
        d.close()


def test_golden_import_ids_are_not_hashes_of_the_raw_question(tmp_path):
    question = f"my card {CARD} was charged twice"
    golden = tmp_path / "golden.jsonl"
    golden.write_text(dumps_lines([{"question": question, "relevant_ids": ["kb-1"]}]))
    db = labeler.connect(tmp_path / "t.db")
    import_golden(db, golden, annotator="alice")
    qid, stored = db.execute("SELECT query_id, question FROM queries").fetchone()
    assert stored == "my card [CARD_1] was charged twice"
    raw_guesses = {"g-" + hashlib.sha1(question.replace(CARD, str(n)).encode()).hexdigest()[:16]
                   for n in range(int(CARD) - 500, int(CARD) + 500)}
    assert qid not in raw_guesses
    db.close()


# --- every stored field, every way in --------------------------------------------------------

def log_record(plants: Plants, path: str) -> dict:
    """One log record with a distinct value in every field a log can fill."""
    def w(field: str) -> str:
        return plants.new(f"{path}.{field}")

    return {"query_id": f"sess:{w('query_id')}", "question": f"Please help {w('question')} now",
            "answer": f"Noted {w('answer')}.", "retriever": f"retriever {w('retriever')}",
            "retrieved": [{"id": f"doc:{w('chunk.id')}", "text": f"Ticket says {w('chunk.text')}",
                           "title": f"From {w('chunk.title')}", "score": 0.9},
                          {"text": f"No id here, {w('chunk.text without id')} wrote", "score": 0.5}],
            "meta": {"contact": w("meta.string"), "nested": {"list": [w("meta.list")]}, w("meta.key"): 1,
                     "card_int": plants.number(f"{path}.meta.int"),
                     "card_float": plants.number(f"{path}.meta.float", as_float=True),
                     "phone_float": plants.number(f"{path}.meta.phone float", "PHONE", as_float=True)},
            "user_contact": w("top-level column")}


def write_csv(path: Path, recs: list[dict]) -> Path:
    import pandas as pd

    pd.DataFrame([{**r, "retrieved": json.dumps(r["retrieved"]), "meta": json.dumps(r["meta"])} for r in recs]) \
        .to_csv(path, index=False)
    return path


def write_parquet(path: Path, recs: list[dict], plants: Plants) -> Path:
    # columns as pandas writes them: a card and a phone number in float columns (an int column with gaps)
    rows = [{**r, "card_number": plants.number("parquet.float column", as_float=True),
             "phone_number": plants.number("parquet.float phone column", "PHONE", as_float=True)} for r in recs]
    rows.append({**rows[0], "query_id": "no-numbers", "card_number": None, "phone_number": None})
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("name", sorted(k for k in EXPECTED if not k.startswith("_")))
def test_no_planted_value_in_a_tool_export_is_stored(tmp_path, name):
    """Each tool's file with a value after every question, answer and chunk text, each occurrence
    its own (so a retriever's input differs from the root's question and is kept in meta)."""
    plants = Plants()
    dst = tmp_path / Path(name).name
    plant_file(TOOLS / name, dst, expected_strings(EXPECTED[name]), plants)
    assert plants.where
    db_path = tmp_path / "t.db"
    db = labeler.connect(db_path)
    r = labeler.ingest_logs(db, dst)
    assert r.new and not r.problems, r.to_dict()
    assert r.redactions
    if name.startswith(("phoenix/", "otel/")) and "retrieved_documents" not in name:
        metas = " ".join(m for (m,) in db.execute("SELECT meta FROM queries WHERE meta IS NOT NULL"))
        assert "retriever_input" in metas
    submit_everything(db)
    exports = export_all(db_path, tmp_path)
    db.close()
    assert plants.check_files(exports) == []
    assert plants.leaks(database_bytes(db_path)) == []


class Echo(pydantic.BaseModel):
    answer: str
    rationale: str


def test_no_planted_value_is_stored_or_exported_from_any_path(tmp_path):
    plants = Plants()
    db_path = tmp_path / "t.db"
    db = labeler.connect(db_path)
    # a phone number read as a number has no separators: found by the user's pattern, with its +
    labeler.set_redaction(db, patterns={"PHONE": r"\+1415555\d{4}"})
    files = {"jsonl": tmp_path / f"logs of {plants.new('file name', 'EMAIL')}.jsonl", "csv": tmp_path / "l.csv", "parquet": tmp_path / "l.parquet",
             "gzip": tmp_path / "l.jsonl.gz"}
    files["jsonl"].write_text(dumps_lines([log_record(plants, "jsonl")]))
    write_csv(files["csv"], [log_record(plants, "csv")])
    write_parquet(files["parquet"], [log_record(plants, "parquet")], plants)
    files["gzip"].write_bytes(gzip.compress(dumps_lines([log_record(plants, "gzip")]).encode()))
    for path in files.values():
        r = labeler.ingest_logs(db, path)
        assert r.new >= 1 and not r.problems, r.to_dict()
    out = run("--db", str(db_path), "ingest", "logs", "-", "--json",
              input=dumps_lines([log_record(plants, "stdin")]).encode())
    assert out.exit_code == 0, out.output
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(dumps_lines([{"id": f"kb:{plants.new('corpus.id')}", "text": f"About {plants.new('corpus.text')}",
                                    "title": f"T {plants.new('corpus.title')}", "url": plants.new("corpus.source"),
                                    "meta": {"owner": plants.new("corpus.meta"),
                                             "card": plants.number("corpus.meta.float", as_float=True)}}]))
    assert labeler.ingest_corpus(db, corpus).new == 1
    golden = tmp_path / "golden.jsonl"
    golden.write_text(dumps_lines([{"query_id": f"imp:{plants.new('golden.query_id')}",
                                    "question": f"Imported {plants.new('golden.question')}",
                                    "relevance": {f"doc:{plants.new('golden.relevance id')}": 3},
                                    "expected_answer": f"Say {plants.new('golden.expected_answer')}"},
                                   {"question": f"Imported without id {plants.new('golden.question, g- id')}",
                                    "relevant_ids": ["kb-1"]}]))
    imported = import_golden(db, golden, annotator="importer")
    assert imported.new == 2
    bad = tmp_path / "bad.jsonl"  # a rejected line's message and record are scrubbed
    bad.write_text(dumps_lines([{"question": "q", "relevance": {f"doc:{plants.new('golden.bad id')}": 9}}]))
    rejected = import_golden(db, bad, annotator="importer", lenient=True)
    assert rejected.rejected == 1 and rejected.rejects_path
    # what annotators and leads type
    labeler.set_setting(db, "overlap_fraction", 0)
    pks = [r[0] for r in db.execute("SELECT pk FROM queries ORDER BY pk")]
    L.set_query_fields(db, pks[0], "alice", expected_answer=f"Call {plants.new('typed.expected_answer')}",
                       notes=f"Customer is {plants.new('typed.notes')}")
    L.set_status(db, pks[1], "alice", "flagged", reason=f"Has {plants.new('typed.flag_reason')}")
    L.set_status(db, pks[2], "alice", "skipped", reason=f"Skip {plants.new('typed.status_reason')}")
    L.resolve_flag(db, pks[1], "alice", "unflag", note=f"Lead says {plants.new('typed.lead note')}")
    L.edit_question(db, pks[3], f"Edited {plants.new('typed.question edit')}", note=f"n {plants.new('typed.edit note')}")
    L.discard_item(db, pks[4], f"Discard {plants.new('typed.discard reason')}")
    # an LLM request holding a value, answered by a model that echoes it and adds another
    echoed = plants.new("llm.answer", "EMAIL")

    def respond(request):
        asked = " ".join(m["content"] for m in request["messages"] if m["role"] == "user")
        return {"answer": f"I read: {asked}", "rationale": f"and called {echoed}"}

    with FakeOpenAI(responder=respond) as server:
        config = llm.LLMConfig(base_url=server.url, api_key="sk-test", model="fake-model", timeout_s=5,
                               max_retries=0)
        task = llm.Task("t1", [{"role": "user", "content": f"Grade this: {plants.new('llm.request')}"}], Echo)
        summary = llm.run_tasks(db, config, [task])
    submit_everything(db)
    exports = export_all(db_path, tmp_path)
    db.close()
    assert len(plants.where) > 60
    assert plants.leaks(out.output.encode()) == []
    assert plants.check_files(exports + [Path(rejected.rejects_path)]) == []
    assert plants.leaks(database_bytes(db_path)) == []
    answer = summary.results["t1"]
    # the model saw the request redacted, and the caller gets the echo redacted too
    assert answer.answer.startswith("I read: Grade this: [") and answer.rationale == "and called [EMAIL_1]"


def test_a_synthetic_question_a_review_edit_and_a_judge_rationale_that_echo_a_value_are_stored_redacted(
        db, tmp_path, ingest_tiny):
    from labeler import judge, synth
    from tests.test_synth import corpus_records, transform

    plants = Plants()
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(dumps_lines(corpus_records()))
    labeler.ingest_corpus(db, corpus)
    asked, answered = plants.new("synth.question", "EMAIL"), plants.new("synth.answer", "CARD")

    def echo(request, questions):
        return [{**q, "question": f"{q['question']} Mail {asked}?", "answer": f"{q['answer']} {answered}"}
                for q in questions]

    with FakeOpenAI(responder=transform(echo)) as server:
        config = llm.LLMConfig(base_url=server.url, api_key="sk-test", model="fake-model", timeout_s=5, max_retries=0)
        result = synth.generate(db, config, synth.SynthOptions(n=2, per_chunk=1))
    assert result.stored
    pk = result.stored[0]
    question = db.execute("SELECT question FROM queries WHERE pk = ?", [pk]).fetchone()[0]
    assert question.endswith("Mail [EMAIL_1]?")
    synth.review(db, pk, "edit", reviewer="rita", question=f"Edited {plants.new('synth.review question')}",
                 answer=f"Edited {plants.new('synth.review answer')}")
    # a judge whose rationale quotes a value it made up
    pks = ingest_tiny(db, 2, 2)
    labeler.set_setting(db, "overlap_fraction", 0)
    for qpk in pks:
        for (dpk,) in db.execute("SELECT doc_pk FROM retrievals WHERE query_pk = ?", [qpk]).fetchall():
            L.set_grade(db, qpk, dpk, "alice", 2)
        L.set_status(db, qpk, "alice", "submitted")
    quoted = plants.new("judge.rationale", "PHONE")
    with FakeOpenAI(responder=lambda request: {"rationale": f"the user at {quoted} asks", "relevance_grade": 2}) \
            as server:
        config = llm.LLMConfig(base_url=server.url, api_key="sk-test", model="fake-model", timeout_s=5, max_retries=0)
        run = judge.run_judge(db, config, "relevance.v1", on="labeled")
    assert run.done == 4
    rationales = {r[0] for r in db.execute("SELECT rationale FROM judge_labels WHERE run_id = ?", [run.id])}
    assert rationales == {"the user at [PHONE_1] asks"}
    assert plants.leaks("\n".join(db.conn.iterdump()).encode()) == []


def test_a_batch_run_sends_stores_and_collects_only_redacted_text(db):
    from labeler.llm import batch

    plants = Plants()
    finished: list[int] = []
    batch.register_owner(batch.BatchOwner("privacy-test", lambda db, run_id: Echo,
                                          lambda db, config, run_id: finished.append(run_id)))
    echoed = plants.new("batch.answer", "EMAIL")
    tasks = [llm.Task(f"t{i}", [{"role": "user", "content": f"Grade {plants.new(f'batch.request {i}')}"}], Echo)
             for i in range(3)]

    def respond(request):
        asked = " ".join(m["content"] for m in request["messages"] if m["role"] == "user")
        return {"answer": f"I read: {asked}", "rationale": f"and called {echoed}"}

    with FakeOpenAI(responder=respond) as server:
        config = llm.LLMConfig(base_url=server.url, api_key="sk-test", model="gpt-4o-mini", timeout_s=5,
                               max_retries=0)
        sub = batch.submit(db, config, tasks, owner="privacy-test", run_id=1)
        for b in sub.batches:
            server.batch.advance(b.batch_id, "completed")
        assert batch.collect(db, config).ok == 3 and finished == [1]
        uploaded = b"".join(Path(server.batch.path(f)).read_bytes() for f, meta in server.batch.files.items()
                            if meta["purpose"] == "batch")
        summary = llm.run_tasks(db, config, tasks, cached_only=True)  # the same tasks find their answers
    assert summary.cached == 3 and not summary.failed
    assert {r.rationale for r in summary.results.values()} == {"and called [EMAIL_1]"}
    assert b"Grade [" in uploaded and plants.leaks(uploaded) == []  # the provider got the redacted requests
    assert plants.leaks("\n".join(db.conn.iterdump()).encode()) == []


def _hinted_texts(seed: int) -> list[str]:
    """Every planted value's sentence, the value, pieces of it and its surroundings, and random
    texts made of words that look like the start of a value (or are one)."""
    import random

    from tests import pii_planted

    rng = random.Random(seed)
    texts = []
    for p in pii_planted.planted(24):
        cut = rng.randrange(len(p.value) + 1)
        texts += [f"{p.before}{p.value}{p.after}", p.value, p.value[:cut], p.value[cut:], p.before, p.after]
    words = "refund plan sso 2026-11-01 v2.3.1 #4411 order 1234 AB12 x: a::b @ sk-x AKIA eyJ 12 34 56 78".split()
    texts += [" ".join(rng.choice(words) for _ in range(rng.randint(1, 8))) for _ in range(3000)]
    rng.shuffle(texts)
    return texts


def test_a_text_known_clean_is_one_the_detectors_find_nothing_in():
    """Redactor.known_clean / Detectors.clean: a text called clean is one in which find() finds
    nothing, and the texts with a value are all left to find() (whatever their neighbours)."""
    from labeler.privacy.detectors import Detectors
    from labeler.privacy.redactor import Redactor

    texts = _hinted_texts(5)
    ascii_texts = [t for t in texts if t.isascii()]
    detectors = Detectors()
    clean = detectors.clean(ascii_texts)
    assert sum(clean) > len(ascii_texts) // 4  # it does answer for many
    for text, ok in zip(ascii_texts, clean, strict=True):
        if ok:
            assert detectors.find(text) == [], text
    assert any(detectors.find(t) for t in ascii_texts)
    redactor = Redactor(key=b"k")
    known = redactor.known_clean(texts)
    assert known and not [t for t in known if redactor.find(t)]
    # remembered: a second screen of the same texts, among others, answers the same
    assert redactor.known_clean(texts, remember=True) == known
    assert redactor.known_clean(texts + ["a@b.io", "plain words"], remember=True) == known | {"plain words"}
    assert not [t for t in known if not t.isascii() and len(t) >= redactor.min_len]  # those are find()'s
    # a user's pattern may match anything: only texts too short for it to matter are known
    assert not any(Detectors({"TICKET": r"order"}).clean(ascii_texts))


def test_a_number_remembered_is_found_as_a_fresh_search_finds_it():
    """Detectors' memo of numeric hints (a number and the two characters either side of it):
    every text gives what a search without the memo gives, though the same numbers come back
    with other neighbours (a ``+`` or ``(`` before, a dot and a digit after, a value after the
    seconds of a time), at the start and end of a text, and in texts that hold planted values."""
    import random

    from labeler.privacy.detectors import Detectors
    from tests import pii_planted

    rng = random.Random(11)
    numbers = ["+44 20 7946 0958", "(555) 123-4567", "4111 1111 1111 1111", "4111 1111 1111 1112", "192.168.1.20",
               "123-45-6789", "2026-05-12", "45.3.12", "1,234.00", "0044 20 7946 0958", "10:32:07 192.168.1.20",
               "06 12 34 56 78", "+1 (415) 555-2671", "415 555 2671", "127.0.0.1", "12345678901"]
    glue = ["", " ", "x", "+", "(", ".", "-", "/", ",", ". 7", "-1", " a ", "_"]
    texts = [f"{p.before}{p.value}{p.after}" for p in pii_planted.planted(12)]
    for _ in range(20_000):
        parts = [rng.choice(numbers) if rng.random() < 0.6 else rng.choice(["ticket", "on", "call", "A1", "v"])
                 for _ in range(rng.randint(1, 5))]
        texts.append("".join(part + rng.choice(glue) for part in parts))
    texts += texts  # the second time round every hint is remembered
    remembering, fresh = Detectors(), Detectors()
    fresh.number_memo = None
    found = [remembering.find(t) for t in texts]
    assert found == [fresh.find(t) for t in texts]
    assert len(remembering.number_memo) > 100 and sum(map(bool, found)) > len(texts) // 3


def _records(seed: int, n: int) -> list[dict]:
    """Validated log records (``validate_log``'s shape) of every kind redaction meets: values in
    query ids, questions, answers, chunk ids, texts, titles, retrievers' names and meta; ids made
    from a text; tracer ids; chunks repeated across records with the same or another text."""
    import random

    rng = random.Random(seed)
    texts = _hinted_texts(seed)
    plain = ["how do I export a report?", "refund the plan", "", "why is sso failing for okta users",
             "where are the billing settings", "the plan page lists every seat", "x"]

    def pick(p_value: float) -> str:
        return rng.choice(texts) if rng.random() < p_value else rng.choice(plain)

    recs = []
    for i in range(n):
        k = rng.randint(1, 6)
        ids = list(dict.fromkeys(
            (pick(0.5) or f"doc-{i}") if rng.random() < 0.03 else f"doc-{rng.randrange(300)}" for _ in range(k)))
        chunk_texts = None if rng.random() < 0.2 else [
            None if rng.random() < 0.1 else pick(0.05) if rng.random() < 0.3 else f"the text of {c}" for c in ids]
        made = [j for j in range(len(ids)) if chunk_texts and chunk_texts[j] and rng.random() < 0.03]
        for j in made:
            ids[j] = f"sha1:{i:06x}{j}"
        recs.append({
            "query_id": None if rng.random() < 0.1 else pick(0.05) or f"r{i}",
            "question": pick(0.1) or "a question", "answer": None if rng.random() < 0.5 else pick(0.1),
            "ids": ids, "texts": chunk_texts,
            "titles": None if rng.random() < 0.8 else [pick(0.1) or None for _ in ids],
            "scores": [None] * len(ids), "timestamp": None,
            "retriever": rng.choice(["production", "production", "bm25", pick(0.3) or "dense"]),
            "meta": None if rng.random() < 0.9 else {"user": pick(0.5), "n": rng.choice([4111111111111111, 7])},
            "opaque_id": rng.random() < 0.05, "content_ids": len(made), "made_ids": made,
        })
    return recs


@pytest.mark.parametrize("user_pattern", [False, True])
def test_a_batch_is_redacted_as_its_records_one_by_one(user_pattern, monkeypatch):
    """redact_batch gives every record exactly what redact_log gives it, record after record, with
    the stored chunks growing between batches as an ingest's do (``StoredTexts.keep``), and the
    same totals; with a user's pattern (which may match anything) too."""
    import copy

    from labeler.privacy import StoredTexts, records, redact_batch, redact_log
    from labeler.privacy.redactor import Redactor

    searched = []  # the records redact_batch hands to redact_log
    monkeypatch.setattr(records, "redact_log", lambda *a: searched.append(a[1]) or redact_log(*a))
    patterns = {"TICKET": r"#\d{4}"} if user_pattern else None
    recs = _records(11, 3000)
    by_batch, one_by_one = Redactor(patterns, key=b"k"), Redactor(patterns, key=b"k")
    stored_a, stored_b = StoredTexts(), StoredTexts()
    for start in range(0, len(recs), 250):
        a = copy.deepcopy(recs[start:start + 250])
        b = copy.deepcopy(a)
        redact_batch(by_batch, a, stored_a)
        for rec in b:
            redact_log(one_by_one, rec, stored_b)
        assert a == b
        for stored, batch in ((stored_a, a), (stored_b, b)):  # what an ingest keeps after the batch
            stored.keep({cid: (f"kept {cid}", None) for rec in batch for cid in rec["ids"]})
    assert by_batch.counts == one_by_one.counts and sum(by_batch.counts.values()) > 100
    assert stored_a.found == stored_b.found
    if user_pattern:  # any text may match it: every record is searched
        assert len(searched) == len(recs)
    else:  # most records are known clean at once, and the others are all searched
        assert len(recs) // 10 < len(searched) < len(recs) // 2, len(searched)

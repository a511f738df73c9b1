"""Chunk texts retrieved again and again (a pool, as real logs repeat their corpus): the work done
once per distinct text must give what doing it for every occurrence gives, across batches and in
the forked parser alike."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import labeler
from labeler.ingest.batches import BATCH, FIRST_BATCH

EMAIL = "maria.rossi@example.com"
PHONE = "+44 20 7946 0958"


def pooled_log(path: Path, n: int) -> dict[str, int]:
    """``n`` queries x 5 chunks from a pool of 40 texts, two of which hold a value; chunk ``late``
    comes without text until the last batch, ``early`` with text only in the first record.
    Returns how often each planted text is retrieved."""
    rng = random.Random(7)
    pool = [f"Step {d}: open Settings > Billing and press Export (plan {d})" for d in range(40)]
    pool[3] = f"Write to {EMAIL} for a refund"
    pool[5] = f"Call {PHONE} when the sync fails"
    seen = {"EMAIL": 0, "PHONE": 0}
    with open(path, "w") as f:
        for i in range(n):
            picks = rng.sample(range(40), 5)
            chunks = [{"id": f"doc-{d}", "text": pool[d], "score": 0.5} for d in picks]
            seen["EMAIL"] += 3 in picks
            seen["PHONE"] += 5 in picks
            chunks.append({"id": "late", "score": 0.1} if i < n - 1 else {"id": "late", "text": "arrived", "score": 0.1})
            chunks.append({"id": "early", "text": "first text", "score": 0.1} if i == 0 else {"id": "early", "score": 0.1})
            f.write(json.dumps({"query_id": f"q{i}", "question": f"how do I export {i}",
                                "retrieved": chunks}) + "\n")
    return seen


@pytest.mark.parametrize("parallel", [False, True])
def test_a_repeated_chunk_text_is_redacted_and_counted_every_time(tmp_path, parallel):
    n = 2 * BATCH + 300  # several batches: the texts are known after the first
    log = tmp_path / "pooled.jsonl"
    seen = pooled_log(log, n)
    db = labeler.connect(tmp_path / "l.db")
    result = labeler.ingest_logs(db, log, parallel=parallel)
    assert result.new == n and result.retrievals == 7 * n
    # every occurrence is counted, though the text was searched once
    assert result.redactions == {"EMAIL": seen["EMAIL"], "PHONE": seen["PHONE"]}
    texts = dict(db.execute("SELECT doc_id, text FROM documents").fetchall())
    assert texts["doc-3"] == "Write to [EMAIL_1] for a refund"
    assert texts["doc-5"] == "Call [PHONE_1] when the sync fails"
    # a chunk logged without text keeps waiting for one, and one logged with it keeps it
    assert texts["late"] == "arrived" and texts["early"] == "first text"
    assert len(texts) == 42 and result.documents_without_text == 0
    data = b"".join(p.read_bytes() for p in tmp_path.glob("l.db*"))
    assert EMAIL.encode() not in data and b"7946 0958" not in data
    # the same rows whichever way the file was parsed
    rows = db.execute("SELECT q.query_id, d.doc_id, r.rank FROM retrievals r JOIN queries q ON q.pk = r.query_pk "
                      "JOIN documents d ON d.pk = r.doc_pk ORDER BY q.pk, r.rank").fetchall()
    assert len(rows) == 7 * n and rows[-1] == (f"q{n - 1}", "early", 7)


def test_each_chunk_text_crosses_from_the_parser_once(tmp_path):
    """The rows carry no texts; each chunk's text comes once, with the batch that first gives it
    (a chunk logged first without text sends it when a row finally has it)."""
    from labeler.ingest.batches import parsed_batches

    n = 2 * BATCH + 300
    log = tmp_path / "pooled.jsonl"
    pooled_log(log, n)
    sent: dict[str, list[str]] = {}
    for batch in parsed_batches(log, "jsonl", False, None, 10**7, False, texts_apart=True):
        assert all(item[1].rec["texts"] is None and item[1].rec["titles"] is None for item in batch.items)
        for cid, (text, _title) in batch.texts.items():
            sent.setdefault(cid, []).append(text)
    assert len(sent) == 42 and all(len(v) == 1 for v in sent.values())
    assert sent["late"] == ["arrived"] and sent["early"] == ["first text"]


@pytest.mark.parametrize("parallel", [False, True])
def test_a_text_given_only_by_a_rejected_line_still_reaches_its_chunk(tmp_path, parallel):
    """Line 2 repeats q0 with other content (rejected with --lenient); the text of its chunk
    ``only-here`` is not given again when later lines retrieve it, yet the chunk keeps it; the first
    text a file gives a chunk is the one kept, and a title sent before the text stays with it."""
    records = [{"query_id": "q0", "question": "a", "retrieved": [{"id": "t", "title": "Its title", "score": 1}]},
               {"query_id": "q0", "question": "a", "retrieved": [{"id": "only-here", "text": "kept text"}]}]
    records += [{"query_id": f"q{i}", "question": f"q {i}",
                 "retrieved": [{"id": "only-here"}, {"id": "t", "text": "the text" if i == 1 else f"later {i}"}]}
                for i in range(1, BATCH + 50)]  # past the first batch
    log = tmp_path / "l.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    db = labeler.connect(tmp_path / "l.db")
    result = labeler.ingest_logs(db, log, parallel=parallel, lenient=True)
    assert len(result.problems) == 1 and result.problems[0].line == 2
    docs = {d: (text, title) for d, text, title in db.execute("SELECT doc_id, text, title FROM documents")}
    assert docs["only-here"] == ("kept text", None)
    assert docs["t"] == ("the text", "Its title")
    assert result.documents_without_text == 0


@pytest.mark.parametrize("parallel", [False, True])
def test_once_a_chunks_text_is_stored_each_retrieval_counts_the_values_of_that_text(tmp_path, parallel):
    """Rows whose every chunk has its text stored are not searched again: they count what the
    stored text held. ``plain`` is stored without a value, though a later line (same batch) and
    later batches log it with an e-mail: those later batches count nothing for it, and the
    address reaches neither the database nor the counts of rows that never stored it. ``mail``
    holds a value from its first line: every retrieval counts it."""
    records = [{"query_id": "q0", "question": "first", "retrieved": [{"id": "plain", "text": "nothing here"},
                                                                     {"id": "mail", "text": f"write {EMAIL}"}]},
               {"query_id": "q1", "question": "second", "retrieved": [{"id": "plain", "text": f"now {EMAIL}"}]}]
    records += [{"query_id": f"q{i}", "question": f"q {i}",
                 "retrieved": [{"id": "plain", "text": f"later {EMAIL}"}, {"id": "mail", "text": f"write {EMAIL}"}]}
                for i in range(2, 2 * BATCH + 10)]  # more batches, in which both texts are stored
    log = tmp_path / "l.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    db = labeler.connect(tmp_path / "l.db")
    result = labeler.ingest_logs(db, log, parallel=parallel)
    docs = dict(db.execute("SELECT doc_id, text FROM documents").fetchall())
    assert docs == {"plain": "nothing here", "mail": "write [EMAIL_1]"}
    in_first_batch = FIRST_BATCH - 2  # rows q2.. of the first batch: searched, as the text was not stored yet
    mail_rows = len(records) - 1
    assert result.redactions == {"EMAIL": mail_rows + 1 + in_first_batch}
    data = b"".join(p.read_bytes() for p in tmp_path.glob("l.db*"))
    assert EMAIL.encode() not in data


def test_texts_waiting_for_a_row_are_bounded(tmp_path, monkeypatch):
    """Texts of chunks no written row retrieves (a re-ingest's unchanged lines) wait at most
    PENDING_MAX at a time, the oldest leaving first: memory stays flat in the file's size."""
    from labeler.ingest import writer

    monkeypatch.setattr(writer, "PENDING_MAX", 3)
    w = writer.LogWriter(labeler.connect(tmp_path / "l.db"), "x", None, 0)
    w.add_texts({f"c{i}": (f"text {i}", None) for i in range(5)})
    assert list(w.pending) == ["c2", "c3", "c4"]
    w.add_texts({"c3": ("another text", None), "c5": (None, "a title")})
    assert w.pending["c3"] == ("text 3", None) and list(w.pending) == ["c3", "c4", "c5"]


def test_the_first_batches_are_small_and_grow_to_the_full_size(tmp_path):
    """The writer waits for the parser's first batch, and with chunk texts the first batches are
    the slowest to make (most texts are new and searched): they hold 250, 500 and 1,000 records,
    then BATCH; every line is in one batch, in order."""
    from labeler.ingest.batches import parsed_batches

    log = tmp_path / "l.jsonl"
    n = 3 * BATCH + 123
    log.write_text("".join(json.dumps({"query_id": f"q{i}", "question": f"q {i}", "retrieved": [{"id": f"d{i % 7}"}]})
                           + "\n" for i in range(n)))
    batches = list(parsed_batches(log, "jsonl", False, None, 1 << 20, False))
    sizes = [len(b.items) for b in batches]
    assert sizes[:4] == [FIRST_BATCH, 2 * FIRST_BATCH, 4 * FIRST_BATCH, BATCH]
    assert all(size == BATCH for size in sizes[3:-1]) and sum(sizes) == n
    assert [item[0] for b in batches for item in b.items] == list(range(1, n + 1))

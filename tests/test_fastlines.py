"""The C-decoded path for plain JSON lines (labeler.ingest.fastlines) gives exactly the records the
general path gives, and declines every line the general path would read differently or reject."""

from __future__ import annotations

import io
import json
import random

from labeler.ingest import formats
from labeler.ingest.batches import parsed_batches
from labeler.ingest.common import FieldError
from labeler.ingest.fastlines import FastLines
from labeler.ingest.readers import BadRecord, read_jsonl
from labeler.ingest.validate import validate_log

_MISSING = object()


def general(line: bytes):
    """What the general path makes of one line: a validated record, or ("problem", field)."""
    records = list(read_jsonl(io.BytesIO(line)))
    assert len(records) == 1
    for _, item, raw in formats.Reader().read(iter(records)):
        if isinstance(item, BadRecord | FieldError):
            return ("problem", item.field), raw
        try:
            return validate_log(item), raw
        except FieldError as e:
            return ("problem", e.field), raw
    raise AssertionError("no record")


def pick(rng: random.Random, usual, odd: list, hostile: bool):
    """The usual value, or (in a hostile record, one time in three) an odd one."""
    return rng.choice(odd) if hostile and rng.random() < 0.35 else usual


def chunk(rng: random.Random, i: int, h: bool) -> dict:
    c = {}
    cid = pick(rng, f"doc-{i}", [f" doc-{i}", "", 5, None, _MISSING, "é-ü"], h)
    if cid is not _MISSING:
        c["id"] = cid
    score = pick(rng, rng.choice([0.5, 0.25, 1, 0, -3, 0.1 + 0.2, None]),
                 [_MISSING, True, "0.5", 1e308, 12345678901234567890123, float("inf")], h)
    if score is not _MISSING:
        c["score"] = score
    text = pick(rng, rng.choice([_MISSING, _MISSING, "a text", None]),
                ["", 5, "call 0044 20 7946 0958", "half \ud83d"], h)
    if text is not _MISSING:
        c["text"] = text
    title = pick(rng, rng.choice([_MISSING, _MISSING, _MISSING, "A title"]), [None, 7], h)
    if title is not _MISSING:
        c["title"] = title
    if h and rng.random() < 0.05:
        c["metadata"] = {"source": "x"}
    if h and rng.random() < 0.03:
        return "just text"  # type: ignore[return-value]
    return c


def record(rng: random.Random, n: int) -> dict:
    h = rng.random() < 0.4  # a hostile record: odd values, other aliases, unmapped fields
    rec = {}
    qkey = pick(rng, "request_id", ["query_id", "qid", "id", "trace_id", None], h)
    if qkey:
        rec[qkey] = pick(rng, f"r{n}", [f" r{n} ", "", 42, 2 ** 70, -(2 ** 70), 2 ** 64 - 1, True, None, 1.5], h)
    question = pick(rng, f"how do I export invoice {n}", ["  padded  ", "", "   ", 123, None, "emoji 😀",
                                                           "nul \u0000 inside", "Ünïcödé", "a\ud83d"], h)
    rec[pick(rng, "question", ["query", "user_input", "input"], h)] = question
    n_chunks = pick(rng, rng.choice([3, 5]), [0, 1, 12], h)
    ids = rng.sample(range(8), 3) + list(range(8, 20))
    if h and rng.random() < 0.1:
        ids[1] = ids[0]  # a duplicate chunk
    rec[pick(rng, "retrieved", ["contexts", "chunks"], h)] = [chunk(rng, ids[k], h) for k in range(n_chunks)]
    if rng.random() < 0.5:
        rec[pick(rng, "answer", ["response"], h)] = pick(rng, rng.choice(["an answer", None]), ["", 5], h)
    if rng.random() < 0.8:
        rec[pick(rng, "timestamp", ["ts", "created_at"], h)] = pick(
            rng, "2026-11-01T00:00:00Z", ["2026-11-01T00:00:00.123+02:00", 1764547200, 1764547200123, 1764547200.5,
                                          "", "not a time", True, 2 ** 70, None, "1764547200"], h)
    if rng.random() < 0.2:
        rec["retriever"] = pick(rng, "bm25", ["", None, 5], h)
    if h and rng.random() < 0.1:
        rec["user"] = "u1"  # an unmapped field: meta
    if h and rng.random() < 0.1:
        rec = dict(reversed(list(rec.items())))
    return rec


def encode(rng: random.Random, rec: dict) -> bytes:
    text = json.dumps(rec, ensure_ascii=rng.random() < 0.5)
    line = text.encode("utf-8", "surrogatepass")
    roll = rng.random()
    if roll < 0.02:
        line = line.replace(b"export", b"exp\xffort")  # not UTF-8
    elif roll < 0.04:
        line += b" trailing"
    elif roll < 0.06:
        line = line.replace(b'"question"', b'"question": "dup", "question"')
    return line + b"\n"


def test_the_fast_path_gives_the_general_paths_records_or_declines():
    rng = random.Random(7)
    fast = FastLines()
    decoded = declined_valid = 0
    for n in range(6000):
        line = encode(rng, record(rng, n))
        expected, raw = general(line)
        got = fast.decode(line)
        if got is not None:
            assert got.rec == expected, line
            decoded += 1
        elif isinstance(expected, dict):
            declined_valid += 1
            fast.learn(raw)  # as parsed_batches does with a plain record the general path accepted
    # it is used: most valid lines of a learned shape are decoded here
    assert decoded > 3000, (decoded, declined_valid)


def test_a_learned_shape_decodes_the_lines_of_that_shape():
    fast = FastLines()
    first = {"request_id": "r1", "question": "q", "timestamp": "2026-11-01T00:00:00Z", "answer": "a",
             "retrieved": [{"id": "d1", "score": 0.5}, {"id": "d2", "score": 0.25, "text": "t"}]}
    assert fast.decode(json.dumps(first).encode()) is None  # nothing learned yet
    fast.learn(first)
    got = fast.decode(json.dumps({**first, "request_id": "r2"}).encode())
    assert got is not None and got.rec["query_id"] == "r2" and got.rec["texts"] == [None, "t"]
    # fewer optional keys, another order: the same shape
    fewer = {"retrieved": first["retrieved"], "question": "q2"}
    assert fast.decode(json.dumps(fewer).encode()).rec["query_id"] is None
    # a key it was not built for: the general path reads it
    assert fast.decode(json.dumps({**first, "user": "u1"}).encode()) is None
    # two aliases of one field, or a key that is not a field: never learned
    other = FastLines()
    other.learn({**first, "query": "also a question"})
    other.learn({**first, "user": "u1"})
    assert other.decoders == []


def test_an_ingest_reads_the_same_batches_with_and_without_the_fast_path(tmp_path):
    """parsed_batches over a file of generated lines: the same items as with every line read by
    the general path (keep_raw turns the fast path off; the raw forms are dropped to compare)."""
    rng = random.Random(11)
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"".join(encode(rng, record(rng, n)) for n in range(3000)))

    def items(keep_raw: bool) -> list:
        out = []
        for batch in parsed_batches(path, "jsonl", False, None, 1 << 20, keep_raw):
            for line, row, problem, _raw in batch.items:
                out.append((line, row, problem))
        return out

    assert items(False) == items(True)

"""Benchmark: one annotator's 50k-event grade outbox against another annotator's grades.

On a file database, alice's session applies one outbox of ``--events`` events (grades cycling over
an item of ``--chunks`` chunks, every one a change, then a submit) with ``apply_grade_events``,
while bob, in another thread with his own connection, grades his own item with ``set_grade`` as
fast as he can. Measured in the same run:

- alice's write-lock holds: from her BEGIN IMMEDIATE that took the lock to the statement after its
  COMMIT (so the commit is inside; read from her connection's statement trace), longest and p50,
  and the number of write transactions;
- bob's ``set_grade`` time while the outbox is applied (p50, max, errors), and the same alone
  before it starts (the baseline): the ratios are during / alone.

Prints one JSON document.

    PYTHONPATH=. python tests/bench/bench_outbox.py [--events 50000] [--chunks 1000]
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import labeler  # noqa: E402
import labeler.labels as labels  # noqa: E402
from labeler.accounts.settings import set_setting  # noqa: E402
from labeler.errors import LabelerError  # noqa: E402


def build(path: Path, chunks: int) -> tuple[int, list[int], int, list[int]]:
    """Alice's item of ``chunks`` chunks and bob's of 8, each handed out to its annotator."""
    log = path.with_suffix(".jsonl")
    with open(log, "w") as f:
        f.write(json.dumps({"query_id": "big", "question": "the item alice grades offline",
                            "timestamp": "2026-01-01T00:00:00Z",
                            "retrieved": [{"id": f"a{i}", "text": f"chunk {i}"} for i in range(chunks)]}) + "\n")
        f.write(json.dumps({"query_id": "small", "question": "the item bob grades",
                            "timestamp": "2026-01-02T00:00:00Z",
                            "retrieved": [{"id": f"b{i}", "text": f"chunk {i}"} for i in range(8)]}) + "\n")
    db = labeler.connect(path)
    set_setting(db, "overlap_fraction", 0)
    set_setting(db, "queue_order", "oldest")
    labeler.ingest_logs(db, log)
    first, second = labels.next_item(db, "alice"), labels.next_item(db, "bob")
    items = {pk: [r[0] for r in db.execute("SELECT doc_pk FROM retrievals WHERE query_pk = ? ORDER BY rank", [pk])]
             for pk in (first, second)}
    if len(items[first]) != chunks:
        raise SystemExit("alice was not handed the big item")
    return first, items[first], second, items[second]


def outbox(docs: list[int], n: int) -> list[dict]:
    """``n - 1`` grades, each changing its chunk's grade (4 grades, cycling), then a submit."""
    events = [{"seq": i + 1, "doc_pk": docs[i % len(docs)], "grade": (i // len(docs) + i) % 4}
              for i in range(n - 1)]
    return [*events, {"seq": n, "submit": True}]


def bob_grades(path: Path, pk: int, docs: list[int], stop: threading.Event, out: list[float],
               errors: list[str], limit: int | None = None) -> None:
    db = labeler.connect(path)
    i = 0
    while not stop.is_set() and (limit is None or i < limit):
        t = time.perf_counter()
        try:
            labels.set_grade(db, pk, docs[i % len(docs)], "bob", (i // len(docs)) % 4)
        except LabelerError as e:
            errors.append(str(e))
        out.append(time.perf_counter() - t)
        i += 1


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--chunks", type=int, default=1000)
    ap.add_argument("--per-transaction", type=int, default=None,
                    help="passed on to apply_grade_events (default: its own)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        big, big_docs, small, small_docs = build(path, args.chunks)
        alone: list[float] = []
        alone_errors: list[str] = []
        bob_grades(path, small, small_docs, threading.Event(), alone, alone_errors, limit=300)

        db = labeler.connect(path)
        trace: list[tuple[float, str]] = []
        db.conn.set_trace_callback(lambda sql: trace.append((time.perf_counter(), sql.split(None, 2)[0].upper())))
        stop = threading.Event()
        during: list[float] = []
        errors: list[str] = []
        bob = threading.Thread(target=bob_grades, args=(path, small, small_docs, stop, during, errors))
        bob.start()
        kwargs = {}
        if args.per_transaction is not None and "per_transaction" in inspect.signature(
                labels.apply_grade_events).parameters:
            kwargs["per_transaction"] = args.per_transaction
        t0 = time.perf_counter()
        result = labels.apply_grade_events(db, big, "alice", "tab-1", outbox(big_docs, args.events), **kwargs)
        total = time.perf_counter() - t0
        trace.append((time.perf_counter(), "END"))
        stop.set()
        bob.join()
        db.conn.set_trace_callback(None)

    holds = []
    begun = None
    for i, (t, word) in enumerate(trace):
        if word == "BEGIN":
            begun = t  # a retried BEGIN replaces the one before: the last is the one that took the lock
        elif word == "COMMIT" and begun is not None:
            holds.append(trace[i + 1][0] - begun)
            begun = None
    alone_p50 = statistics.median(alone)
    print(json.dumps({
        "events": args.events, "chunks": args.chunks, "acked": result.acked, "submitted": result.submitted,
        "apply_s": round(total, 3),
        "alice_transactions": len(holds),
        "alice_lock_hold_max_s": round(max(holds), 4),
        "alice_lock_hold_p50_s": round(statistics.median(holds), 4),
        "alice_lock_hold_p99_s": round(pct(holds, 0.99), 4),
        "alice_longest_holds": [(i, round(h, 4)) for i, h in sorted(enumerate(holds), key=lambda x: -x[1])[:5]],
        "bob_set_grade_alone_p50_s": round(alone_p50, 5),
        "bob_set_grade_during_n": len(during),
        "bob_set_grade_during_p50_s": round(statistics.median(during), 5) if during else None,
        "bob_set_grade_during_p99_s": round(pct(during, 0.99), 4) if during else None,
        "bob_set_grade_during_max_s": round(max(during), 4) if during else None,
        "bob_errors": len(errors), "bob_first_error": errors[0] if errors else None,
        "ratio_bob_p50_during_to_alone": round(statistics.median(during) / alone_p50, 2) if during else None,
        "ratio_bob_max_during_to_alone_p50": round(max(during) / alone_p50, 1) if during else None,
    }, indent=2))


if __name__ == "__main__":
    main()

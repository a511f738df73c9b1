"""The migrations are history: declared in order, and an old database upgrades by frozen code."""

from __future__ import annotations

import re

import sqlite_utils

from labeler import db as store
from labeler.schema import migrations


def test_migrations_are_declared_in_the_order_of_their_numbers():
    names = [m.name for m in migrations._migrations]
    numbers = [int(re.match(r"m(\d{3})_", name).group(1)) for name in names]
    assert numbers == sorted(numbers)
    assert len(set(numbers)) == len(numbers)


def test_a_fresh_database_records_every_migration_in_declared_order(tmp_path):
    db = store.connect(tmp_path / "fresh.db")
    applied = [m.name for m in migrations.applied(db)]
    assert applied == [m.name for m in migrations._migrations]


def test_m010_rewrites_logged_times_as_utc_iso_and_leaves_the_rest(tmp_path):
    db = sqlite_utils.Database(tmp_path / "old.db")
    migrations.apply(db, stop_before="m010_utc_timestamps")
    db.execute("PRAGMA foreign_keys = OFF")
    values = [
        (1, 1764575918000, "2025-12-01T07:58:38.000000Z"),  # epoch ms
        (2, "2026-12-01 08:58:38+01:00", "2026-12-01T07:58:38.000000Z"),  # offset, space for T
        (3, "2026-12-01T07:58:38Z", "2026-12-01T07:58:38.000000Z"),  # Z without a fraction
        (4, "1764575918", "2025-12-01T07:58:38.000000Z"),  # epoch seconds as text
        (5, "yesterday", "yesterday"),  # not a time: left as it was
        (6, "", None),
    ]
    for pk, logged, _ in values:
        db.execute("INSERT INTO queries (pk, query_id, question, norm_question, first_seen, last_seen, created_at) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)",
                   [pk, f"q{pk}", f"question {pk}", f"question {pk}", logged, logged, "2026-12-01T00:00:00.000000Z"])
    db.conn.commit()
    migrations.apply(db, stop_before="m012_search_fts")
    got = {pk: (first, last) for pk, first, last in db.execute("SELECT pk, first_seen, last_seen FROM queries")}
    assert got == {pk: (want, want) for pk, _, want in values}


def test_m028_gives_every_stored_question_its_key_and_a_question_written_without_one_is_still_found(tmp_path):
    """An old database's questions get their 64-bit key (the live question_key's, in parts), the
    index on the text goes, and lookups by text find rows with a key and rows written by hand
    without one (NULL) alike; the index serves both."""
    from labeler.ingest.validate import NORM_MATCH, norm_params, normalize_question, question_key
    from labeler.schema import _m028_key

    db = sqlite_utils.Database(tmp_path / "old.db")
    migrations.apply(db, stop_before="m028_question_keys")
    db.execute("PRAGMA foreign_keys = OFF")
    questions = ["How do I export?", "  how do I   EXPORT? ", "Reset my password", "Ünïcode  Question"]
    for pk, q in enumerate(questions, 1):
        db.execute("INSERT INTO queries (pk, query_id, question, norm_question, created_at) VALUES (?, ?, ?, ?, ?)",
                   [pk, f"q{pk}", q, normalize_question(q), "2026-12-01T00:00:00.000000Z"])
    db.conn.commit()
    migrations.apply(db)
    keys = dict(db.execute("SELECT pk, norm_key FROM queries").fetchall())
    assert keys == {pk: question_key(normalize_question(q)) for pk, q in enumerate(questions, 1)}
    assert keys[1] == keys[2] != keys[3]
    assert all(_m028_key(normalize_question(q)) == question_key(normalize_question(q)) for q in questions)
    indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'queries'")}
    assert "queries_norm_key" in indexes and "queries_norm" not in indexes
    db.execute("INSERT INTO queries (pk, query_id, question, norm_question, created_at) VALUES (9, 'hand', "
               "'Reset my password', 'reset my password', '2026-12-01T00:00:00.000000Z')")  # no key
    found = db.execute(f"SELECT pk FROM queries WHERE {NORM_MATCH} ORDER BY pk",
                       norm_params(["how do i export?", "reset my password"])).fetchall()
    assert [r[0] for r in found] == [1, 2, 3, 9]
    plan = " ".join(r[3] for r in db.execute(f"EXPLAIN QUERY PLAN SELECT pk FROM queries WHERE {NORM_MATCH}",
                                             norm_params(["x"])))
    assert "USING INDEX queries_norm_key" in plan and "SCAN queries" not in plan

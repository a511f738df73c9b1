"""The migrations are history: declared in order, and an old database upgrades by frozen code."""

from __future__ import annotations

import re

import sqlite_utils

import labeler
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


def test_m028_gives_every_stored_question_its_key_and_m029_finds_them_through_query_keys(tmp_path):
    """An old database's questions get their 64-bit key (the live question_key's, in parts), the
    index on the text goes; m029 moves the keys to ``query_keys``, and lookups by text find rows
    with a key and rows written by hand without one (NULL) alike, through indexes only."""
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
    migrations.apply(db, stop_before="m029_query_keys")
    keys = dict(db.execute("SELECT pk, norm_key FROM queries").fetchall())
    assert keys == {pk: question_key(normalize_question(q)) for pk, q in enumerate(questions, 1)}
    assert keys[1] == keys[2] != keys[3]
    assert all(_m028_key(normalize_question(q)) == question_key(normalize_question(q)) for q in questions)
    indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'queries'")}
    assert "queries_norm_key" in indexes and "queries_norm" not in indexes
    migrations.apply(db)
    assert sorted(db.execute("SELECT query_pk, norm_key FROM query_keys").fetchall()) == sorted(keys.items())
    indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'queries'")}
    assert "queries_norm_key" not in indexes and "queries_unkeyed" in indexes
    db.execute("INSERT INTO queries (pk, query_id, question, norm_question, created_at) VALUES (9, 'hand', "
               "'Reset my password', 'reset my password', '2026-12-01T00:00:00.000000Z')")  # no key
    found = db.execute(f"SELECT pk FROM queries WHERE {NORM_MATCH} ORDER BY pk",
                       norm_params(["how do i export?", "reset my password"])).fetchall()
    assert [r[0] for r in found] == [1, 2, 3, 9]
    plan = " ".join(r[3] for r in db.execute(f"EXPLAIN QUERY PLAN SELECT pk FROM queries WHERE {NORM_MATCH}",
                                             norm_params(["x"])))
    # the rows without a key are read from their partial index (empty but for them), never the table
    assert "SEARCH query_keys USING PRIMARY KEY" in plan and "SCAN queries USING INDEX queries_unkeyed" in plan
    assert not re.search(r"SCAN queries(?! USING INDEX queries_unkeyed)", plan), plan


def test_every_writer_of_a_question_keeps_its_key_in_query_keys_but_a_staged_one(tmp_path):
    """By trigger: a row written with a key gets it in query_keys, a changed key moves, a deleted
    row takes its key along; a log ingest's staged row (ingest_id set) waits for its ingest's
    sorted run, or gets its key when it is kept (its ingest_id cleared)."""
    from labeler.ingest.validate import question_columns

    db = labeler.connect(tmp_path / "k.db")

    def add(pk, q, ingest_id=None):
        norm, key = question_columns(q)
        db.execute("INSERT INTO queries (pk, query_id, question, norm_question, norm_key, created_at, ingest_id) "
                   "VALUES (?, ?, ?, ?, ?, '2026-12-01T00:00:00.000000Z', ?)", [pk, f"q{pk}", q, norm, key, ingest_id])
        return key

    def keyed():
        return set(db.execute("SELECT query_pk, norm_key FROM query_keys").fetchall())

    a = add(1, "alpha question")
    b = add(2, "beta question", ingest_id=7)
    assert keyed() == {(1, a)}
    _, c = question_columns("gamma question")
    db.execute("UPDATE queries SET norm_key = ? WHERE pk = 1", [c])
    assert keyed() == {(1, c)}
    db.execute("UPDATE queries SET ingest_id = NULL WHERE pk = 2")
    assert keyed() == {(1, c), (2, b)}
    db.execute("DELETE FROM queries WHERE pk = 1")
    assert keyed() == {(2, b)}

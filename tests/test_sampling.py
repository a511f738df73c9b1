"""ingest --sample: a rate hashed on the query id is the same across files and re-ingests; a
reservoir keeps exactly N; records seen are recorded and added up by ``population``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import labeler
from labeler.cli import cli
from labeler.errors import LabelerError
from labeler.ingest.sampling import kept_by_rate


def recs(ids, prefix="q"):
    return [{"query_id": f"{prefix}{i}", "question": f"question {i}?", "retrieved": [{"id": f"d{i}"}]} for i in ids]


def stored(db) -> set[str]:
    return {r[0] for r in db.execute("SELECT query_id FROM queries")}


def test_rate_sample_is_consistent_across_files_and_reingests(db, write_log):
    first = write_log(recs(range(0, 1000)))
    second = write_log(recs(range(500, 1500)))  # overlaps the first
    r1 = labeler.ingest_logs(db, first, sample=0.1, seed=7)
    r2 = labeler.ingest_logs(db, second, sample=0.1, seed=7)
    expected = {f"q{i}" for i in range(1500) if kept_by_rate(f"q{i}", 0.1, 7)}
    assert stored(db) == expected
    assert 100 <= len(expected) <= 200  # about 10%
    assert r1.records == 1000 and r1.new + r1.sampled_out == 1000
    assert r2.new + r2.unchanged + r2.sampled_out == 1000
    again = labeler.ingest_logs(db, first, sample=0.1, seed=7)
    assert again.new == 0 and again.unchanged == r1.new and stored(db) == expected
    # another seed picks others; the chunks of queries left out are not stored
    other = labeler.connect(":memory:")
    labeler.ingest_logs(other, first, sample=0.1, seed=8)
    assert stored(other) != stored(db) & {f"q{i}" for i in range(1000)}
    docs = {r[0] for r in db.execute("SELECT doc_id FROM documents")}
    assert docs == {"d" + q[1:] for q in expected}


def test_reservoir_keeps_exactly_n_seeded(db, write_log, tmp_path):
    path = write_log(recs(range(5000)))
    r = labeler.ingest_logs(db, path, sample=300, seed=1)
    assert r.new == 300 and r.sampled_out == 4700 and r.records == 5000
    assert len(stored(db)) == 300
    again = labeler.connect(":memory:")
    labeler.ingest_logs(again, path, sample=300, seed=1)
    assert stored(again) == stored(db)
    third = labeler.connect(":memory:")
    labeler.ingest_logs(third, path, sample=300, seed=2)
    assert stored(third) != stored(db)
    # roughly uniform: the kept ids are spread over the whole file
    kept = sorted(int(q[1:]) for q in stored(db))
    assert kept[0] < 500 and kept[-1] > 4500
    small = labeler.connect(":memory:")
    assert labeler.ingest_logs(small, write_log(recs(range(10))), sample=300).new == 10


def test_records_seen_on_the_ingest_and_population(db, write_log):
    labeler.ingest_logs(db, write_log(recs(range(2000))), sample=0.25, seed=3)
    labeler.ingest_logs(db, write_log(recs(range(100), prefix="full")))
    rows = db.execute("SELECT records_seen, sample FROM ingests ORDER BY id").fetchall()
    assert rows[0][0] == 2000 and json.loads(rows[0][1]) == {"rate": 0.25, "seed": 3}
    assert rows[1] == (100, None)
    pop = labeler.population(db)
    kept = db.execute("SELECT count(*) FROM queries").fetchone()[0]
    assert pop["records_seen"] == 2100 and pop["records_kept"] == kept
    assert pop["ingests"] == 2 and pop["sampled_ingests"] == 1
    assert pop["kept_fraction"] == pytest.approx(kept / 2100)


def test_bad_sample_values(db, write_log):
    path = write_log(recs(range(3)))
    for value, match in ((0, "give a rate between 0 and 1"), (-1, "give a rate"), (2.5, "whole number")):
        with pytest.raises(LabelerError, match=match):
            labeler.ingest_logs(db, path, sample=value)


def test_cli_sample_summary(tmp_path, write_log):
    path = write_log(recs(range(400)))
    db_path = str(tmp_path / "t.db")
    r = CliRunner().invoke(cli, ["--db", db_path, "ingest", "logs", str(path), "--sample", "50", "--seed", "4"])
    assert r.exit_code == 0, r.output
    assert "sampled (reservoir of 50, seed 4): kept 50 of 400 records seen" in r.output
    r = CliRunner().invoke(cli, ["--db", str(tmp_path / "u.db"), "ingest", "logs", str(path), "--sample", "0.5",
                                 "--json"])
    out = json.loads(r.output)
    assert out["sample"] == {"rate": 0.5, "seed": 0} and out["new"] + out["sampled_out"] == 400
    r = CliRunner().invoke(cli, ["--db", db_path, "ingest", "logs", str(path), "--sample", "0"])
    assert r.exit_code == 1 and "give a rate between 0 and 1" in r.output


def test_population_leaves_out_undone_ingests(db, write_log):
    from labeler.ingest.undo import undo_ingest

    labeler.ingest_logs(db, write_log(recs(range(50))))
    labeler.ingest_logs(db, write_log(recs(range(30), prefix="later")), sample=0.5, seed=1)
    assert labeler.population(db)["records_seen"] == 80
    undo_ingest(db, db.execute("SELECT max(id) FROM ingests").fetchone()[0])
    assert labeler.population(db) == {"records_seen": 50, "records_kept": 50, "ingests": 1, "sampled_ingests": 0,
                                      "kept_fraction": 1.0}

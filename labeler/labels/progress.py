"""Progress of the labeling effort: per annotator and for the team, items left and an ETA."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

import sqlite_utils

from ..core.times import When, parse_time, stamp
from .queue import sync_queue


@dataclass
class AnnotatorProgress:
    """One annotator's items by their status, grades written, time, and when they last finished an item."""

    annotator: str
    role: str | None
    submitted: int = 0
    skipped: int = 0
    flagged: int = 0
    discarded: int = 0
    in_progress: int = 0
    grades: int = 0
    seconds: float = 0.0
    median_seconds: float | None = None
    last_active: str | None = None
    active: bool = False


@dataclass
class Progress:
    """Team progress.

    Items and labels are counted apart: with overlap (several annotators per item) one item takes
    several labels. ``items`` = queued items; ``items_done`` = items whose target of annotators all
    finished them; ``submitted`` / ``skipped`` / ... = labels (one per annotator and item);
    ``items_left`` = labels still needed (for each unfinished item, its target minus those who
    finished it) plus ``requeued`` (submitted items an ingest added pool chunks to, back with their
    annotators); ``median_seconds`` = median time of submitted items with time recorded (items with 0
    seconds are left out), per annotator and for the team; ``active_annotators`` = annotators who
    finished an item (submit, skip, flag, discard) within ``active_days`` of ``now``;
    ``labeling_now`` = annotators whose Label page (a browser session of the app) saved a grade or a
    submit within ``recent_minutes`` of ``now``: imports (``labeler import``, the demo) and scripts
    do not count; ``eta_seconds`` = items_left * median_seconds / labeling_now (0 when nothing is
    left, None when there is no timing yet or nobody is labeling now).
    """

    annotators: list[AnnotatorProgress] = field(default_factory=list)
    submitted: int = 0
    skipped: int = 0
    flagged: int = 0
    discarded: int = 0
    items: int = 0
    items_done: int = 0
    items_left: int = 0
    requeued: int = 0
    median_seconds: float | None = None
    active_annotators: int = 0
    labeling_now: int = 0
    recent_minutes: float = 30
    eta_seconds: float | None = None

    @property
    def items_open(self) -> int:
        """Items some planned annotator has not finished yet."""
        return self.items - self.items_done

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _median_seconds(db: sqlite_utils.Database, where: str, params: list[Any]) -> float | None:
    """Median of submitted items' seconds (> 0), read from the (annotator, status, seconds) or
    (status, seconds) index in two probes instead of loading every row."""
    where += " AND seconds > 0"
    n = db.execute(f"SELECT count(*) FROM query_labels WHERE {where}", params).fetchone()[0]
    if not n:
        return None
    probe = f"SELECT seconds FROM query_labels WHERE {where} ORDER BY seconds LIMIT 1 OFFSET ?"
    middle = [db.execute(probe, [*params, k]).fetchone()[0] for k in ((n - 1) // 2, n // 2)]
    return (middle[0] + middle[1]) / 2


def labeling_now(db: sqlite_utils.Database, *, now: When = None, minutes: float = 30) -> list[str]:
    """Annotators whose Label page saved a grade or a submit within ``minutes`` of ``now``: the
    grading widget's streams (``grade_streams``, written only by browser sessions of the app), so
    imported labels and scripts never count as someone labeling."""
    cutoff = stamp(parse_time(now) - timedelta(minutes=minutes))
    return [r[0] for r in db.execute(
        "SELECT DISTINCT annotator FROM grade_streams WHERE updated_at >= ? ORDER BY annotator", [cutoff])]


def progress(db: sqlite_utils.Database, *, now: When = None, active_days: float = 7,
             with_grades: bool = True, recent_minutes: float = 30) -> Progress:
    """Per-annotator and team progress with items left and ETA; see ``Progress``.

    Reads indexes only (a few ms at 100k labeled items), so a page may call it on every rerun.
    """
    sync_queue(db)
    cutoff = stamp(parse_time(now) - timedelta(days=active_days))
    people: dict[str, AnnotatorProgress] = {
        name: AnnotatorProgress(name, role)
        for name, role in db.execute("SELECT name, role FROM annotators ORDER BY created_at, name")}
    for name, status, n, seconds in db.execute(
            "SELECT annotator, status, count(*), total(seconds) FROM query_labels GROUP BY annotator, status"):
        p = people.setdefault(name, AnnotatorProgress(name, None))
        setattr(p, status, n)
        p.seconds += seconds
    if with_grades:  # a scan of every grade: the CLI wants it, the Label page's sidebar does not
        for name, n in db.execute("SELECT annotator, count(*) FROM relevance_labels GROUP BY annotator"):
            people.setdefault(name, AnnotatorProgress(name, None)).grades = n
    for p in people.values():
        p.median_seconds = _median_seconds(db, "annotator = ? AND status = 'submitted'", [p.annotator])
        p.last_active = db.execute("SELECT max(status_at) FROM query_labels WHERE annotator = ?",
                                   [p.annotator]).fetchone()[0]
        p.active = p.last_active is not None and p.last_active >= cutoff
    items = db.execute("SELECT value FROM queue_meta WHERE key = 'items'").fetchone()
    items = int(items[0]) if items else 0
    unfinished, left = db.execute(
        "SELECT count(*), coalesce(sum(needed - done), 0) FROM queue WHERE done < needed").fetchone()
    requeued = db.execute("SELECT count(*) FROM requeued").fetchone()[0]
    left += requeued
    result = Progress(
        annotators=list(people.values()),
        submitted=sum(p.submitted for p in people.values()),
        skipped=sum(p.skipped for p in people.values()),
        flagged=sum(p.flagged for p in people.values()),
        discarded=sum(p.discarded for p in people.values()),
        items=items, items_done=items - unfinished, items_left=left, requeued=requeued,
        median_seconds=_median_seconds(db, "status = 'submitted'", []),
        active_annotators=sum(p.active for p in people.values()),
        labeling_now=len(labeling_now(db, now=now, minutes=recent_minutes)), recent_minutes=recent_minutes,
    )
    if left == 0:
        result.eta_seconds = 0.0
    elif result.median_seconds is not None and result.labeling_now:
        result.eta_seconds = left * result.median_seconds / result.labeling_now
    return result


def annotator_stats(db: sqlite_utils.Database, *, now: When = None) -> list[dict[str, Any]]:
    """Per-annotator counts and time for ``labeler annotators``: one dict per annotator with keys
    annotator, role, submitted, skipped, flagged, discarded, in_progress, grades, seconds,
    median_seconds, last_active, active."""
    return [asdict(p) for p in progress(db, now=now).annotators]


def annotator_counts(db: sqlite_utils.Database, annotator: str) -> dict[str, int]:
    """One annotator's items by status (reads only their rows of the (annotator, status) index)."""
    counts = {s: 0 for s in ("in_progress", "submitted", "skipped", "flagged", "discarded")}
    for status, n in db.execute("SELECT status, count(*) FROM query_labels WHERE annotator = ? GROUP BY status",
                                [annotator]):
        counts[status] = n
    return counts

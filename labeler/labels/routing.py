"""Routing: which queries that arrive from live sources enter the labeling queue, and with what
inclusion probability, so the all-traffic estimates stay unbiased.

The rules (setting ``routing``; ``labeler route set``, the Settings page) are decided once per
query, in arrival order (first seen, then query id), when a sync (or the OTLP collector) ingests
it: just before the ingest commits its new queries wait (``pending``), and once they are visible
(so the topic assigner can give them their topic) they are decided, before the ingest brings the
queue up to date; so no annotator is handed a query that is not decided yet. Each decision is a
``routing_decisions`` row and the queue leaves out the queries whose row says ``routed = 0``.
Queries that came any other way (a file ingest, synthetic, imported) have no row and are queued as
before. In order:

1. **Signals** (``always_signals``, on by default): a query with a negative signal (thumbs down,
   low rating, escalation, retry, error: ``labeler.signals.unhappy``) is routed, probability 1.
2. **New topics** (``new_topics``): a query that drift would call new, i.e. far from every topic
   of the current model (no known word, or its similarity to its topic below the model's
   ``far_threshold``), is routed, probability 1.
3. **Quotas** (``quotas``, {topic: n}): the first ``n`` queries of each listed topic on a day are
   routed, probability 1 (meant for topics the golden set under-covers: ``labeler topics coverage``).
4. **The rest**: routed when a seeded hash of the query id falls under the rate in effect,
   which is the ``rate``, or ``rate_after_cap`` once the day's routed queries of this step and
   the last reach ``daily_cap`` (signals and new topics are never capped). The probability
   recorded is that rate in effect.

Why the estimates stay unbiased: the hash of a query id is uniform and independent of every other
query's, so given the queries decided before it, a query of step 4 is routed with exactly the
probability recorded for it (a fixed rate, or the lowered one once the cap was reached); steps 1-3
decide by properties of the query and the order of arrival alone (probability 1). So each routed
query's indicator divided by its recorded probability has expectation 1, and the Horvitz-Thompson
sums (``labeler.estimate.routed``) are unbiased for the traffic the rules saw. A cap
that stopped routing altogether (a rate of 0) would leave the rest of the day out of every sample
and break this: ``rate_after_cap`` must be above 0. The day is the UTC day the query was first seen.

Decisions are made once and stored: a re-sync, a re-run or a changed rule never re-decides a query
(``preview`` shows what the current rules would decide for the last day, without writing).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlite_utils

from .. import db as store
from ..core.times import parse_time, stamp
from ..errors import LabelError
from ..signals import normalise, unhappy
from .routing_rules import Rules, get_rules

REASONS = ("signal", "new-topic", "quota", "sampled", "not-sampled", "pending")
_SCALE = float(1 << 64)

# topic assigners (``labeler.topics`` registers one when loaded): give the queries that arrived
# since the topic model was built their topic, so quotas and new topics can be decided
_assigners: list[Callable[[sqlite_utils.Database], Any]] = []


def register_topic_assigner(assign: Callable[[sqlite_utils.Database], Any]) -> None:
    """Register ``assign(db)``, called before deciding when the rules need topics."""
    if assign not in _assigners:
        _assigners.append(assign)


# --- deciding -------------------------------------------------------------------------------------------------

def unit_hash(seed: int, query_id: str) -> float:
    """The query's uniform number in [0, 1) under ``seed`` (the same every time)."""
    digest = hashlib.blake2b(f"{seed}\x1froute\x1f{query_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SCALE


@dataclass(frozen=True)
class Candidate:
    """A query to decide: its pk and id, the UTC day it was first seen, whether it carries a negative
    signal, its topic (None: unknown) and whether it is far from every topic."""

    pk: int
    query_id: str
    day: str
    unhappy: bool = False
    topic: int | None = None
    far: bool = False
    seen: str = ""  # first seen (sortable text): the arrival order


@dataclass(frozen=True)
class Decision:
    pk: int
    routed: bool
    inclusion_prob: float
    reason: str
    day: str
    topic: int | None


class DayCounts:
    """What the days seen so far routed under the cap (steps 3-4) and per quota topic."""

    def __init__(self, capped: Mapping[str, int] | None = None,
                 quota: Mapping[tuple[str, int], int] | None = None) -> None:
        self.capped = dict(capped or {})
        self.quota = dict(quota or {})


def decide(rules: Rules, candidates: Iterable[Candidate], counts: DayCounts | None = None) -> list[Decision]:
    """The decisions for ``candidates`` taken in the order given, after the days' ``counts``
    (updated); see the module doc. Pure."""
    counts = counts or DayCounts()
    out: list[Decision] = []
    for c in candidates:
        if rules.always_signals and c.unhappy:
            out.append(Decision(c.pk, True, 1.0, "signal", c.day, c.topic))
            continue
        if rules.new_topics and c.far:
            out.append(Decision(c.pk, True, 1.0, "new-topic", c.day, c.topic))
            continue
        capped = counts.capped.get(c.day, 0)
        if c.topic is not None and c.topic in rules.quotas and counts.quota.get((c.day, c.topic), 0) < rules.quotas[c.topic]:
            counts.quota[(c.day, c.topic)] = counts.quota.get((c.day, c.topic), 0) + 1
            counts.capped[c.day] = capped + 1
            out.append(Decision(c.pk, True, 1.0, "quota", c.day, c.topic))
            continue
        rate = rules.rate if rules.daily_cap is None or capped < rules.daily_cap else rules.after_cap
        routed = unit_hash(rules.seed, c.query_id) < rate
        if routed:
            counts.capped[c.day] = capped + 1
        out.append(Decision(c.pk, routed, rate, "sampled" if routed else "not-sampled", c.day, c.topic))
    return out


def _seen(seen: Any, fallback: str) -> str:
    """When the query was first seen, as a stored UTC time (``fallback`` when unknown or unreadable)."""
    try:
        return stamp(parse_time(seen)) if seen else fallback
    except LabelError:
        return fallback


def _day(seen: Any, fallback: str) -> str:
    return _seen(seen, fallback)[:10]


def _topics(conn: sqlite3.Connection, pks: list[int]) -> dict[int, tuple[int, bool]]:
    """{query pk: (topic, far)} under the current topic model (queries without a topic are absent)."""
    model = conn.execute("SELECT id, far_threshold FROM topic_models ORDER BY id DESC LIMIT 1").fetchone()
    if model is None or not pks:
        return {}
    out = {}
    for pk, topic, sim in conn.execute(
            "SELECT query_pk, topic, similarity FROM query_topics WHERE model_id = ? AND query_pk IN "
            "(SELECT value FROM json_each(?))", [model[0], store.dumps(pks)]):
        out[int(pk)] = (int(topic), int(topic) == -1 or (model[1] is not None and sim < model[1]))
    return out


def candidates(db: sqlite_utils.Database, rules: Rules, pks: list[int], *, at: str) -> list[Candidate]:
    """The queries ``pks`` as candidates, in arrival order (first seen, then query id)."""
    if rules.quotas or rules.new_topics:
        if not _assigners:  # never silently route as if no query had a topic
            raise LabelError("the routing rules have topic quotas or new topics, which need labeler.topics: "
                             "import labeler.topics before syncing (the CLI and the app do)")
        for assign in _assigners:
            assign(db)
    rows = db.execute("SELECT pk, query_id, coalesce(first_seen, created_at), meta FROM queries WHERE pk IN "
                      "(SELECT value FROM json_each(?))", [store.dumps(pks)]).fetchall()
    topics = _topics(db.conn, pks) if rules.quotas or rules.new_topics else {}
    out = []
    for pk, query_id, seen, meta in rows:
        topic, far = topics.get(pk, (None, False))
        out.append(Candidate(pk, query_id, _day(seen, at), unhappy(normalise(store.loads(meta) if meta else None)),
                             topic, far, _seen(seen, at)))
    return sorted(out, key=lambda c: (c.seen, c.query_id))


def _counts(conn: sqlite3.Connection, days: set[str]) -> DayCounts:
    packed = store.dumps(sorted(days))
    capped = dict(conn.execute(
        "SELECT day, count(*) FROM routing_decisions WHERE routed = 1 AND reason IN ('quota', 'sampled') AND day IN "
        "(SELECT value FROM json_each(?)) GROUP BY day", [packed]).fetchall())
    quota = {(d, int(t)): int(n) for d, t, n in conn.execute(
        "SELECT day, topic, count(*) FROM routing_decisions WHERE reason = 'quota' AND day IN "
        "(SELECT value FROM json_each(?)) GROUP BY day, topic", [packed])}
    return DayCounts(capped, quota)


def hold_ingest(db: sqlite_utils.Database, ingest_id: int) -> int:
    """Just before the live ingest ``ingest_id`` commits: its new logged queries wait, ``pending``
    (left out of the queue), until :func:`route_ingest` decides them once they are visible (the topic
    assigner reads visible queries only). So no annotator is handed a query before it is decided.
    Nothing when no rules are set; returns how many wait."""
    rules = get_rules(db)
    if rules is None:
        return 0
    with store.transaction(db):
        _bump(db.conn)
        return db.conn.execute(
            "INSERT OR IGNORE INTO routing_decisions (query_pk, routed, inclusion_prob, reason, day, topic, seed, "
            "decided_at, ingest_id) SELECT pk, 0, 0, 'pending', '', NULL, ?1, ?2, ?3 FROM queries "
            "WHERE ingest_id = ?3 AND origin = 'log'",
            [rules.seed, store.now(), ingest_id]).rowcount


def route_queries(db: sqlite_utils.Database, pks: Iterable[int], *, now: datetime | None = None,
                  ingest_id: int | None = None) -> dict[str, int]:
    """Decide the queries ``pks`` that have no decision yet (or a pending one) under the current
    rules and store the decisions; returns how many per reason. Without rules, pending queries are
    released (queued as every live query then is)."""
    rules = get_rules(db)
    wanted = sorted({int(p) for p in pks})
    if not wanted:
        return {}
    if rules is None:
        with store.transaction(db):
            _bump(db.conn)
            db.conn.execute("DELETE FROM routing_decisions WHERE reason = 'pending' AND query_pk IN "
                            "(SELECT value FROM json_each(?))", [store.dumps(wanted)])
        return {}
    at = stamp(now or datetime.now(UTC))
    done = {r[0] for r in db.execute("SELECT query_pk FROM routing_decisions WHERE reason != 'pending' AND "
                                     "query_pk IN (SELECT value FROM json_each(?))", [store.dumps(wanted)])}
    todo = candidates(db, rules, [p for p in wanted if p not in done], at=at)
    if not todo:
        return {}
    with store.transaction(db):  # the day counts are read under the lock: two syncs never both take a slot
        decisions = decide(rules, todo, _counts(db.conn, {c.day for c in todo}))
        _bump(db.conn)
        db.conn.executemany(
            "INSERT INTO routing_decisions (query_pk, routed, inclusion_prob, reason, day, topic, seed, decided_at, "
            "ingest_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (query_pk) DO UPDATE SET "
            "routed = excluded.routed, inclusion_prob = excluded.inclusion_prob, reason = excluded.reason, "
            "day = excluded.day, topic = excluded.topic, seed = excluded.seed, decided_at = excluded.decided_at "
            "WHERE routing_decisions.reason = 'pending'",
            [(d.pk, int(d.routed), d.inclusion_prob, d.reason, d.day, d.topic, rules.seed, at, ingest_id)
             for d in decisions])
    out: dict[str, int] = {}
    for d in decisions:
        out[d.reason] = out.get(d.reason, 0) + 1
    return out


def route_ingest(db: sqlite_utils.Database, ingest_id: int, *, now: datetime | None = None) -> dict[str, int]:
    """Decide the logged queries the live ingest ``ingest_id`` brought (after it committed)."""
    pks = [r[0] for r in db.execute("SELECT pk FROM queries WHERE ingest_id = ? AND origin = 'log'", [ingest_id])]
    return route_queries(db, pks, now=now, ingest_id=ingest_id)


def route_pending(db: sqlite_utils.Database, *, now: datetime | None = None) -> dict[str, int]:
    """Decide what a live ingest left pending (a process that stopped between its commit and the
    decisions); drop the pending rows of an ingest that never committed. Each sync calls it first."""
    rows = db.execute("SELECT d.query_pk, i.state FROM routing_decisions d LEFT JOIN ingests i ON i.id = d.ingest_id "
                      "WHERE d.reason = 'pending'").fetchall()
    stale = [pk for pk, state in rows if state is None]
    if stale:
        with store.transaction(db):
            _bump(db.conn)
            db.conn.execute("DELETE FROM routing_decisions WHERE reason = 'pending' AND query_pk IN "
                            "(SELECT value FROM json_each(?))", [store.dumps(stale)])
    return route_queries(db, [pk for pk, state in rows if state == "done"], now=now)


def ingest_counts(db: sqlite_utils.Database, ingest_id: int) -> dict[str, int]:
    """{reason: queries} of the decisions about the queries the ingest ``ingest_id`` brought."""
    return dict(db.execute("SELECT reason, count(*) FROM routing_decisions WHERE ingest_id = ? GROUP BY reason",
                           [ingest_id]).fetchall())


def _bump(conn: sqlite3.Connection) -> None:
    """Count a change of the decisions (inside the writer's transaction), for the queue's fingerprint."""
    conn.execute("INSERT INTO queue_meta (key, value) VALUES ('routing', '1') "
                 "ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1")


def fingerprint(conn: sqlite3.Connection) -> list[Any]:
    """What re-plans the queue: the decisions changed (one row read: ``next_item`` asks every time;
    [] while routing never decided anything, so nothing changes then)."""
    row = conn.execute("SELECT value FROM queue_meta WHERE key = 'routing'").fetchone()
    return [] if row is None else [["routing", int(row[0])]]


LEFT_OUT_SQL = "NOT EXISTS (SELECT 1 FROM routing_decisions rd WHERE rd.query_pk = q.pk AND rd.routed = 0)"


# --- reading back ---------------------------------------------------------------------------------------------

def preview(db: sqlite_utils.Database, *, since: str | None = None, now: datetime | None = None,
            rules: Rules | None = None) -> dict[str, Any]:
    """What ``rules`` (default: the current ones) would route among the logged queries first seen
    since ``since`` (an ISO time; default one day before ``now``), decided afresh from empty day
    counts, without writing a decision (queries that arrived since the topics were built get their topic
when quotas or new topics need it): {"rules", "since", "queries", "routed", "by_reason", "expected_routed",
    "queries_detail": [...]}."""
    now = now or datetime.now(UTC)
    rules = rules or get_rules(db) or Rules()
    since = since or stamp(now - timedelta(days=1))
    pks = [r[0] for r in db.execute(
        f"SELECT q.pk FROM queries q WHERE q.origin = 'log' AND coalesce(q.first_seen, q.created_at) >= ? "
        f"AND {store.visible('q')}", [since])]
    decided = decide(rules, candidates(db, rules, pks, at=stamp(now)))
    ids = dict(db.execute("SELECT pk, query_id FROM queries WHERE pk IN (SELECT value FROM json_each(?))",
                          [store.dumps(pks)]).fetchall())
    by_reason = {r: 0 for r in REASONS}
    for d in decided:
        by_reason[d.reason] += 1
    return {"rules": rules.to_dict(), "since": since, "queries": len(decided),
            "routed": sum(d.routed for d in decided), "by_reason": by_reason,
            "expected_routed": round(sum(d.inclusion_prob for d in decided), 3),
            "queries_detail": [{"query_id": ids.get(d.pk), "routed": d.routed, "reason": d.reason,
                                "inclusion_prob": d.inclusion_prob, "day": d.day, "topic": d.topic}
                               for d in decided]}


def inclusion_probs(db: sqlite_utils.Database, pks: Iterable[int]) -> dict[int, float]:
    """{query pk: routing inclusion probability} of the queries among ``pks`` that routing decided
    and routed (the others were not routed, or came some other way: probability 1 as far as routing goes)."""
    return {int(pk): float(p) for pk, p in db.execute(
        "SELECT query_pk, inclusion_prob FROM routing_decisions WHERE routed = 1 AND query_pk IN "
        "(SELECT value FROM json_each(?))", [store.dumps([int(p) for p in pks])])}


def routing_summary(db: sqlite_utils.Database) -> dict[str, Any]:
    """The rules and what they decided: {"rules" (None when unset), "describe", "decided", "routed",
    "by_reason", "labeled_by_reason"} (labeled: a submitted label)."""
    rules = get_rules(db)
    by_reason = {r: 0 for r in REASONS}
    labeled = {r: 0 for r in REASONS}
    for reason, n, k in db.execute(
            "SELECT reason, count(*), sum(EXISTS (SELECT 1 FROM query_labels l WHERE l.query_pk = d.query_pk "
            "AND l.status = 'submitted')) FROM routing_decisions d GROUP BY reason"):
        by_reason[reason], labeled[reason] = int(n), int(k or 0)
    decided = sum(by_reason.values())
    routed = decided - by_reason["not-sampled"]
    if rules is None:
        text = "no routing rules: every live query is queued" + (
            f" ({decided} decided while rules were set)" if decided else "")
    else:
        text = rules.describe()
    return {"rules": None if rules is None else rules.to_dict(), "describe": text, "decided": decided,
            "routed": routed, "by_reason": by_reason, "labeled_by_reason": labeled}


def how_drawn(db: sqlite_utils.Database) -> str:
    """One line for the Metrics page: how the labeled set was drawn (the queue order, and the routing
    rules with what the labeled live queries were routed for)."""
    settings = store.get_settings(db)
    line = f"Labeled set drawn by the queue, order {settings.get('queue_order')} (seed {settings.get('queue_seed')})"
    summary = routing_summary(db)
    if summary["rules"] is None and not summary["decided"]:
        return line + "; no routing rules (every live query is queued)."
    labeled = ", ".join(f"{n} {r}" for r, n in summary["labeled_by_reason"].items() if n and r != "not-sampled")
    return (f"{line}; {summary['describe']}. Labeled live queries by routing: {labeled or 'none yet'} "
            "(the weighted figures count each 1 / its inclusion probability).")

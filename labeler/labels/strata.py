"""The ``stratified`` queue order: labels spread over the topics in proportion to their traffic (or to a
lead's target shares), each topic sampled uniformly at random, so the all-traffic estimate can weight
every topic by its share (``labeler.estimate.report``).

- **Strata**: a logged query's stratum is its topic under the current topic model
  (``labeler.topics``; -1 = no known words); a query without a topic yet (it arrived after the
  build) is stratum -2. Synthetic and imported queries are not traffic: they come after every
  stratum is exhausted.
- **Within a stratum**: the seeded hash order of the query ids (the ``random`` order's), so the
  labeled part of a stratum is a uniform random sample of it. The queue's sort key holds the stratum
  in its high bits and that hash below, so each stratum is one range of the ``queue_open`` index.
- **Across strata**: each hand-out goes to the stratum with the largest deficit
  ``share * (L + 1) - l_h`` (``l_h`` = items of the stratum handed out under this order and still
  held or finished, ``L`` = their sum; a skipped item does not count, so its stratum stays due),
  ties by stratum id; a stratum with a share above 0 first gets ``MIN_PER_STRATUM`` items (an
  estimate within a stratum needs 2). ``share`` = the stratum's share of the logged occurrences, or
  the lead's ``stratified_targets`` ({topic: share}, normalised; topics left out get none until the
  targeted topics are exhausted).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import sqlite_utils

from .. import db as store
from ..accounts.settings import set_setting
from ..errors import LabelError

UNASSIGNED = -2  # no topic yet (arrived after the topic build)
MIN_PER_STRATUM = 2
_HASH_BITS = 40
_OTHER_SLOT = (1 << 22) - 1  # synthetic and imported queries: after every stratum
TOPICS_HINT = "build topics first with `labeler topics build` (or on the Metrics page)"


def model_id(conn: sqlite3.Connection) -> int | None:
    """The current topic model's id, or None."""
    row = conn.execute("SELECT max(id) FROM topic_models").fetchone()
    return None if row[0] is None else int(row[0])


def require_topics(db: sqlite_utils.Database) -> int:
    """The current topic model's id; raises LabelError naming ``labeler topics build`` when none."""
    found = model_id(db.conn)
    if found is None:
        raise LabelError(f"queue order stratified needs topics and there are none yet: {TOPICS_HINT}")
    return found


def fingerprint(conn: sqlite3.Connection) -> list[Any]:
    """What re-keys the stratified queue: a new topic model, or topics given to new queries."""
    return [model_id(conn), conn.execute("SELECT count(*) FROM query_topics").fetchone()[0]]


def query_strata(conn: sqlite3.Connection) -> dict[int, int]:
    """{query pk: topic} under the current model (queries without a row are ``UNASSIGNED``)."""
    found = model_id(conn)
    if found is None:
        return {}
    return dict(conn.execute("SELECT query_pk, topic FROM query_topics WHERE model_id = ?", [found]).fetchall())


def sort_key(stratum: int | None, order_hash: int) -> int:
    """The queue sort key: the stratum's slot in the high bits, the seeded hash below (None = not
    traffic: last)."""
    slot = _OTHER_SLOT if stratum is None else stratum - UNASSIGNED + 1
    return (slot << _HASH_BITS) + (order_hash >> (63 - _HASH_BITS))


def _slot_range(stratum: int | None) -> tuple[int, int]:
    low = sort_key(stratum, 0)
    return low, low + (1 << _HASH_BITS)


def stratum_of_key(key: int) -> int | None:
    """The stratum a stratified sort key belongs to (None = not traffic)."""
    slot = int(key) >> _HASH_BITS
    return None if slot == _OTHER_SLOT else slot - 1 + UNASSIGNED


def traffic_shares(conn: sqlite3.Connection) -> dict[int, float]:
    """{stratum: share of the logged occurrences} under the current topic model."""
    found = model_id(conn)
    rows = conn.execute(
        f"SELECT coalesce(t.topic, {UNASSIGNED}), sum(q.occurrences) FROM queries q LEFT JOIN query_topics t "
        f"ON t.query_pk = q.pk AND t.model_id IS ? WHERE q.origin = 'log' AND q.discarded_at IS NULL AND "
        f"{store.visible('q')} GROUP BY 1", [found]).fetchall()
    total = sum(float(n or 0) for _, n in rows)
    return {int(t): float(n or 0) / total for t, n in rows} if total > 0 else {}


def _cached_shares(conn: sqlite3.Connection, key: str) -> dict[int, float]:
    row = conn.execute("SELECT value FROM queue_meta WHERE key = 'strata'").fetchone()
    cached = store.loads(row[0]) if row else None
    if cached and cached.get("key") == key:
        return {int(t): s for t, s in cached["shares"].items()}
    shares = traffic_shares(conn)
    conn.execute("INSERT INTO queue_meta (key, value) VALUES ('strata', ?) ON CONFLICT (key) DO UPDATE SET "
                 "value = excluded.value", [store.dumps({"key": key, "shares": shares})])
    return shares


def shares(conn: sqlite3.Connection, settings: Mapping[str, Any], cache_key: str | None = None) -> dict[int, float]:
    """The share each stratum should get: the lead's ``stratified_targets`` when set, else traffic."""
    targets = settings.get("stratified_targets")
    if targets:
        total = sum(float(v) for v in targets.values())
        return {int(t): float(v) / total for t, v in targets.items()}
    return traffic_shares(conn) if cache_key is None else _cached_shares(conn, cache_key)


def handed_counts(conn: sqlite3.Connection) -> dict[int, int]:
    """{stratum: items handed out under the stratified order (current model) still held or finished}."""
    return {int(s): int(n) for s, n in conn.execute(
        "SELECT d.stratum, count(*) FROM queue_designs d JOIN queue u ON u.query_pk = d.query_pk "
        "WHERE d.design = 'stratified' AND d.stratum IS NOT NULL AND d.topic_model IS ? AND u.taken > 0 "
        "GROUP BY d.stratum", [model_id(conn)])}


def stratum_order(share: Mapping[int, float], counts: Mapping[int, int], others: Any = ()) -> list[int]:
    """Strata in the order the next hand-out tries them (module doc): those under the minimum
    first, then the largest deficit ``share * (L + 1) - l_h``, ties by stratum id; strata with no
    share (``others``: e.g. topics a lead's targets leave out) only after all of those."""
    total = sum(counts.get(s, 0) for s in share)
    strata = set(share) | set(counts) | set(others)

    def rank(s: int) -> tuple[bool, bool, float, int]:
        p, n = share.get(s, 0.0), counts.get(s, 0)
        return (not (p > 0 and n < MIN_PER_STRATUM), not p > 0, -(p * (total + 1) - n), s)

    return sorted(strata, key=rank)


def next_in_order(conn: sqlite3.Connection, annotator: str, settings: Mapping[str, Any], next_sql: str,
                  cache_key: str | None = None) -> tuple[int, int | None] | None:
    """(query pk, stratum) of the next item for ``annotator`` (``next_sql``: the queue's next-item
    query, narrowed here to one stratum's key range), or None when the queue has nothing for them."""
    ranged = next_sql.replace("WHERE u.taken < u.needed",
                              "WHERE u.taken < u.needed AND u.sort_key >= ?2 AND u.sort_key < ?3", 1)
    share = shares(conn, settings, cache_key)
    every = traffic_shares(conn) if cache_key is None else _cached_shares(conn, cache_key)
    for stratum in [*stratum_order(share, handed_counts(conn), every), None]:
        low, high = _slot_range(stratum)
        row = conn.execute(ranged, [annotator, low, high]).fetchone()
        if row is not None:
            return int(row[0]), stratum
    return None


def set_stratified_targets(db: sqlite_utils.Database, targets: Mapping[Any, float] | None, *,
                           by: str | None = None) -> dict[int, float] | None:
    """Set the share of labels each topic should get under the stratified order ({topic: share},
    normalised to sum 1; topics left out get none until the targeted ones are exhausted); None or {}
    goes back to the traffic shares.
    Leads only (``by``). Returns what was stored."""
    if not targets:
        set_setting(db, "stratified_targets", None, by=by)
        return None
    found = require_topics(db)
    known = {int(t) for (t,) in db.execute("SELECT topic FROM topics WHERE model_id = ?", [found])} | {UNASSIGNED, -1}
    clean: dict[int, float] = {}
    for topic, share in targets.items():
        try:
            t = int(topic)
        except (TypeError, ValueError):
            raise LabelError(f"target topic {topic!r} is not a topic id; see `labeler topics show`") from None
        if t not in known:
            raise LabelError(f"topic {t} is not in the current topic model; see `labeler topics show`")
        if isinstance(share, bool) or not isinstance(share, int | float) or not share >= 0:
            raise LabelError(f"target share {share!r} of topic {t} must be a number >= 0 (e.g. 0.25)")
        clean[t] = float(share)
    total = sum(clean.values())
    if not total > 0:
        raise LabelError("the target shares add up to 0; give at least one topic a share above 0")
    stored = {t: s / total for t, s in sorted(clean.items())}
    set_setting(db, "stratified_targets", {str(t): s for t, s in stored.items()}, by=by)
    return stored


def parse_topic_values(items: Iterable[str], convert: Callable[[str], Any], what: str, form: str,
                       example: str) -> dict[int, Any]:
    """``["3=x", ...]`` as {3: convert("x"), ...}; a LabelError names a bad item, e.g. "``what``
    '3' must be ``form``, e.g. ``example``"."""
    out: dict[int, Any] = {}
    for item in items:
        topic, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[int(topic.strip())] = convert(value.strip())
        except ValueError:
            raise LabelError(f"{what} {item!r} must be {form}, e.g. {example}") from None
    return out


def parse_targets(items: list[str]) -> dict[int, float]:
    """``["3=0.5", "1=0.5"]`` (TOPIC=SHARE) as {3: 0.5, 1: 0.5}; LabelError naming a bad item."""
    return parse_topic_values(items, float, "target", "TOPIC=SHARE", "3=0.5")

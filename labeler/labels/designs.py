"""What the queue hands out, recorded for the all-traffic estimates: every query the queue hands out
gets one ``queue_designs`` row, the first time, with the design it was drawn under (the queue order),
its inclusion probability when the design has one (``active``), the seed, and under ``stratified`` its
stratum and topic model; and the newest active draw as the queue reads it (``active_keys``,
``is_drawn``). Drawing the active sample is ``labeler.estimate.active``; reading the designs back for
the estimates is ``labeler.estimate.designs``."""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Any


def latest_draw(conn: sqlite3.Connection) -> tuple[int, int] | None:
    """(id, seed) of the newest active draw, or None."""
    row = conn.execute("SELECT id, seed FROM active_draws ORDER BY id DESC LIMIT 1").fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def record_handout(conn: sqlite3.Connection, query_pk: int, annotator: str, settings: dict[str, Any],
                   at: str, *, stratum: int | None = None, topic_model: int | None = None) -> None:
    """Record the design ``query_pk`` was handed out under (only its first hand-out counts), with
    its ``stratum`` and ``topic_model`` under the stratified order. Called by the queue inside its
    transaction."""
    order = settings.get("queue_order")
    pi, draw_id, seed = None, None, settings.get("queue_seed")
    if order == "active":
        draw = latest_draw(conn)
        row = None if draw is None else conn.execute(
            "SELECT inclusion_prob, drawn FROM active_draw_items WHERE draw_id = ? AND query_pk = ?",
            [draw[0], query_pk]).fetchone()
        if row is None or not row[1]:
            order = "active-undrawn"  # not part of the draw: not a probability sample
        else:
            pi, draw_id, seed = float(row[0]), draw[0], draw[1]
    conn.execute("INSERT OR IGNORE INTO queue_designs (query_pk, design, inclusion_prob, draw_id, seed, annotator, "
                 "handed_at, stratum, topic_model) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 [query_pk, order, pi, draw_id, None if seed is None else str(seed), annotator, at, stratum,
                  topic_model])


def active_keys(conn: sqlite3.Connection) -> dict[int, int]:
    """Queue sort keys under order ``active``: the newest draw's drawn queries, in a seeded random
    order; queries not drawn are absent (the queue does not hand them out)."""
    draw = latest_draw(conn)
    if draw is None:
        return {}
    out = {}
    for (pk,) in conn.execute("SELECT query_pk FROM active_draw_items WHERE draw_id = ? AND drawn = 1", [draw[0]]):
        digest = hashlib.blake2b(f"{draw[1]}\x1factive\x1f{pk}".encode(), digest_size=8).digest()
        out[int(pk)] = int.from_bytes(digest, "big") >> 1
    return out


def is_drawn(conn: sqlite3.Connection, query_pk: int) -> bool:
    """Whether the newest active draw drew ``query_pk``."""
    draw = latest_draw(conn)
    return draw is not None and conn.execute(
        "SELECT 1 FROM active_draw_items WHERE draw_id = ? AND query_pk = ? AND drawn = 1",
        [draw[0], query_pk]).fetchone() is not None

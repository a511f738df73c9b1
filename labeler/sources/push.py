"""``labeler push``: the consolidated human grades of a source's queries, sent back to that source.

The queries a source brought are those its syncs ingested (``ingests.path`` reads ``sync NAME
...``); a query's id is the id of the retrieval span (Phoenix), observation (Langfuse) or run
(LangSmith) it came from, its meta holds the trace id, and a chunk's rank in the production
retrieval, less one, is the document's position in the span's list. For each query with
consolidated grades (``labeler.labels.consolidate``: submitted grades, adjudication, median) on
chunks the retriever returned, labeler sends:

- Phoenix: a document annotation ``relevance`` per graded document (``POST /v1/document_annotations``,
  ``span_id``, ``document_position``, annotator kind ``HUMAN``, result ``{label, score}``: the
  grade's name in the project's scale, and the grade), and a span annotation ``golden precision``
  on the retrieval span (``POST /v1/span_annotations``: the share of the graded documents at or
  above the relevance threshold). Phoenix upserts both on (name, span, position).
- Langfuse: a score ``relevance`` per graded document on the retriever observation, and a score
  ``golden precision`` (``POST /api/public/scores`` with ``traceId``, ``observationId`` and an ``id``
  made from the source, target and name, on which Langfuse upserts).
- LangSmith: feedback ``relevance`` per graded document and ``golden precision`` on the run
  (``POST /feedback`` with an id made the same way, the run's project as ``session_id``, which
  SmithDB-only deployments require, and its start time; a changed grade is a ``PATCH
  /feedback/{id}``).

Every item carries the golden-set version (the latest export's version and hash, or
``unversioned``) in its metadata (LangSmith: the feedback source's metadata and the comment).
``source_pushes`` remembers the hash of each item's value once the source accepted it, so a second
push sends nothing and a changed grade is sent again; an item that fails (after the client's
retries on 429 and 5xx) keeps its error there and in the result, and the next push sends it again.
Pushing is for leads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import sqlite_utils

from .. import db as store
from ..accounts.manage import audit, require
from ..errors import LabelerError, SourceError
from ..labels.consolidate import golden_labels
from . import keys as source_keys
from . import store as sources
from .http import Http
from .langsmith import LangSmithClient
from .page import Client
from .sync import make_client

log = logging.getLogger(__name__)

RELEVANCE = "relevance"
PRECISION = "golden precision"
MAX_ERRORS = 20
PHOENIX_BATCH = 100  # annotations per request (Phoenix takes a list)
_NAMESPACE = uuid.UUID("6f1c3d4e-8a2b-4c5d-9e0f-1a2b3c4d5e6f")  # ids of Langfuse scores, LangSmith feedback


@dataclass
class PushItem:
    """One annotation, score or feedback to send: where it goes and what it says."""

    target: str  # span:ID or span:ID/doc:N (observation/run ids alike)
    name: str
    query_id: str
    trace_id: str | None
    started: str | None  # when the span (run, observation) started
    position: int | None  # the document's position in the span's list (None: the span itself)
    doc_id: str | None
    score: float
    label: str
    metadata: dict[str, Any]
    value_hash: str = ""
    update: bool = False  # the source has an older value of it


@dataclass
class PushResult:
    """What one push to one source did (``dry_run``: what it would send). ``ok`` false: ``error``
    says why nothing was sent, or ``failed`` items did not go (``errors``); a later push sends them."""

    name: str
    kind: str
    ok: bool = True
    dry_run: bool = False
    error: str | None = None
    golden_set_version: str = "unversioned"
    queries: int = 0  # the source's queries with consolidated grades
    items: int = 0  # annotations those grades make
    sent: int = 0  # new to the source
    updated: int = 0  # the grade changed since the last push
    unchanged: int = 0
    failed: int = 0
    not_retrieved: int = 0  # graded chunks the source's retrieval did not return (no position)
    requests: int = 0
    retries: int = 0
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        if self.error and not self.failed:  # nothing could be sent (no key, an unknown kind...)
            return f"{self.name}: FAILED: {self.error}"
        would = "would send" if self.dry_run else "sent"
        failed = f", {self.failed} FAILED (the next push sends them again)" if self.failed else ""
        extra = f"; {self.not_retrieved} graded chunks were not in its retrieval" if self.not_retrieved else ""
        return (f"{self.name}: {self.queries} graded queries, {self.items} annotations: {would} {self.sent} new, "
                f"{self.updated} updated, {self.unchanged} unchanged{failed} (golden set "
                f"{self.golden_set_version}){extra}")


def golden_set_version(db: sqlite_utils.Database) -> str:
    """The latest export's version and hash (``v3 sha256:1a2b...``), or ``unversioned``."""
    row = db.execute("SELECT version, sha256 FROM exports ORDER BY version DESC LIMIT 1").fetchone()
    return f"v{row[0]} sha256:{row[1][:12]}" if row else "unversioned"


def _source_queries(db: sqlite_utils.Database, name: str) -> dict[int, tuple[str, str | None, str | None]]:
    """query pk -> (query id, trace id, start time) of the queries the syncs of source ``name`` ingested."""
    rows = db.execute(
        "SELECT q.pk, q.query_id, q.meta, q.first_seen FROM queries q JOIN ingests i ON i.id = q.ingest_id "
        "WHERE i.state = 'done' AND i.path LIKE ? ESCAPE '\\'",
        ["sync " + name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + " %"]).fetchall()
    out: dict[int, tuple[str, str | None, str | None]] = {}
    for pk, query_id, meta, started in rows:
        try:
            trace = (json.loads(meta) or {}).get("trace_id") if meta else None
        except ValueError:
            trace = None
        out[int(pk)] = (query_id, str(trace) if trace else None, started)
    return out


def _hash(item: PushItem) -> str:
    # the grade (and what it means) only: a new export alone sends nothing again
    return hashlib.sha256(json.dumps([item.name, item.score, item.label], sort_keys=True).encode()).hexdigest()[:16]


def push_items(db: sqlite_utils.Database, name: str, result: PushResult) -> list[PushItem]:
    """Every item the consolidated grades of source ``name``'s queries make (see the module doc)."""
    queries = _source_queries(db, name)
    if not queries:
        return []
    golden = golden_labels(db, query_pks=sorted(queries))
    if golden.empty:
        return []
    threshold = int(store.get_setting(db, "threshold"))
    names = list(store.get_setting(db, "grade_names") or [])  # the project's scale: its label for each grade
    ranks = {(q, d): (r, doc_id) for q, d, r, doc_id in db.execute(
        "SELECT r.query_pk, r.doc_pk, r.rank, d.doc_id FROM retrievals r JOIN documents d ON d.pk = r.doc_pk "
        "WHERE r.retriever = 'production' AND r.query_pk IN (SELECT value FROM json_each(?))",
        [json.dumps(sorted({int(q) for q in golden["query_pk"]}))])}
    version = result.golden_set_version
    items: list[PushItem] = []
    per_query: dict[int, list[int]] = {}
    for q, d, grade, n in zip(golden["query_pk"], golden["doc_pk"], golden["grade"], golden["n_annotators"],
                              strict=True):
        q, d, grade = int(q), int(d), int(grade)
        found = ranks.get((q, d))
        if found is None:
            result.not_retrieved += 1
            continue
        rank, doc_id = found
        query_id, trace, started = queries[q]
        per_query.setdefault(q, []).append(grade)
        items.append(PushItem(
            f"span:{query_id}/doc:{rank - 1}", RELEVANCE, query_id, trace, started, rank - 1, doc_id, float(grade),
            names[grade] if 0 <= grade < len(names) else f"grade {grade}",
            {"golden_set_version": version, "doc_id": doc_id, "grade": grade, "annotators": int(n),
             "by": "labeler"}))
    for q, grades in per_query.items():
        query_id, trace, started = queries[q]
        relevant = sum(g >= threshold for g in grades)
        items.append(PushItem(
            f"span:{query_id}", PRECISION, query_id, trace, started, None, None, round(relevant / len(grades), 6),
            f"{relevant} of {len(grades)} relevant",
            {"golden_set_version": version, "relevant": relevant, "graded": len(grades), "threshold": threshold,
             "by": "labeler"}))
    result.queries = len(per_query)
    for item in items:
        item.value_hash = _hash(item)
    return items


def _pending(db: sqlite_utils.Database, name: str, items: list[PushItem], result: PushResult) -> list[PushItem]:
    """The items whose value the source has not accepted yet (new, changed, or failed before)."""
    known = {(t, n): h for t, n, h in db.execute(
        "SELECT target, name, value_hash FROM source_pushes WHERE source = ?", [name])}
    pending = []
    for item in items:
        accepted = known.get((item.target, item.name))
        if accepted == item.value_hash:
            result.unchanged += 1
            continue
        item.update = accepted is not None
        pending.append(item)
    return pending


def _record(db: sqlite_utils.Database, name: str, done: list[tuple[PushItem, str | None]],
            failed: list[tuple[PushItem, str]]) -> None:
    at = store.now()
    with store.transaction(db):
        if done:
            db.conn.executemany(
                "INSERT INTO source_pushes (source, target, name, value_hash, remote_id, pushed_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (source, target, name) DO UPDATE SET "
                "value_hash = excluded.value_hash, remote_id = coalesce(excluded.remote_id, remote_id), "
                "pushed_at = excluded.pushed_at, error = NULL, failed_at = NULL",
                [(name, i.target, i.name, i.value_hash, remote, at) for i, remote in done])
        if failed:
            db.conn.executemany(
                "INSERT INTO source_pushes (source, target, name, error, failed_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (source, target, name) DO UPDATE SET error = excluded.error, "
                "failed_at = excluded.failed_at",
                [(name, i.target, i.name, error, at) for i, error in failed])


def item_uuid(source: str, item: PushItem) -> str:
    """The id a Langfuse score or LangSmith feedback of ``item`` gets: the same on every push."""
    return str(uuid.uuid5(_NAMESPACE, f"{source}\n{item.target}\n{item.name}"))


# -- the three stores --------------------------------------------------------------------------

Done = Callable[[list[PushItem], str | None], None]
Failed = Callable[[list[PushItem], str], None]


def _phoenix(http: Http, source: str, items: list[PushItem], done: Done, failed: Failed) -> None:
    def body(i: PushItem) -> dict[str, Any]:
        out: dict[str, Any] = {"span_id": i.query_id, "name": i.name, "annotator_kind": "HUMAN",
                               "result": {"label": i.label, "score": i.score}, "metadata": i.metadata,
                               "identifier": ""}
        if i.position is not None:
            out["document_position"] = i.position
        return out

    def send(path: str, batch: list[PushItem]) -> None:
        http.request("POST", path, params={"sync": "true"}, json={"data": [body(i) for i in batch]})

    for span_level, path in ((False, "v1/document_annotations"), (True, "v1/span_annotations")):
        spans: dict[str, list[PushItem]] = {}
        for i in items:
            if (i.position is None) == span_level:
                spans.setdefault(i.query_id, []).append(i)
        groups = list(spans.values())
        while groups:
            batch_groups, size = [], 0
            while groups and (not batch_groups or size + len(groups[0]) <= PHOENIX_BATCH):
                size += len(groups[0])
                batch_groups.append(groups.pop(0))
            batch = [i for g in batch_groups for i in g]
            try:
                send(path, batch)
            except SourceError as e:
                refused = e.status is not None and e.status < 500 and e.status != 429
                if not refused or len(batch_groups) == 1:
                    failed(batch, str(e))
                    continue
                # sync=true refuses the whole batch for one span Phoenix lacks: find it, span by span
                for group in batch_groups:
                    try:
                        send(path, group)
                    except SourceError as e1:
                        failed(group, str(e1))
                    else:
                        done(group, None)
            else:
                done(batch, None)


def _langfuse(http: Http, source: str, items: list[PushItem], done: Done, failed: Failed) -> None:
    for i in items:
        comment = (f"document {i.doc_id} at position {i.position}: {i.label}" if i.position is not None
                   else i.label) + f" (labeler, golden set {i.metadata['golden_set_version']})"
        body = {"id": item_uuid(source, i), "traceId": i.trace_id, "observationId": i.query_id, "name": i.name,
                "value": i.score, "dataType": "NUMERIC", "comment": comment,
                "metadata": {**i.metadata, "label": i.label, "document_position": i.position}}
        try:
            answer = http.post("api/public/scores", body)
        except SourceError as e:
            failed([i], str(e))
        else:
            done([i], str(answer.get("id")) if isinstance(answer, dict) and answer.get("id") else body["id"])


def _langsmith(http: Http, source: str, items: list[PushItem], done: Done, failed: Failed,
               session: Callable[[], str]) -> None:
    project = session()  # the run's project: feedback without it is deprecated, refused by SmithDB-only deployments
    for i in items:
        feedback_id = item_uuid(source, i)
        comment = (f"document {i.doc_id} at position {i.position}: {i.label}" if i.position is not None
                   else i.label) + f" (labeler, golden set {i.metadata['golden_set_version']})"
        update = {"score": i.score, "value": i.label, "comment": comment}
        try:
            if i.update:
                http.request("PATCH", f"feedback/{feedback_id}", json=update)
            else:
                metadata = {**i.metadata, "document_position": i.position}
                body = {"id": feedback_id, "run_id": i.query_id, "trace_id": i.trace_id, "session_id": project,
                        "start_time": i.started, "key": i.name, **update, "extra": metadata,
                        "feedback_source": {"type": "api", "metadata": metadata}}
                try:
                    http.post("feedback", {k: v for k, v in body.items() if v is not None})
                except SourceError as e:
                    if e.status != 409:  # sent before but not recorded (a push killed mid-way): update it
                        raise
                    http.request("PATCH", f"feedback/{feedback_id}", json=update)
        except SourceError as e:
            failed([i], str(e))
        else:
            done([i], feedback_id)


def _send(source: sources.Source, client: Client, items: list[PushItem], done: Done, failed: Failed) -> None:
    """``items`` to ``source`` through its sync client's HTTP (the same keys, retries and backoff)."""
    http: Http = client.http  # type: ignore[attr-defined] - every source client has one
    if isinstance(client, LangSmithClient):
        _langsmith(http, source.name, items, done, failed, client.session)
    elif source.kind == "phoenix":
        _phoenix(http, source.name, items, done, failed)
    elif source.kind == "langfuse":
        _langfuse(http, source.name, items, done, failed)
    else:
        raise SourceError(f"source {source.name}: unknown kind {source.kind!r}")


def push_source(db: sqlite_utils.Database, name: str, *, by: str | None = None, dry_run: bool = False,
                env: dict[str, str] | None = None, secrets: Path | None = None, **http: Any) -> PushResult:
    """Send the consolidated human grades of source ``name``'s queries back to it (leads only); see
    the module docstring. ``dry_run``: count what would be sent, send and record nothing (no key
    needed). A source that cannot be reached, or items it refuses, are reported in the result
    (``ok=False``), never raised; what failed is sent again by the next push. ``env``/``secrets``:
    where the keys are read; ``http``: the client's ``retries``, ``backoff``, ``timeout``, ``sleep``."""
    require(db, by, "lead", "pushing grades to a source")
    source = sources.get_source(db, name)
    result = PushResult(source.name, source.kind, dry_run=dry_run, golden_set_version=golden_set_version(db))
    items = push_items(db, source.name, result)
    result.items = len(items)
    pending = _pending(db, source.name, items, result)
    if dry_run:
        result.sent = sum(not i.update for i in pending)
        result.updated = sum(i.update for i in pending)
        return result
    if not pending:
        return result
    keys: dict[str, str] = {}
    client: Client | None = None

    def done(batch: list[PushItem], remote: str | None) -> None:
        _record(db, source.name, [(i, remote) for i in batch], [])
        result.sent += sum(not i.update for i in batch)
        result.updated += sum(i.update for i in batch)

    def failed(batch: list[PushItem], error: str) -> None:
        error = source_keys.scrub(error, keys)
        _record(db, source.name, [], [(i, error) for i in batch])
        result.failed += len(batch)
        result.ok = False
        if len(result.errors) < MAX_ERRORS:
            result.errors.append(f"{batch[0].target} {batch[0].name}: {error}")

    try:
        keys = source_keys.keys_for(source.kind, source.name, env=env, secrets=secrets)
        client = make_client(source, keys, **http)
        _send(source, client, pending, done, failed)
    except Exception as e:  # noqa: BLE001 - reported like a sync's failure, never a traceback
        if not isinstance(e, LabelerError):
            log.exception("push to %s failed", source.name)
        result.ok = False
        result.error = source_keys.scrub(f"{e}" if isinstance(e, LabelerError) else f"{type(e).__name__}: {e}", keys)
    finally:
        if client is not None:
            sent_by: Http = client.http  # type: ignore[attr-defined]
            result.requests, result.retries = sent_by.attempts, sent_by.retried
            client.close()
    if result.failed and result.error is None:
        result.error = f"{result.failed} of {len(pending)} items failed; labeler push {source.name} sends them again"
    with store.transaction(db):
        audit(db.conn, store.now(), by, "source_push", source.name,
              store.dumps({"sent": result.sent, "updated": result.updated, "failed": result.failed}))
    return result

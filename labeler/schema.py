"""The versioned schema: every migration (sqlite-utils ``Migrations``), one per change, applied in
order by ``labeler.db.connect``. A migration's name never changes once released (databases record
the names they applied); its docstring says what it adds and why. New tables get a migration of
their own here; the SQL that reads and writes them lives with the code that owns them.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlite_utils
from sqlite_utils.migrations import Migrations

migrations = Migrations("labeler")

_SCHEMA_V1 = """
CREATE TABLE documents (
    pk INTEGER PRIMARY KEY,
    doc_id TEXT NOT NULL UNIQUE,
    text TEXT,
    title TEXT,
    source TEXT,
    meta TEXT,
    in_corpus INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL
);
CREATE TABLE queries (
    pk INTEGER PRIMARY KEY,
    query_id TEXT NOT NULL UNIQUE,
    question TEXT NOT NULL,
    norm_question TEXT NOT NULL,
    origin TEXT NOT NULL DEFAULT 'log' CHECK (origin IN ('log', 'synthetic', 'import')),
    answer TEXT,
    occurrences INTEGER NOT NULL DEFAULT 1,
    first_seen TEXT,
    last_seen TEXT,
    meta TEXT,
    source TEXT,
    review_state TEXT,
    seed_doc_ids TEXT,
    generator TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX queries_norm ON queries (norm_question);
CREATE TABLE query_versions (
    query_pk INTEGER NOT NULL REFERENCES queries (pk),
    retriever TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    source TEXT NOT NULL,
    PRIMARY KEY (query_pk, retriever)
) WITHOUT ROWID;
CREATE TABLE log_lines (
    line_key TEXT PRIMARY KEY,
    query_pk INTEGER NOT NULL REFERENCES queries (pk)
) WITHOUT ROWID;
CREATE TABLE retrievals (
    query_pk INTEGER NOT NULL REFERENCES queries (pk),
    retriever TEXT NOT NULL DEFAULT 'production',
    rank INTEGER NOT NULL,
    doc_pk INTEGER NOT NULL REFERENCES documents (pk),
    score REAL,
    PRIMARY KEY (query_pk, retriever, rank)
) WITHOUT ROWID;
CREATE TABLE relevance_labels (
    query_pk INTEGER NOT NULL REFERENCES queries (pk),
    doc_pk INTEGER NOT NULL REFERENCES documents (pk),
    annotator TEXT NOT NULL,
    grade INTEGER NOT NULL,
    origin TEXT NOT NULL DEFAULT 'human',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (query_pk, doc_pk, annotator)
) WITHOUT ROWID;
CREATE TABLE query_labels (
    query_pk INTEGER NOT NULL REFERENCES queries (pk),
    annotator TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'in_progress'
        CHECK (status IN ('in_progress', 'submitted', 'skipped', 'flagged', 'discarded')),
    expected_answer TEXT,
    answer_faithful TEXT,
    answer_relevant TEXT,
    notes TEXT,
    flag_reason TEXT,
    seconds REAL NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    submitted_at TEXT,
    PRIMARY KEY (query_pk, annotator)
) WITHOUT ROWID;
CREATE INDEX query_labels_annotator ON query_labels (annotator, status);
CREATE TABLE assignments (
    query_pk INTEGER NOT NULL REFERENCES queries (pk),
    annotator TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('leased', 'done', 'released')),
    lease_expires TEXT,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (query_pk, annotator)
) WITHOUT ROWID;
CREATE INDEX assignments_annotator ON assignments (annotator, state);
CREATE TABLE adjudications (
    query_pk INTEGER NOT NULL REFERENCES queries (pk),
    doc_pk INTEGER NOT NULL REFERENCES documents (pk),
    grade INTEGER NOT NULL,
    lead TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (query_pk, doc_pk)
) WITHOUT ROWID;
CREATE TABLE label_events (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    annotator TEXT NOT NULL,
    query_pk INTEGER NOT NULL,
    doc_pk INTEGER,
    field TEXT NOT NULL,
    old TEXT,
    new TEXT
);
CREATE INDEX label_events_query ON label_events (query_pk);
CREATE TABLE ingests (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    path TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    format TEXT NOT NULL,
    counts TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE annotators (
    name TEXT PRIMARY KEY,
    role TEXT NOT NULL DEFAULT 'annotator' CHECK (role IN ('annotator', 'lead')),
    created_at TEXT NOT NULL
);
CREATE TABLE llm_calls (
    hash TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    cost REAL,
    error TEXT,
    created_at TEXT NOT NULL
);
CREATE TABLE exports (
    version INTEGER PRIMARY KEY,
    format TEXT NOT NULL,
    path TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    filters TEXT NOT NULL,
    counts TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


@migrations()
def m001_initial(db: sqlite_utils.Database) -> None:
    for statement in _statements(_SCHEMA_V1):
        db.execute(statement)


# --- m002: the labeling queue (labeler.labels) ----------------------------------------------

_SCHEMA_M002_QUEUE = """
CREATE TABLE queue (
    query_pk INTEGER PRIMARY KEY REFERENCES queries (pk),
    sort_key NOT NULL,
    overlap_key INTEGER NOT NULL,
    overlap INTEGER NOT NULL DEFAULT 0,
    needed INTEGER NOT NULL DEFAULT 1,
    taken INTEGER NOT NULL DEFAULT 0,
    done INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX queue_open ON queue (sort_key, query_pk) WHERE taken < needed;
CREATE TABLE queue_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE INDEX assignments_leases ON assignments (lease_expires) WHERE state = 'leased';
CREATE INDEX queries_synthetic ON queries (review_state) WHERE origin = 'synthetic';
ALTER TABLE query_labels ADD COLUMN status_at TEXT;
ALTER TABLE query_labels ADD COLUMN status_reason TEXT;
CREATE INDEX query_labels_history ON query_labels (annotator, status_at);
CREATE INDEX relevance_labels_annotator ON relevance_labels (annotator)
"""


@migrations()
def m002_labels_queue(db: sqlite_utils.Database) -> None:
    """The queue: one row per labelable query with its sort key (``queue_order``), its overlap
    target (``needed``) and how many annotators hold or finished it (``taken``, ``done``); the
    partial index ``queue_open`` holds only items with a free slot, so finding the next item never
    scans labeled ones. ``query_labels`` gains when its status last changed (history order) and the
    reason given with a skip or discard."""
    for statement in _statements(_SCHEMA_M002_QUEUE):
        db.execute(statement)


# --- m003: llm_calls as cache + ledger (labeler.llm) -----------------------------------------

_SCHEMA_M003_LLM = """
ALTER TABLE llm_calls ADD COLUMN status TEXT NOT NULL DEFAULT 'ok' CHECK (status IN ('ok', 'failed'));
ALTER TABLE llm_calls ADD COLUMN parsed TEXT;
ALTER TABLE llm_calls ADD COLUMN requests INTEGER NOT NULL DEFAULT 0;
ALTER TABLE llm_calls ADD COLUMN updated_at TEXT;
UPDATE llm_calls SET status = 'failed' WHERE error IS NOT NULL;
UPDATE llm_calls SET updated_at = created_at
"""


@migrations()
def m003_llm_calls_status(db: sqlite_utils.Database) -> None:
    """``status`` ok/failed (only ok rows are a cache hit), the validated output as ``parsed``,
    the number of HTTP requests paid for, and when the row last changed. Tokens and cost add up
    over every attempt for the same request hash, so the table is a ledger of what was spent."""
    for statement in _statements(_SCHEMA_M003_LLM):
        db.execute(statement)


# --- m004: progress indexes (labeler.labels.progress) ---------------------------------------

_SCHEMA_M004_PROGRESS = """
CREATE INDEX query_labels_time ON query_labels (annotator, status, seconds);
CREATE INDEX query_labels_status_time ON query_labels (status, seconds);
CREATE INDEX queue_unfinished ON queue (query_pk) WHERE done < needed
"""


@migrations()
def m004_labels_progress_indexes(db: sqlite_utils.Database) -> None:
    """Index-only progress at 100k labeled items (the Label page shows it on every rerun): counts
    and median seconds per annotator and status from covering indexes, and the unfinished queue
    items (``done < needed``) from a partial index."""
    for statement in _statements(_SCHEMA_M004_PROGRESS):
        db.execute(statement)


# --- m005: synthetic questions (labeler.synth) ----------------------------------------------

_SCHEMA_M005_SYNTH = """
CREATE TABLE synth_runs (
    id INTEGER PRIMARY KEY,
    setting TEXT NOT NULL,
    generator TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'finished', 'cancelled', 'failed')),
    summary TEXT,
    created_at TEXT NOT NULL,
    finished_at TEXT
);
CREATE TABLE synth_rejections (
    id INTEGER PRIMARY KEY,
    item_key TEXT NOT NULL UNIQUE,
    run_id INTEGER REFERENCES synth_runs (id),
    setting TEXT NOT NULL,
    seed_doc_ids TEXT NOT NULL,
    question TEXT,
    expected_answer TEXT,
    quotes TEXT,
    reason TEXT NOT NULL,
    detail TEXT,
    generator TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX synth_rejections_run ON synth_rejections (run_id);
CREATE TABLE synth_reviews (
    query_pk INTEGER PRIMARY KEY REFERENCES queries (pk),
    decision TEXT NOT NULL CHECK (decision IN ('accepted', 'edited', 'rejected')),
    reviewer TEXT NOT NULL,
    reviewed_at TEXT NOT NULL
)
"""


@migrations()
def m005_synth(db: sqlite_utils.Database) -> None:
    """Synthetic questions: every generation run with its settings and summary (``synth_runs``),
    every generated question that failed a check with the reason (``synth_rejections``, one row per
    LLM answer item, so a rerun adds nothing), and the latest review decision per synthetic query
    (``synth_reviews``; the query's ``review_state`` is the state, ``label_events`` the history)."""
    for statement in _statements(_SCHEMA_M005_SYNTH):
        db.execute(statement)


# --- m006: LLM judges, rubrics, tags and suggestions (labeler.judge) -------------------------

_SCHEMA_M006_JUDGES = """
CREATE TABLE judge_rubrics (
    judge TEXT NOT NULL,
    version INTEGER NOT NULL,
    hash TEXT NOT NULL,
    text TEXT NOT NULL,
    author TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (judge, version)
);
CREATE TABLE judge_runs (
    id INTEGER PRIMARY KEY,
    judge TEXT NOT NULL,
    kind TEXT NOT NULL,
    rubric TEXT NOT NULL,
    rubric_hash TEXT NOT NULL,
    rubric_text TEXT NOT NULL,
    model TEXT NOT NULL,
    temperature REAL,
    params TEXT NOT NULL,
    on_set TEXT NOT NULL CHECK (on_set IN ('labeled', 'unlabeled')),
    calibration_run INTEGER REFERENCES judge_runs (id),
    status TEXT NOT NULL CHECK (status IN ('running', 'done', 'cancelled', 'failed')),
    items INTEGER NOT NULL DEFAULT 0,
    done INTEGER NOT NULL DEFAULT 0,
    cached INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    cancelled INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost REAL,
    error TEXT,
    created_at TEXT NOT NULL,
    finished_at TEXT
);
CREATE TABLE judge_labels (
    run_id INTEGER NOT NULL REFERENCES judge_runs (id),
    query_pk INTEGER NOT NULL REFERENCES queries (pk),
    doc_pk INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL CHECK (status IN ('pending', 'ok', 'failed')),
    grade INTEGER,
    score REAL,
    label TEXT,
    rationale TEXT,
    detail TEXT,
    call_hash TEXT,
    error TEXT,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (run_id, query_pk, doc_pk)
) WITHOUT ROWID;
CREATE TABLE judge_tags (
    run_id INTEGER NOT NULL REFERENCES judge_runs (id),
    query_pk INTEGER NOT NULL REFERENCES queries (pk),
    doc_pk INTEGER NOT NULL DEFAULT 0,
    tag TEXT NOT NULL CHECK (tag IN ('judge_wrong', 'human_wrong', 'rubric_ambiguous')),
    annotator TEXT NOT NULL,
    note TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, query_pk, doc_pk)
) WITHOUT ROWID;
CREATE TABLE suggestions (
    query_pk INTEGER NOT NULL REFERENCES queries (pk),
    doc_pk INTEGER NOT NULL REFERENCES documents (pk),
    run_id INTEGER NOT NULL REFERENCES judge_runs (id),
    grade INTEGER NOT NULL,
    rationale TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (query_pk, doc_pk)
) WITHOUT ROWID;
CREATE INDEX suggestions_run ON suggestions (run_id)
"""


@migrations()
def m006_judges(db: sqlite_utils.Database) -> None:
    """LLM judges: rubric versions (``judge_rubrics``, version 1 is the built-in text), every run
    with its judge, rubric name + hash + text, model, temperature and parameters (``judge_runs``),
    one row per judged item with grade, score, label, rationale, claim list (``detail``) and the
    ``llm_calls`` hash of the raw response (``judge_labels``; ``doc_pk`` 0 = the query's answer),
    disagreement tags, and the suggestions of gate-passing runs (never golden labels)."""
    for statement in _statements(_SCHEMA_M006_JUDGES):
        db.execute(statement)


# --- m007: accounts, sign-in throttling, sessions, audit (labeler.accounts) ------------------

_SCHEMA_M007_ACCOUNTS = """
ALTER TABLE annotators ADD COLUMN password_hash TEXT;
ALTER TABLE annotators ADD COLUMN email TEXT;
ALTER TABLE annotators ADD COLUMN may_run_llm INTEGER NOT NULL DEFAULT 0;
ALTER TABLE annotators ADD COLUMN invite_hash TEXT;
ALTER TABLE annotators ADD COLUMN invite_expires TEXT;
ALTER TABLE annotators ADD COLUMN removed_at TEXT;
CREATE UNIQUE INDEX annotators_email ON annotators (email) WHERE email IS NOT NULL;
CREATE TABLE signin_failures (
    name TEXT PRIMARY KEY,
    failures INTEGER NOT NULL,
    last_at TEXT NOT NULL
);
CREATE TABLE sessions (
    token_hash TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
CREATE INDEX sessions_name ON sessions (name);
CREATE TABLE audit_events (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT,
    detail TEXT
);
CREATE INDEX audit_events_at ON audit_events (at)
"""


@migrations()
def m007_accounts(db: sqlite_utils.Database) -> None:
    """Accounts on ``annotators`` (scrypt password hash, OIDC email, may_run_llm, one-time sign-in
    token hash, removal), per-name failed sign-ins (throttling), browser sessions (token hashes),
    and ``audit_events`` for account, settings and data actions (label changes stay in
    ``label_events``)."""
    for statement in _statements(_SCHEMA_M007_ACCOUNTS):
        db.execute(statement)


# --- m008: grade streams of the Label page's grading widget (labeler.labels.streams) ----------

_SCHEMA_M008_GRADE_STREAMS = """
CREATE TABLE grade_streams (
    query_pk INTEGER NOT NULL REFERENCES queries (pk),
    annotator TEXT NOT NULL,
    client_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (query_pk, annotator, client_id)
) WITHOUT ROWID
"""


@migrations()
def m008_grade_streams(db: sqlite_utils.Database) -> None:
    """The highest applied sequence number of every grade stream (one per item, annotator and
    browser page load), so that an event the grading widget sends again is applied only once."""
    for statement in _statements(_SCHEMA_M008_GRADE_STREAMS):
        db.execute(statement)


# --- m009: staged ingests, owners of long jobs (labeler.ingest, labeler.owners) ----------------

_SCHEMA_M009_STAGING = """
ALTER TABLE ingests ADD COLUMN state TEXT NOT NULL DEFAULT 'done' CHECK (state IN ('staging', 'done'));
ALTER TABLE ingests ADD COLUMN owner TEXT;
ALTER TABLE ingests ADD COLUMN first_query_pk INTEGER;
ALTER TABLE ingests ADD COLUMN finished_at TEXT;
CREATE INDEX ingests_staging ON ingests (id) WHERE state = 'staging';
ALTER TABLE queries ADD COLUMN ingest_id INTEGER;
ALTER TABLE documents ADD COLUMN ingest_id INTEGER;
ALTER TABLE retrievals ADD COLUMN ingest_id INTEGER;
ALTER TABLE query_versions ADD COLUMN ingest_id INTEGER;
ALTER TABLE log_lines ADD COLUMN ingest_id INTEGER;
CREATE TABLE ingest_occurrences (
    ingest_id INTEGER NOT NULL,
    query_pk INTEGER NOT NULL,
    occurrences INTEGER NOT NULL,
    first_seen TEXT,
    last_seen TEXT,
    answer TEXT,
    PRIMARY KEY (ingest_id, query_pk)
) WITHOUT ROWID;
CREATE TABLE ingest_texts (
    ingest_id INTEGER NOT NULL,
    doc_pk INTEGER NOT NULL,
    text TEXT,
    title TEXT,
    source TEXT,
    meta TEXT,
    corpus INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (ingest_id, doc_pk)
) WITHOUT ROWID;
ALTER TABLE judge_runs ADD COLUMN owner TEXT;
ALTER TABLE synth_runs ADD COLUMN owner TEXT
"""


@migrations()
def m009_ingest_staging(db: sqlite_utils.Database) -> None:
    """Ingests write in short transactions into rows that readers do not see yet: every row an
    ingest brings (queries, documents, retrievals, query versions, log lines) records its
    ``ingest_id``, and rows of an ingest whose ``state`` is still ``staging`` are hidden (see
    ``visible``); the final commit sets ``done``. Changes to rows that were already visible
    (occurrence counts, text filled in) wait in ``ingest_occurrences`` and ``ingest_texts`` until
    then. ``owner`` (``labeler.owners``) tells a running ingest, judge or synth run from one whose
    process was killed."""
    for statement in _statements(_SCHEMA_M009_STAGING):
        db.execute(statement)


# Frozen copy of labeler.ingest.times.timestamp as m010 ran it (never edit: migrations are history).
_M010_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_M010_DIGITS = re.compile(r"^-?\d+(\.\d+)?$")
_M010_UTC_Z = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?Z")
_M010_UNITS = ((1e11, 1.0), (1e14, 1e-3), (1e17, 1e-6), (math.inf, 1e-9))


def _m010_format(t: datetime) -> str:
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _m010_from_epoch(value: float) -> str:
    scale = next(scale for bound, scale in _M010_UNITS if abs(value) < bound)
    if scale == 1e-9 and isinstance(value, int):  # integer nanoseconds: no float rounding
        return _m010_format(_M010_EPOCH + timedelta(microseconds=value // 1000))
    return _m010_format(_M010_EPOCH + timedelta(seconds=value * scale))


def _m010_timestamp(value: Any) -> Any:
    """``value`` as UTC ISO 8601 with microseconds (None for None or ""); a value that is not a time
    comes back unchanged."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, datetime):
            return _m010_format(value)
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, int | float):
            if not math.isfinite(value):
                raise ValueError
            return _m010_from_epoch(value)
        if isinstance(value, str):
            m = _M010_UTC_Z.fullmatch(value)
            if m:
                return f"{m.group(1)}.{(m.group(2) or '').ljust(6, '0')}Z"
            text = value.strip()
            if _M010_DIGITS.match(text):
                return _m010_from_epoch(int(text) if "." not in text else float(text))
            return _m010_format(datetime.fromisoformat(text))
        if hasattr(value, "isoformat"):
            return _m010_format(datetime.fromisoformat(value.isoformat()))
    except (ValueError, OverflowError):
        pass
    return value


@migrations()
def m010_utc_timestamps(db: sqlite_utils.Database) -> None:
    """Logged times were stored as the log wrote them (epoch ms, ``+00:00``, ``Z``) and compared as
    text; they are now UTC ISO 8601 with microseconds (``labeler.ingest.times``), so text order is
    time order. Values that cannot be read as a time are left as they were. The reading of a time is
    frozen here as it was when this migration was written (``_m010_timestamp``), so an old database
    upgrades the same way whatever ``labeler.ingest.times`` does today."""

    def fixed(value: Any) -> Any:
        return _m010_timestamp(value)

    for table, key in (("queries", "pk"), ("ingest_occurrences", "ingest_id || ' ' || query_pk")):
        rows = db.execute(f"SELECT {key}, first_seen, last_seen FROM {table} "
                          "WHERE first_seen IS NOT NULL OR last_seen IS NOT NULL").fetchall()
        changes = [(fixed(first), fixed(last), k) for k, first, last in rows
                   if (fixed(first), fixed(last)) != (first, last)]
        db.conn.executemany(f"UPDATE {table} SET first_seen = ?, last_seen = ? WHERE {key} = ?", changes)


# --- m012: the corpus search index (labeler.search) --------------------------------------------

#: Every document with text is in the FTS5 index (external content: the index holds no copy of the
#: text). ``unicode61 remove_diacritics 2`` without stemming, so that the terms of the vocabulary
#: table are the words Python's tokenizer (``labeler.search.fts.tokens``) produces. SQL triggers note
#: every change to a document's text in ``documents_fts_pending`` (with the indexed values the index
#: must forget), whichever code writes it; ``index_pending`` brings the index up to date in a few
#: statements, which the ingest's final commit calls. Writing the index from the triggers row by row
#: made a corpus ingest 5x slower (FTS5 flushes its buffer at every statement's savepoint); one
#: INSERT ... SELECT per 1,000 documents costs a third of that.
_M012_SEARCH_FTS = [
    "CREATE VIRTUAL TABLE documents_fts USING fts5(title, text, content='documents', content_rowid='pk', "
    "tokenize='unicode61 remove_diacritics 2')",
    "CREATE VIRTUAL TABLE documents_fts_vocab USING fts5vocab(documents_fts, 'row')",
    "INSERT INTO documents_fts (rowid, title, text) SELECT pk, title, text FROM documents WHERE text IS NOT NULL",
    # had_old: the index holds (old_title, old_text) for pk, to be deleted before the new values go in
    "CREATE TABLE documents_fts_pending (pk INTEGER PRIMARY KEY, had_old INTEGER NOT NULL, old_title TEXT, "
    "old_text TEXT)",
    "CREATE TRIGGER documents_fts_insert AFTER INSERT ON documents WHEN new.text IS NOT NULL BEGIN "
    "INSERT OR IGNORE INTO documents_fts_pending (pk, had_old) VALUES (new.pk, 0); END",
    "CREATE TRIGGER documents_fts_update AFTER UPDATE OF text, title ON documents BEGIN "
    "INSERT OR IGNORE INTO documents_fts_pending (pk, had_old, old_title, old_text) "
    "VALUES (old.pk, old.text IS NOT NULL, old.title, old.text); END",
    "CREATE TRIGGER documents_fts_delete AFTER DELETE ON documents WHEN old.text IS NOT NULL BEGIN "
    "INSERT OR IGNORE INTO documents_fts_pending (pk, had_old, old_title, old_text) "
    "VALUES (old.pk, 1, old.title, old.text); END",
    # Embedding vectors (float32 bytes) by a hash of model and text; doc_pk when the text is a chunk's.
    "CREATE TABLE embeddings (key TEXT NOT NULL, model TEXT NOT NULL, doc_pk INTEGER, dims INTEGER NOT NULL, "
    "vector BLOB NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (key, model)) WITHOUT ROWID",
    "CREATE INDEX embeddings_doc ON embeddings (model, doc_pk) WHERE doc_pk IS NOT NULL",
]



@migrations()
def m012_search_fts(db: sqlite_utils.Database) -> None:
    """The corpus search index: an FTS5 table over documents' title and text (BM25 ranking), its
    vocabulary (document frequencies for relevance feedback), the triggers and the queue that keep
    it in step with ``documents``, and the ``embeddings`` cache of the optional embedding search."""
    for statement in _M012_SEARCH_FTS:
        db.execute(statement)


# --- m013: the pool's re-queue (labeler.labels.pool, labeler.ingest.staging) ---------------------

_SCHEMA_M013_POOL = """
CREATE TABLE requeued (
    query_pk INTEGER NOT NULL REFERENCES queries (pk),
    annotator TEXT NOT NULL,
    ingest_id INTEGER,
    created_at TEXT NOT NULL,
    PRIMARY KEY (query_pk, annotator)
) WITHOUT ROWID;
CREATE INDEX requeued_annotator ON requeued (annotator, created_at)
"""


@migrations()
def m013_pool(db: sqlite_utils.Database) -> None:
    """Items that go back to an annotator who submitted them because an ingest added chunks to
    their pool (another retriever's ranking, or new chunks): one row per (query, annotator) until
    they submit again; the chunks they have not graded are the new ones."""
    for statement in _statements(_SCHEMA_M013_POOL):
        db.execute(statement)


# --- m014: the lead's desk: items, flags, question edits (labeler.labels.items, .flags) ----------

_SCHEMA_M014_ITEMS_FLAGS = """
ALTER TABLE queries ADD COLUMN discarded_at TEXT;
ALTER TABLE queries ADD COLUMN discard_reason TEXT;
CREATE INDEX queries_first_seen ON queries (first_seen);
CREATE TABLE question_edits (
    id INTEGER PRIMARY KEY,
    query_pk INTEGER NOT NULL,
    old TEXT NOT NULL,
    new TEXT NOT NULL,
    lead TEXT NOT NULL,
    note TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX question_edits_query ON question_edits (query_pk, id);
CREATE TABLE flag_resolutions (
    id INTEGER PRIMARY KEY,
    query_pk INTEGER NOT NULL,
    annotator TEXT NOT NULL,
    flag_reason TEXT,
    action TEXT NOT NULL CHECK (action IN ('edited', 'discarded', 'unflagged')),
    note TEXT,
    lead TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX flag_resolutions_item ON flag_resolutions (query_pk, annotator, id);
CREATE TABLE adjudication_requests (
    query_pk INTEGER PRIMARY KEY,
    lead TEXT NOT NULL,
    note TEXT,
    created_at TEXT NOT NULL
)
"""


@migrations()
def m014_items_flags(db: sqlite_utils.Database) -> None:
    """The lead's desk: a query a lead discarded (``discarded_at``, ``discard_reason``: it leaves the
    queue and the golden set), every edit of a question text with the text it replaced
    (``question_edits``: the first row's ``old`` is the original), every flag a lead resolved with
    the note the annotator sees (``flag_resolutions``), and items a lead sent to the Adjudication
    page (``adjudication_requests``). The new tables name queries by pk without a foreign key, so
    that removing a query never has to know about them."""
    for statement in _statements(_SCHEMA_M014_ITEMS_FLAGS):
        db.execute(statement)


# --- m015: undoing an ingest (labeler.ingest.undo) ----------------------------------------------

_SCHEMA_M015_UNDO = """
ALTER TABLE ingests ADD COLUMN undone_at TEXT;
ALTER TABLE ingests ADD COLUMN undone_by TEXT
"""


@migrations()
def m015_ingest_undo(db: sqlite_utils.Database) -> None:
    """When an ingest was undone and by whom (``labeler.ingest.undo``); an undone ingest's row stays
    as a record of what was loaded and removed."""
    for statement in _statements(_SCHEMA_M015_UNDO):
        db.execute(statement)


# --- m016: OpenAI Batch API runs (labeler.llm.batch) -------------------------------------------

_M016_LLM_BATCHES = [
    # One row per batch file: ``key`` is labeler's name for it (also the uploaded file's name and the
    # batch's metadata, so a file or batch whose id was never stored is found again), ``state`` is
    # 'building' (rows written, not uploaded), 'uploaded' (file id known, no batch yet) or the
    # batch's own status; counts and spend are the provider's and what collect stored.
    "CREATE TABLE llm_batches (key TEXT PRIMARY KEY, owner TEXT NOT NULL, run_id INTEGER NOT NULL, "
    "part INTEGER NOT NULL, model TEXT NOT NULL, config TEXT NOT NULL, requests INTEGER NOT NULL, "
    "bytes INTEGER NOT NULL DEFAULT 0, input_file_id TEXT, batch_id TEXT UNIQUE, state TEXT NOT NULL, "
    "completed INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0, output_file_id TEXT, "
    "error_file_id TEXT, error TEXT, collected INTEGER NOT NULL DEFAULT 0, collected_at TEXT, "
    "prompt_tokens INTEGER NOT NULL DEFAULT 0, completion_tokens INTEGER NOT NULL DEFAULT 0, cost REAL, "
    "created_at TEXT NOT NULL, updated_at TEXT NOT NULL)",
    "CREATE INDEX llm_batches_run ON llm_batches (owner, run_id)",
    # One row per request line: ``hash`` is the line's custom_id and its llm_calls key; ``request`` the
    # llm_calls request record (the line's body is rebuilt from it); ``state`` sent -> ok | failed |
    # retry (answered badly: retried once directly) | rest (never answered: expired or cancelled).
    "CREATE TABLE llm_batch_items (batch_key TEXT NOT NULL REFERENCES llm_batches (key), hash TEXT NOT NULL, "
    "state TEXT NOT NULL DEFAULT 'sent', request TEXT NOT NULL, PRIMARY KEY (batch_key, hash)) WITHOUT ROWID",
]


@migrations()
def m016_llm_batches(db: sqlite_utils.Database) -> None:
    """Batches sent to the OpenAI Batch API (``llm_batches``) and their request lines
    (``llm_batch_items``): enough to find, collect, cancel or re-send them from any process."""
    for statement in _M016_LLM_BATCHES:
        db.execute(statement)


# --- m017: redaction and sampling recorded on each ingest (labeler.privacy, ingest.sampling) --------

@migrations()
def m017_redaction(db: sqlite_utils.Database) -> None:
    """Each ingest records whether it redacted and how many values of each type
    (``redaction``: JSON ``{"on": bool, "counts": {TYPE: n}}``, never the values), how it sampled
    (``sample``: JSON ``{"rate"|"size", "seed"}`` or NULL) and how many records it saw. The
    database gets its own random key for the pseudonyms that replace values in ids."""
    import secrets

    for statement in ("ALTER TABLE ingests ADD COLUMN redaction TEXT",
                      "ALTER TABLE ingests ADD COLUMN sample TEXT",
                      "ALTER TABLE ingests ADD COLUMN records_seen INTEGER"):
        db.execute(statement)
    db.execute("INSERT OR IGNORE INTO settings (key, value) VALUES ('redact_key', ?)",
               [json.dumps(secrets.token_hex(32))])


# --- m018: sampling designs of the queue and all-traffic judge runs (labeler.estimate) ---------------

_SCHEMA_M018_SAMPLING_DESIGNS = """
CREATE TABLE queue_designs (
    query_pk INTEGER PRIMARY KEY REFERENCES queries (pk),
    design TEXT NOT NULL,
    inclusion_prob REAL,
    draw_id INTEGER,
    seed TEXT,
    annotator TEXT NOT NULL,
    handed_at TEXT NOT NULL
);
CREATE TABLE active_draws (
    id INTEGER PRIMARY KEY,
    judge_run INTEGER NOT NULL REFERENCES judge_runs (id),
    retriever TEXT NOT NULL,
    metric TEXT NOT NULL,
    budget REAL NOT NULL,
    seed INTEGER NOT NULL,
    population INTEGER NOT NULL,
    drawn INTEGER NOT NULL,
    params TEXT NOT NULL,
    created_by TEXT,
    created_at TEXT NOT NULL
);
CREATE TABLE active_draw_items (
    draw_id INTEGER NOT NULL REFERENCES active_draws (id),
    query_pk INTEGER NOT NULL REFERENCES queries (pk),
    uncertainty REAL NOT NULL,
    inclusion_prob REAL NOT NULL,
    drawn INTEGER NOT NULL,
    PRIMARY KEY (draw_id, query_pk)
) WITHOUT ROWID;
CREATE INDEX active_draw_items_drawn ON active_draw_items (draw_id, drawn, query_pk)
"""

_ON_SET_CHECK = "CHECK (on_set IN ('labeled', 'unlabeled'))"


@migrations()
def m018_sampling_designs(db: sqlite_utils.Database) -> None:
    """What the prediction-powered estimates need: ``queue_designs`` records, for every query the
    queue hands out, the design it was drawn under (the queue order, or ``active``) and its
    inclusion probability; ``active_draws``/``active_draw_items`` keep each seeded active draw (the
    probability of every traffic query and whether it was drawn); judge runs may cover ``all``
    traffic (the CHECK on ``judge_runs.on_set`` gains that value: rows already there satisfy it,
    so the stored schema text is edited in place, SQLite's documented way to loosen a CHECK)."""
    for statement in _statements(_SCHEMA_M018_SAMPLING_DESIGNS):
        db.execute(statement)
    sql = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'judge_runs'").fetchone()[0]
    loosened = sql.replace(_ON_SET_CHECK, "CHECK (on_set IN ('labeled', 'unlabeled', 'all'))")
    if loosened != sql:
        version = db.execute("PRAGMA schema_version").fetchone()[0]
        db.execute("PRAGMA writable_schema = ON")
        db.execute("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'judge_runs'", [loosened])
        db.execute(f"PRAGMA schema_version = {int(version) + 1}")
        db.execute("PRAGMA writable_schema = OFF")


# --- m019: topics (labeler.topics), the locked holdout (labeler.holdout) --------------------------

#: ``topic_models``: the current clustering of the logged questions (one row per build; the
#: newest is the current one), with what assigning new questions needs: the TF-IDF vocabulary, idf
#: weights and LSA projection (float32 bytes, dims x terms; or the embeddings model), the
#: L2-normalised centroids (float32 bytes, k x dims) and the similarity below which a question
#: counts as far from every topic. ``topics``: each
#: topic's label, top terms and medoid question. ``query_topics``: every query's topic under the
#: current model and its cosine similarity to the centroid (no foreign key: undoing an ingest may
#: delete queries; stale rows are ignored by joining on ``queries``). ``holdout_splits``: every
#: dev/holdout rule set (fraction, seed), the newest is in force; ``holdout_looks``: each time
#: someone evaluated on the holdout.
_M019_TOPICS_HOLDOUT = [
    "CREATE TABLE topic_models (id INTEGER PRIMARY KEY, created_at TEXT NOT NULL, by TEXT, method TEXT NOT NULL, "
    "k INTEGER NOT NULL, seed INTEGER NOT NULL, n_questions INTEGER NOT NULL, far_threshold REAL NOT NULL, "
    "dims INTEGER NOT NULL, params TEXT NOT NULL, vocabulary TEXT, idf BLOB, components BLOB, centroids BLOB NOT NULL)",
    "CREATE TABLE topics (model_id INTEGER NOT NULL REFERENCES topic_models (id), topic INTEGER NOT NULL, "
    "label TEXT NOT NULL, terms TEXT NOT NULL, medoid_query_pk INTEGER, size INTEGER NOT NULL, "
    "PRIMARY KEY (model_id, topic)) WITHOUT ROWID",
    "CREATE TABLE query_topics (query_pk INTEGER PRIMARY KEY, model_id INTEGER NOT NULL, topic INTEGER NOT NULL, "
    "similarity REAL NOT NULL)",
    "CREATE INDEX query_topics_topic ON query_topics (model_id, topic)",
    "CREATE TABLE holdout_splits (id INTEGER PRIMARY KEY, fraction REAL NOT NULL, seed INTEGER NOT NULL, "
    "created_at TEXT NOT NULL, by TEXT, forced INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE holdout_looks (id INTEGER PRIMARY KEY, at TEXT NOT NULL, by TEXT, split_id INTEGER, "
    "what TEXT NOT NULL, questions INTEGER NOT NULL)",
]


@migrations()
def m019_topics_signals_holdout(db: sqlite_utils.Database) -> None:
    """Topics of the logged questions and the dev/holdout split (see ``_M019_TOPICS_HOLDOUT``).
    Signals need no table: they are read, normalised, from the queries' ``meta``
    (``labeler.signals``)."""
    for statement in _M019_TOPICS_HOLDOUT:
        db.execute(statement)


# --- m021: the search index stores Porter stems (labeler.search.fts) ---------------------------

@migrations()
def m021_search_porter(db: sqlite_utils.Database) -> None:
    """Rebuild the corpus search index with the Porter stemmer (``porter unicode61 remove_diacritics
    2``): "retrieval", "retrieve" and "retrieved" become one term. On CISI, BM25 and the "possibly
    missed" fusion find more of the relevant chunks the retrievers missed with stems than with
    words (see tests/test_search.py). The pending queue is emptied: the rebuild reads every document.

    And a chunk's cached embedding goes when its text or title changes or the chunk is deleted:
    the embedding search would otherwise rank it by the words it no longer has."""
    db.execute("DROP TABLE IF EXISTS documents_fts_vocab")
    db.execute("DROP TABLE IF EXISTS documents_fts")
    db.execute("CREATE VIRTUAL TABLE documents_fts USING fts5(title, text, content='documents', content_rowid='pk', "
               "tokenize='porter unicode61 remove_diacritics 2')")
    db.execute("CREATE VIRTUAL TABLE documents_fts_vocab USING fts5vocab(documents_fts, 'row')")
    # a word in a chunk's title counts twice a word in its text (ORDER BY rank): on CISI, BM25
    # and the fusion find a little more of what the retrievers missed
    db.execute("INSERT INTO documents_fts (documents_fts, rank) VALUES ('rank', 'bm25(2.0, 1.0)')")
    db.execute("INSERT INTO documents_fts (rowid, title, text) SELECT pk, title, text FROM documents "
               "WHERE text IS NOT NULL")
    db.execute("DELETE FROM documents_fts_pending")
    db.execute("CREATE TRIGGER embeddings_stale AFTER UPDATE OF text, title ON documents "
               "WHEN old.text IS NOT new.text OR old.title IS NOT new.title BEGIN "
               "DELETE FROM embeddings WHERE doc_pk = old.pk; END")
    db.execute("CREATE TRIGGER embeddings_gone AFTER DELETE ON documents BEGIN "
               "DELETE FROM embeddings WHERE doc_pk = old.pk; END")


# --- m022: the stratified queue order (labeler.labels.strata) ------------------------------------

@migrations()
def m022_stratified(db: sqlite_utils.Database) -> None:
    """A hand-out under queue order ``stratified`` records its stratum (the query's topic, -2 when it
    had none yet; NULL for other designs) and the topic model the strata came from, so the
    all-traffic estimate can weight each stratum by its share of the traffic."""
    db.execute("ALTER TABLE queue_designs ADD COLUMN stratum INTEGER")
    db.execute("ALTER TABLE queue_designs ADD COLUMN topic_model INTEGER")


# --- m023: one collector per batch at a time (labeler.llm.batch_collect) ---------------------------

@migrations()
def m023_batch_collector(db: sqlite_utils.Database) -> None:
    """A process collecting a batch holds it (``collector``, a random token, until
    ``collecting_until``, renewed at each step): two collects at once would each retry the bad
    lines directly and re-send an expired batch's rest, paying twice."""
    db.execute("ALTER TABLE llm_batches ADD COLUMN collector TEXT")
    db.execute("ALTER TABLE llm_batches ADD COLUMN collecting_until TEXT")


# --- m024: live sources: trace stores synced incrementally (labeler.sources) ------------------------

_M024_SOURCES = [
    # One row per configured trace store. ``high_water``: spans that started before it (less the
    # overlap, re-read on every sync for spans that arrive late) are settled. A sync in progress
    # keeps its time window and the cursor of the next page to read, so a killed sync resumes
    # there. Never a key or secret: those come from the environment or .streamlit/secrets.toml.
    "CREATE TABLE sources (name TEXT PRIMARY KEY, kind TEXT NOT NULL, url TEXT NOT NULL, project TEXT, "
    "every_s REAL, overlap_s REAL NOT NULL DEFAULT 300, sample REAL, seed INTEGER NOT NULL DEFAULT 0, "
    "high_water TEXT, window_start TEXT, window_end TEXT, cursor TEXT, "
    "last_sync_at TEXT, last_ok_at TEXT, last_error TEXT, failures INTEGER NOT NULL DEFAULT 0, "
    "syncs INTEGER NOT NULL DEFAULT 0, spans INTEGER NOT NULL DEFAULT 0, queries_new INTEGER NOT NULL DEFAULT 0, "
    "last_new INTEGER, created_at TEXT NOT NULL, created_by TEXT)",
    # The retrievals a source's sample left out, so that reading the overlap again neither ingests
    # nor counts them (records seen) twice; pruned once they start before the overlap.
    "CREATE TABLE source_skipped (source TEXT NOT NULL REFERENCES sources (name) ON DELETE CASCADE, "
    "query_id TEXT NOT NULL, started TEXT, PRIMARY KEY (source, query_id)) WITHOUT ROWID",
]


@migrations()
def m024_sources(db: sqlite_utils.Database) -> None:
    """Live sources (``labeler source add``): a trace store (Phoenix, Langfuse, LangSmith) that
    ``labeler sync`` reads incrementally, with its high-water mark (time, and the window and cursor
    of a sync in progress), its last sync and error, and counts; ``source_skipped``: the retrievals its
    sample left out (not read again). Keys are never stored."""
    for statement in _M024_SOURCES:
        db.execute(statement)


# --- m025: grades pushed back to the sources (labeler.sources.push) --------------------------------

_M025_SOURCE_PUSHES = [
    # One row per annotation, score or feedback labeler sent to a source: ``target`` names what it is
    # on (``span:ID``, ``span:ID/doc:N``; a Langfuse observation or LangSmith run is its id too),
    # ``name`` the annotation's name. ``value_hash`` is the hash of the last value the source accepted
    # (NULL: never accepted), so a second push sends only what changed; ``error`` the last failure.
    "CREATE TABLE source_pushes (source TEXT NOT NULL, target TEXT NOT NULL, name TEXT NOT NULL, "
    "value_hash TEXT, remote_id TEXT, pushed_at TEXT, error TEXT, failed_at TEXT, "
    "PRIMARY KEY (source, target, name)) WITHOUT ROWID",
]


@migrations()
def m025_source_pushes(db: sqlite_utils.Database) -> None:
    """Grades pushed back (``labeler push``): what each source was sent and accepted, by target and
    annotation name, with the hash of the value, so a push is idempotent and a changed grade is
    sent again; a failed item keeps its error until a later push succeeds."""
    for statement in _M025_SOURCE_PUSHES:
        db.execute(statement)


# --- m026: routing live queries to the queue (labeler.labels.routing) ------------------------------

@migrations()
def m026_routing(db: sqlite_utils.Database) -> None:
    """Routing (``labeler route set``): one row per query that arrived from a live source while
    routing rules were set, deciding once whether it enters the labeling queue (``routed``), why
    (``signal``, ``new-topic``, ``quota``, ``sampled``, ``not-sampled``; ``pending`` from just before
    its ingest commits until it is decided), with the inclusion probability it was decided under
    (the rate in effect for its day), the day whose cap it counts against, its topic, the seed and
    the ingest that brought it; the queue leaves out the rows with ``routed = 0``."""
    db.execute("CREATE TABLE routing_decisions (query_pk INTEGER PRIMARY KEY REFERENCES queries (pk) "
               "ON DELETE CASCADE, routed INTEGER NOT NULL, inclusion_prob REAL NOT NULL, reason TEXT NOT NULL, "
               "day TEXT NOT NULL, topic INTEGER, seed INTEGER NOT NULL, decided_at TEXT NOT NULL, "
               "ingest_id INTEGER)")
    db.execute("CREATE INDEX routing_day ON routing_decisions (day, reason)")


# --- m027: judge alignment (rubric lineage, few-shot examples) and stress tests (labeler.judge) -------

_M027_JUDGE_ALIGN_STRESS = [
    "ALTER TABLE judge_rubrics ADD COLUMN parent INTEGER",
    "ALTER TABLE judge_rubrics ADD COLUMN examples TEXT",
    "ALTER TABLE judge_rubrics ADD COLUMN origin TEXT",
    "CREATE TABLE judge_checks (id INTEGER PRIMARY KEY, kind TEXT NOT NULL CHECK (kind IN ('stress', 'align')), "
    "judge TEXT NOT NULL, rubric TEXT NOT NULL, rubric_hash TEXT NOT NULL, model TEXT NOT NULL, temperature REAL, "
    "params TEXT NOT NULL, result TEXT NOT NULL, created_at TEXT NOT NULL, by TEXT)",
    "CREATE INDEX judge_checks_judge ON judge_checks (judge, kind, id)",
]


@migrations()
def m027_judge_align_stress(db: sqlite_utils.Database) -> None:
    """``labeler judge align`` and ``labeler judge stress``: a rubric version records the version it
    was derived from (``parent``), the few-shot examples it carries (``examples``, JSON) and how it
    was made (``origin``: ``align`` for a registered alignment candidate); ``judge_checks`` keeps
    every stress test and alignment with its parameters and result (JSON), which the calibration
    gate reads (a judge that obeys instructions planted in passages is refused)."""
    for statement in _M027_JUDGE_ALIGN_STRESS:
        db.execute(statement)


# --- m028: questions found by a 64-bit key of their text (queries.norm_key) ------------------------

def _m028_key(norm: str) -> int:
    # ingest.validate.question_key as released with this migration (a migration never imports live code)
    import hashlib

    return int.from_bytes(hashlib.blake2b(norm.encode(), digest_size=8).digest(), "big", signed=True)


@migrations()
def m028_question_keys(db: sqlite_utils.Database) -> None:
    """``queries.norm_key``: a 64-bit key of the normalized question (``ingest.validate.question_key``),
    indexed (``queries_norm_key``) in place of the normalized text itself (``queries_norm``,
    dropped). An ingest's new questions land all over that index and each short transaction
    writes every page it touched again: entries of 8 bytes instead of the whole text make the
    pages a fraction as many (a 100k-query ingest's writer: 0.3-0.6 s less). Lookups by text
    find the keys, then compare the text; a row written without a key (NULL) is still found."""
    db.execute("ALTER TABLE queries ADD COLUMN norm_key INTEGER")
    last = 0
    while True:  # in parts: memory stays flat however many questions there are
        rows = db.execute("SELECT pk, norm_question FROM queries WHERE pk > ? ORDER BY pk LIMIT 50000",
                          [last]).fetchall()
        if not rows:
            break
        db.conn.executemany("UPDATE queries SET norm_key = ? WHERE pk = ?", [(_m028_key(n), pk) for pk, n in rows])
        last = rows[-1][0]
    db.execute("CREATE INDEX queries_norm_key ON queries (norm_key)")
    db.execute("DROP INDEX IF EXISTS queries_norm")


# --- m029: question keys in a table of their own, written in sorted runs (query_keys) ------------

_M029_QUERY_KEYS = [
    "CREATE TABLE query_keys (norm_key INTEGER NOT NULL, query_pk INTEGER NOT NULL, "
    "PRIMARY KEY (norm_key, query_pk)) WITHOUT ROWID",
    "INSERT INTO query_keys (norm_key, query_pk) SELECT norm_key, pk FROM queries WHERE norm_key IS NOT NULL "
    "ORDER BY norm_key, pk",
    "DROP INDEX IF EXISTS queries_norm_key",
    # rows written without a key (by hand) are still found, through an index that is empty otherwise
    "CREATE INDEX queries_unkeyed ON queries (pk) WHERE norm_key IS NULL",
    # every writer's rows get their key here, but a log ingest's staged rows: the ingest adds those
    # itself, in sorted runs (``ingest.staging.Staging.key_queries``)
    "CREATE TRIGGER query_keys_insert AFTER INSERT ON queries WHEN new.norm_key IS NOT NULL AND new.ingest_id IS NULL "
    "BEGIN INSERT OR IGNORE INTO query_keys (norm_key, query_pk) VALUES (new.norm_key, new.pk); END",
    "CREATE TRIGGER query_keys_update AFTER UPDATE OF norm_key ON queries WHEN old.norm_key IS NOT new.norm_key "
    "BEGIN DELETE FROM query_keys WHERE norm_key = old.norm_key AND query_pk = old.pk; "
    "INSERT OR IGNORE INTO query_keys (norm_key, query_pk) SELECT new.norm_key, new.pk WHERE new.norm_key IS NOT NULL; "
    "END",
    "CREATE TRIGGER query_keys_delete AFTER DELETE ON queries WHEN old.norm_key IS NOT NULL "
    "BEGIN DELETE FROM query_keys WHERE norm_key = old.norm_key AND query_pk = old.pk; END",
    # a staged row someone started working with is kept when its ingest is discarded (ingest_id
    # set to NULL, or to another ingest's): it gets its key then, if the ingest had not added it
    "CREATE TRIGGER query_keys_kept AFTER UPDATE OF ingest_id ON queries WHEN new.norm_key IS NOT NULL "
    "BEGIN INSERT OR IGNORE INTO query_keys (norm_key, query_pk) VALUES (new.norm_key, new.pk); END",
]


@migrations()
def m029_query_keys(db: sqlite_utils.Database) -> None:
    """``query_keys``: the (question key, query) pairs, in place of the index on ``queries.norm_key``.
    The keys are random, so an ingest's questions landed all over that index, and each of its short
    transactions wrote again every index page it touched: at 1M queries the index was 4,400 pages
    and each 2,000-row transaction touched 1,600 of them (4.7 GB written for a 0.6 GB database).
    Other writers' rows get their key by trigger; a log ingest adds its own staged rows' keys in
    sorted runs of thousands (``ingest.staging.Staging.key_queries``), each touching each page once,
    all before its rows become visible."""
    for statement in _M029_QUERY_KEYS:
        db.execute(statement)

"""Writing validated log records: classify each against what is stored (new, merged, unchanged, a
conflict) and insert queries, versions, retrievals, log lines and documents.

Everything written is staged (``staging``): new rows carry the ingest's id and stay hidden until
the ingest commits; a change to a row that was already visible (one more occurrence of a query,
the text of a document logged without it) waits in ``ingest_occurrences`` / ``ingest_texts``.
Rows this ingest staged itself are private to it and are changed in place."""

from __future__ import annotations

import functools
import itertools
import json
import operator
import re
import sqlite3

import sqlite_utils

from .. import db as store
from .batches import Row, content_hash
from .common import IngestResult, Problem
from .validate import question_columns

PENDING_MAX = 200_000  # texts sent apart that wait for a written row (see LogWriter.add_texts)
MAX_PARAMS = 999  # parameters of one statement: SQLite's limit before 3.32, and far from the newer one


def insert_columns(conn: sqlite3.Connection, into: str, row: str, columns: list[list], shared: tuple = ()) -> None:
    """Insert rows with several to a statement, given column by column: ``into`` is the table and
    its columns (``t (a, b, c)``), ``row`` one row's values, ``?`` for each of ``columns`` in order
    and ``$1``, ``$2``, ... for the ``shared`` values, the same in every row and bound once per
    statement (``(?, $1, ?)``). ``executemany`` of one row at a time pays the sqlite3 module's cost
    of a statement (bind, step, reset) for every row, as much as SQLite's own insert for a narrow
    row; the parameters are laid out a column at a time by slice assignment (in C), not a tuple
    per row: a million retrievals go in 0.75 s this way, 1.05 s with the rows zipped and every
    value bound in every row, 1.15 s one row to a statement.

    ``OR FAIL``, not the default ``ABORT``: to undo just the failing statement, SQLite keeps every
    page a many-row statement changes in a statement journal, which past 64 KiB is a temporary
    file. The query indexes take inserts all over their pages (a question's key, a first-seen
    date), so a 100k-query ingest wrote 1.1-1.4 GB to such files for a 100 MB database (0.4-0.8 s
    of system time). Nothing needs the statement undone alone: an error ends the whole
    transaction (``staging.Staging.write`` rolls it back)."""
    width, rows = len(columns), len(columns[0]) if columns else 0
    if not rows:
        return
    flat: list = [None] * (rows * width)
    for k, column in enumerate(columns):
        flat[k::width] = column
    per = max(1, (MAX_PARAMS - len(shared)) // width)
    whole = rows - rows % per
    step = per * width
    if whole:
        conn.executemany(_statement(into, row, per, len(shared)),
                         (shared + tuple(flat[i:i + step]) for i in range(0, whole * width, step)))
    # the rest in statements of 128, 64, ..., 1 rows: a few shapes, each prepared once (a statement
    # of as many rows as were left, a new size in almost every transaction, was compiled each time:
    # the leftover query rows of 130 transactions took 0.10 s that way, 0.025 s this way)
    at, left = whole, rows - whole
    while left:
        size = 1 << (left.bit_length() - 1)
        conn.execute(_statement(into, row, size, len(shared)), shared + tuple(flat[at * width:(at + size) * width]))
        at += size
        left -= size


@functools.lru_cache(maxsize=64)
def _statement(into: str, row: str, rows: int, shared: int) -> str:
    """``insert_columns``' statement of ``rows`` rows: the shared values are ``?1``... and each
    row's own values are numbered after them."""
    pieces = re.split(r"(\?|\$\d+)", row)
    width = pieces.count("?")
    values = []
    for j in range(rows):
        own = iter(range(shared + 1 + j * width, shared + 1 + (j + 1) * width))
        values.append("".join(f"?{next(own)}" if piece == "?" else f"?{piece[1:]}" if piece.startswith("$") else piece
                              for piece in pieces))
    return f"INSERT OR FAIL INTO {into} VALUES " + ", ".join(values)


_QUESTION, _ANSWER, _TIMESTAMP = (operator.itemgetter(k) for k in ("question", "answer", "timestamp"))
_QUERY_ID, _LINE, _CONTENT_HASH = (operator.attrgetter(k) for k in ("query_id", "line", "content_hash"))


class LogWriter:
    """Writes validated log records batch by batch, each inside a short transaction of the caller."""

    def __init__(self, db: sqlite_utils.Database, path: str, result: IngestResult, ingest_id: int):
        self.db, self.path, self.result, self.ingest_id = db, path, result, ingest_id
        self.conn = db.conn
        self.created = store.now()
        # doc_id -> pk of the documents already resolved in this file, and the ones among them still
        # without text; bounded so memory stays flat
        self.doc_pk: dict[str, int] = {}
        self.no_text: set[str] = set()
        # given out by write() under the write lock, read again in each transaction (other writers
        # insert between them), so they need not be read back after each insert
        self.next_query_pk = self.next_doc_pk = 0
        self.all_resolved = True  # every row so far had its chunks resolved into doc_pk
        # texts and titles sent apart from the rows (``batches.parsed_batches(texts_apart=True)``),
        # waiting for a written row that retrieves their chunk
        self.pending: dict[str, tuple[str | None, str | None]] = {}

    def add_texts(self, texts: dict[str, tuple[str | None, str | None]]) -> None:
        """Texts (and titles) of chunks that a batch gives for the first time, sent apart from its
        rows. A text waits until a written row retrieves its chunk; at most ``PENDING_MAX`` wait
        (the oldest go first): only the chunks of rows that were not written (unchanged on a
        re-ingest, whose documents are stored already, or rejected) leave texts waiting."""
        pending = self.pending
        for cid, (text, title) in texts.items():
            old = pending.get(cid)
            if old is None or old[0] is None:
                pending[cid] = (text, title)
        if len(pending) > PENDING_MAX:
            for cid in list(itertools.islice(pending, len(pending) - PENDING_MAX)):
                del pending[cid]

    def _texts_of(self, rows: list[Row]) -> tuple[dict[str, tuple[str, str | None]], dict[str, str]]:
        """``({chunk id: (text, title)}, {chunk id: title})`` of the chunks of ``rows``: from the
        rows' own columns, or, with texts sent apart, taken from those waiting."""
        if self.pending:
            here = self.pending.keys() & set(itertools.chain.from_iterable(r.rec["ids"] for r in rows))
            given = [(cid, self.pending.pop(cid)) for cid in here]
            return ({cid: (t, ti) for cid, (t, ti) in given if t is not None},
                    {cid: ti for cid, (t, ti) in given if ti is not None})
        texts = {cid: (text, title) for r in rows if r.rec["texts"] is not None
                 for cid, text, title in zip(r.rec["ids"], r.rec["texts"], r.rec["titles"] or itertools.repeat(None),
                                                 strict=False)
                 if text is not None}
        titles = {cid: title for r in rows if r.rec["titles"] is not None
                  for cid, title in zip(r.rec["ids"], r.rec["titles"], strict=True) if title is not None}
        return texts, titles

    def _next_pk(self, table: str) -> int:
        # table is one of two fixed names, never user text
        return int(self.conn.execute(f"SELECT coalesce(max(pk), 0) + 1 FROM {table}").fetchone()[0])

    def _resolve_docs(self, rows: list[Row], candidates: list[str] | None) -> None:
        """Make ``doc_pk`` know every chunk of ``rows``: look up the unknown ids, insert the new
        documents (first seen first), and fill in the text of a document logged without it before.
        ``candidates``: a list (in first-seen order) known to hold every chunk id of ``rows`` that
        ``doc_pk`` may lack; None to check every id."""
        doc_pk, no_text = self.doc_pk, self.no_text
        if len(doc_pk) > 1_000_000:
            doc_pk.clear()
            no_text.clear()
            self.all_resolved = False
            candidates = None
        if candidates is None:
            candidates = dict.fromkeys(itertools.chain.from_iterable(r.rec["ids"] for r in rows))
        unknown = list(itertools.filterfalse(doc_pk.__contains__, candidates))
        if not unknown and not no_text and not self.pending:
            # every chunk is a document stored with its text: what the rows say of their texts
            # cannot change anything (chunks retrieved again and again, the common case)
            return
        # a chunk logged with text in one line and without in another keeps its text; a chunk
        # logged with a title but no text still names its new document
        texts, titles = self._texts_of(rows)
        if not unknown and not (texts and no_text):
            return
        lookup = unknown + [cid for cid in texts if cid in no_text]
        found: dict[str, bool] = {}  # doc_id -> stored without text
        staged: set[str] = set()  # found documents this ingest inserted (changed in place)
        if lookup:
            for pk, doc_id, missing, ingest_id in self.conn.execute(
                "SELECT pk, doc_id, text IS NULL, ingest_id FROM documents "
                "WHERE doc_id IN (SELECT value FROM json_each(?))",
                [json.dumps(lookup)],
            ):
                doc_pk[doc_id] = pk
                found[doc_id] = bool(missing)
                if ingest_id == self.ingest_id:
                    staged.add(doc_id)
        new = []  # the new documents' pks, ids, texts and titles
        for cid in unknown:
            if cid in found:
                continue
            pk = self.next_doc_pk
            self.next_doc_pk += 1
            text, title = texts.get(cid, (None, None))
            new.append((pk, cid, text, title if title is not None else titles.get(cid)))
            doc_pk[cid] = pk
            if text is None:
                no_text.add(cid)
        fill = [(t, ti, doc_pk[cid]) for cid, (t, ti) in texts.items() if found.get(cid) and cid in staged]
        later = [(self.ingest_id, doc_pk[cid], t, ti) for cid, (t, ti) in texts.items()
                 if found.get(cid) and cid not in staged]
        if new:
            insert_columns(self.conn, "documents (pk, doc_id, text, title, created_at, ingest_id)", "(?, ?, ?, ?, $1, $2)",
                           [list(column) for column in zip(*new, strict=True)], (self.created, self.ingest_id))
            self.result.documents_new += len(new)
        if fill:
            self.conn.executemany(
                "UPDATE documents SET text = ?, title = coalesce(title, ?) WHERE pk = ?", fill)
        if later:
            self.conn.executemany(
                "INSERT INTO ingest_texts (ingest_id, doc_pk, text, title) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING", later)
        self.result.documents_updated += len(fill) + len(later)
        for cid, missing in found.items():
            if missing and cid not in texts:
                no_text.add(cid)
            else:
                no_text.discard(cid)
        no_text.difference_update(texts)

    def write(self, batch: list[Row], problems: list[Problem], write: bool,
              fresh_ids: list[str] | None = None) -> list[tuple[int, Problem]]:
        """Classify each row as new/merged/unchanged or a conflict; write when ``write`` is true.
        ``fresh_ids``: the chunk ids of ``batch`` that no earlier batch of the file had."""
        conn = self.conn
        if write:
            self.next_query_pk = self._next_pk("queries")
            self.next_doc_pk = self._next_pk("documents")
        ids = list({r.query_id for r in batch})
        existing: dict[str, tuple[int, str]] = {}
        staged: set[int] = set()  # pks of the existing queries this ingest inserted
        for pk, qid, q, ingest_id in conn.execute(
                "SELECT pk, query_id, question, ingest_id FROM queries WHERE query_id IN (SELECT value FROM json_each(?))",
                [json.dumps(ids)]):
            existing[qid] = (pk, q)
            if ingest_id == self.ingest_id:
                staged.add(pk)
        versions: dict[tuple[int, str], tuple[str, str]] = {}
        if existing:
            for pk, retriever, chash, source in conn.execute(
                "SELECT query_pk, retriever, content_hash, source FROM query_versions "
                "WHERE query_pk IN (SELECT value FROM json_each(?))",
                [json.dumps([v[0] for v in existing.values()])],
            ):
                versions[(pk, retriever)] = (chash, source)
        seen_keys: set[str] = set()
        keyed = [r.line_key for r in batch if r.line_key]
        if keyed:
            seen_keys = {k for (k,) in conn.execute(
                "SELECT line_key FROM log_lines WHERE line_key IN (SELECT value FROM json_each(?))",
                [json.dumps(keyed)])}
        rejected: list[tuple[int, Problem]] = []
        pending_versions: dict[tuple[str, str], tuple[str, str]] = {}
        batch_questions: dict[str, str] = {}
        new_queries: list[Row] = []
        new_versions: list[Row] = []
        new_lines: list[Row] = []
        bumps: list[Row] = []  # rows that add one occurrence to an existing query
        for r in batch:
            rec = r.rec
            known = existing.get(r.query_id)
            vkey = (r.query_id, rec["retriever"])
            prior = pending_versions.get(vkey)
            if prior is None and known is not None:
                prior = versions.get((known[0], rec["retriever"]))
            if prior is not None:
                if prior[0] != r.content_hash and prior[0] != content_hash(rec, exact=True):
                    rejected.append((r.line, Problem(
                        self.path, r.line, "query_id",
                        f"{r.query_id!r} was already ingested from {prior[1]} with different content "
                        "(question, answer or retrieved list); give it a new query_id")))
                elif r.line_key is None or r.line_key in seen_keys:
                    self.result.unchanged += 1
                else:
                    seen_keys.add(r.line_key)
                    new_lines.append(r)
                    bumps.append(r)
                    self.result.merged += 1
                continue
            question = known[1] if known is not None else batch_questions.get(r.query_id)
            if question is not None and question != rec["question"]:
                rejected.append((r.line, Problem(self.path, r.line, "query_id",
                                 f"{r.query_id!r} already exists with another question")))
                continue
            pending_versions[vkey] = (r.content_hash, f"{self.path}:{r.line}")
            new_versions.append(r)
            if r.line_key is not None:
                seen_keys.add(r.line_key)
                new_lines.append(r)
            if question is None:
                batch_questions[r.query_id] = rec["question"]
                new_queries.append(r)
                self.result.new += 1
            else:
                self.result.merged += 1
                if r.line_key is not None:
                    bumps.append(r)
        if not write:
            self.all_resolved = False
            return rejected
        first_new = self.next_query_pk
        if new_queries:
            first = self.next_query_pk
            self.next_query_pk += len(new_queries)
            recs = [r.rec for r in new_queries]
            questions = list(map(_QUESTION, recs))
            norms = [r.norm or question_columns(q) for r, q in zip(new_queries, questions, strict=True)]
            stamps = list(map(_TIMESTAMP, recs))
            insert_columns(
                conn, "queries (pk, query_id, question, norm_question, norm_key, answer, first_seen, last_seen, meta, "
                "source, origin, occurrences, created_at, ingest_id)",
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, $1 || ?, 'log', 1, $2, $3)",
                [list(range(first, first + len(new_queries))), list(map(_QUERY_ID, new_queries)), questions,
                 [n[0] for n in norms], [n[1] for n in norms], list(map(_ANSWER, recs)), stamps, stamps,
                 [store.dumps(rec["meta"]) if rec["meta"] else None for rec in recs],
                 list(map(_LINE, new_queries))],
                (f"{self.path}:", self.created, self.ingest_id))
            pks = {r.query_id: pk for pk, r in enumerate(new_queries, first)}
        else:
            pks = {}
        pks.update((qid, v[0]) for qid, v in existing.items())
        if len(new_versions) < len(batch):
            # a row left out (rejected, or unchanged) must not make documents of its chunks, and
            # ids it retrieved first are not resolved: from here on every id is checked
            self.all_resolved = False
        if new_versions:
            # while every earlier row of the file had its chunks resolved, an id no earlier batch
            # had is the only kind doc_pk can lack: check just those
            self._resolve_docs(new_versions, fresh_ids if self.all_resolved else None)
            docs = self.doc_pk
        if new_versions:
            version_pks = [pks[r.query_id] for r in new_versions]
            insert_columns(conn, "query_versions (query_pk, retriever, content_hash, source, ingest_id)",
                           "(?, ?, ?, $1 || ?, $2)",
                           [version_pks, [r.rec["retriever"] for r in new_versions],
                            list(map(_CONTENT_HASH, new_versions)), list(map(_LINE, new_versions))],
                           (f"{self.path}:", self.ingest_id))
            # the rows are given as columns, each made in C rather than row by row
            lengths = [len(r.rec["ids"]) for r in new_versions]
            chain, repeat = itertools.chain.from_iterable, itertools.repeat
            columns = [list(chain(map(repeat, version_pks, lengths))),
                       list(chain(map(range, repeat(1), [n + 1 for n in lengths]))),
                       list(map(docs.__getitem__, chain(r.rec["ids"] for r in new_versions))),
                       list(chain(r.rec["scores"] for r in new_versions))]
            retrievers = {r.rec["retriever"] for r in new_versions}
            into = "retrievals (query_pk, rank, doc_pk, score, retriever, ingest_id)"
            if len(retrievers) == 1:
                insert_columns(conn, into, "(?, ?, ?, ?, $1, $2)", columns, (retrievers.pop(), self.ingest_id))
            else:
                columns.append(list(chain(map(repeat, [r.rec["retriever"] for r in new_versions], lengths))))
                insert_columns(conn, into, "(?, ?, ?, ?, ?, $1)", columns, (self.ingest_id,))
            self.result.retrievals += sum(lengths)
        if new_lines:
            conn.executemany("INSERT INTO log_lines (line_key, query_pk, ingest_id) VALUES (?, ?, ?)",
                             [(r.line_key, pks[r.query_id], self.ingest_id) for r in new_lines])
        # one more occurrence: in place for this ingest's own queries, else waiting for the commit
        # (min/max ignoring NULL and the first answer combine in any order, so the result is the same)
        mine = [(r.rec["timestamp"], r.rec["answer"], pks[r.query_id]) for r in bumps if pks[r.query_id] in staged
                or pks[r.query_id] >= first_new]
        if mine:
            conn.executemany(
                "UPDATE queries SET occurrences = occurrences + 1, "
                "first_seen = CASE WHEN first_seen IS NULL OR ?1 < first_seen THEN ?1 ELSE first_seen END, "
                "last_seen = CASE WHEN last_seen IS NULL OR ?1 > last_seen THEN ?1 ELSE last_seen END, "
                "answer = coalesce(answer, ?2) WHERE pk = ?3", mine)
        if len(mine) < len(bumps):
            conn.executemany(
                "INSERT INTO ingest_occurrences (ingest_id, query_pk, occurrences, first_seen, last_seen, answer) "
                "VALUES (?4, ?3, 1, ?1, ?1, ?2) ON CONFLICT (ingest_id, query_pk) DO UPDATE SET "
                "occurrences = occurrences + 1, "
                "first_seen = CASE WHEN first_seen IS NULL OR ?1 < first_seen THEN ?1 ELSE first_seen END, "
                "last_seen = CASE WHEN last_seen IS NULL OR ?1 > last_seen THEN ?1 ELSE last_seen END, "
                "answer = coalesce(answer, ?2)",
                [(r.rec["timestamp"], r.rec["answer"], pks[r.query_id], self.ingest_id) for r in bumps
                 if not (pks[r.query_id] in staged or pks[r.query_id] >= first_new)])
        return rejected



def stored_query_ids(db: sqlite_utils.Database, query_ids: list[str]) -> set[str]:
    """Which of ``query_ids`` are stored and visible (a live sync leaves those out: re-reading its
    overlap window then writes nothing and makes no empty ingest)."""
    if not query_ids:
        return set()
    return {qid for (qid,) in db.execute(
        f"SELECT q.query_id FROM queries q WHERE q.query_id IN (SELECT value FROM json_each(?)) AND {store.visible('q')}",
        [json.dumps(query_ids)])}

"""Session state and the database handle: the one owner of ``st.session_state`` keys.

The database path comes from the LABELER_DB environment variable (set by ``labeler app``).
Each script-run thread holds its own SQLite connection while it runs (Streamlit reruns on new
threads and sessions run concurrently), so one session's transaction never interleaves with
another's; a finished thread's connection is reused by the next one, caches and all.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

import labeler

# session_state keys, named in one place
ANNOTATOR = "annotator"  # the signed-in annotator's name
PASSWORD_OK = "password_ok"  # the shared password was entered in this session
SESSION_TOKEN = "session_token"  # this browser's sign-in session (its hash is in the sessions table)
SESSION_COOKIE = "session_cookie"  # the session token this browser keeps as a cookie (made by a sign-in)
SET_COOKIE = "set_cookie"  # write (or clear) the session cookie on the next run
SIGNIN_ERROR = "signin_error"  # why the last sign-in was refused
NEW_LINK = "new_link"  # (name, token) of a sign-in link just made on Settings, shown once
CURRENT = "current_item"  # query pk on the Label page
GRADER_ACKS = "grader_acks"  # {"client|item": seq}: grade events applied for the grading widget
GRADER_NOTES = "grader_notes"  # {"refused"/"rejected": [[client, item, seq, why]]} for the widget
SHOWN_AT = "shown_at"  # monotonic time the current item was shown (seconds spent)
SPENT = "spent"  # [(query pk, seconds)] measured on the Label page, not yet written
LABEL_ERROR = "label_error"  # a LabelerError raised in a callback, shown on the next run
FLAG_ERROR = "flag_error"  # why flagging failed, shown next to the flag reason box
NOTICE = "notice"  # a one-off message ("Submitted", "Nothing left")
INGEST_RESULT = "ingest_result"
UNDO_CONFIRM = "undo_pending"  # the ingest id whose undo the Data page asks to confirm
UNDO_RESULT = "undo_done"  # the summary line of the last undo on the Data page
SYNC_RESULT = "sync_result"  # what the Data page's last "Sync now" did ({"results": [...]} or {"error": ...})
OPEN_QUERY = "open_query"  # a query pk another page asked the Label page to open
LEAD_ERROR = "lead_error"  # a LabelerError raised by a lead's action on the Items page or the lead view
LEAD_NOTICE = "lead_notice"  # what the lead's last action did ("Sent back to bob")
ITEMS_PAGE = "items_page"  # the page number of the Items table
ITEMS_OPEN = "items_open"  # a query pk a button on the Items page asked to open in the lead view
LABEL_MOVES = "label_moves"  # the Label page's LabelMoves: where its last callback sent it (see there)
MISSED = "possibly_missed"  # (search.missed_key + embeddings model, hits) of the Label page's panel
ITEM_PARAM = "item"  # URL query parameter: the query pk the Label page opens in the lead view (leads only)


def lead_item() -> int | None:
    """The query pk in the URL's ``?item=`` (the Label page's lead view), or None."""
    value = st.query_params.get(ITEM_PARAM)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Move:
    """Where a Label page callback sends the page: the item ``to`` (None: nothing left), for
    ``annotator``, with what to say and the seconds spent on the item left (query pk, seconds)."""

    annotator: str
    to: int | None
    notice: str | None = None
    error: str | None = None
    spent: tuple[int, float] | None = None


class LabelMoves:
    """The Label page's moves from item to item, shared by every script-run thread of one browser
    session (one object in its session state, changed in place).

    Streamlit answers each rerun request with a new script-run thread (``runner.fastReruns``) while
    the thread before may still be inside a callback, e.g. handing out the next item behind another
    writer's lock; that older thread's next ``st.session_state`` access raises StopException. Had
    it leased the next item and then been stopped before it stored the pk in the session, the
    newer run drew the item just submitted, and the page stayed there until a reload. So a
    callback reads what it needs from the session first, then does its database work holding
    ``lock`` without touching the session, and puts the outcome in ``pending``; the page (in that
    thread, or in the next run, which waits for ``lock``) shows it and clears it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.pending: Move | None = None

    def put(self, move: Move) -> None:
        with self.lock:
            self.pending = move

    def peek(self) -> Move | None:
        """The move still to show; waits while a callback (of any run) holds the lock."""
        with self.lock:
            return self.pending

    def done(self, move: Move) -> None:
        with self.lock:
            if self.pending is move:
                self.pending = None


_MOVES_LOCK = threading.Lock()


def label_moves() -> LabelMoves:
    """This browser session's ``LabelMoves`` (made by its first run)."""
    with _MOVES_LOCK:  # two threads of one session never make two
        moves = st.session_state.get(LABEL_MOVES)
        if moves is None:
            moves = st.session_state[LABEL_MOVES] = LabelMoves()
    return moves


class _Connections:
    """One connection per running thread, handed on when the thread ends. Streamlit starts a new
    thread for nearly every rerun: a connection opened per thread would start each rerun with a
    cold page cache and none of what is kept per connection (the corpus sample and vocabulary of
    the Possibly missed panel: 0.1-0.4 s to rebuild, on the rerun that the next Enter waits for).
    A connection is used by one thread at a time; a finished thread's connection goes to the next
    thread that asks (``labeler.connect`` opens it with ``check_same_thread=False``)."""

    def __init__(self, path: str):
        self.path = path
        labeler.connect(path).conn.close()  # create the file and migrate once
        self.lock = threading.Lock()
        self.held: dict[threading.Thread, object] = {}
        self.free: list = []

    def get(self):
        me = threading.current_thread()
        db = self.held.get(me)
        if db is not None:
            return db
        with self.lock:
            for thread in [t for t in self.held if not t.is_alive()]:
                self.free.append(self.held.pop(thread))
            db = self.free.pop() if self.free else None
            if db is None:
                db = labeler.connect(self.path, migrate=False)
            elif db.conn.in_transaction:  # a thread killed mid-write: never hand its transaction on
                db.conn.rollback()
            self.held[me] = db
        return db


@st.cache_resource
def _connections(path: str) -> _Connections:
    return _Connections(path)


class _Warmer:
    """Computes the Metrics page's default report (and the Items page's conflicting items) in a
    background thread, so that the first visit
    after a server start (or an ingest) finds it ready; later label changes are patched in on
    demand, cheaply, so nothing runs in the background while people label."""

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        with self.lock:
            if self.thread is not None and self.thread.is_alive():
                return
            self.thread = threading.Thread(target=self._run, name="labeler-warm-metrics", daemon=True)
            self.thread.start()

    def _run(self) -> None:
        from labeler import labels, report
        from labeler.search import latent

        db = labeler.connect(self.path, migrate=False)
        try:
            report.prepare(db)
            labels.conflicting_items(db)  # the Items page's conflict filter (kept per database)
            latent.warm(db)  # the Possibly missed panel's latent space (kept per database file)
        except Exception as e:  # noqa: BLE001 - a warm-up only; the page shows any error itself
            logging.getLogger(__name__).warning("computing the Metrics page in the background failed: %s", e)
        finally:
            db.conn.close()


@st.cache_resource
def _warmer(path: str) -> _Warmer:
    warmer = _Warmer(path)
    if os.environ.get("LABELER_WARM_METRICS", "1") != "0":
        warmer.start()  # once per server process and database
    return warmer


def warm_metrics(again: bool = False) -> None:
    """Start computing the Metrics page's default report in the background (once per server; again
    with ``again=True``, e.g. after an ingest). ``LABELER_WARM_METRICS=0`` turns this off."""
    warmer = _warmer(db_path())
    if again and os.environ.get("LABELER_WARM_METRICS", "1") != "0":
        warmer.start()


class _Syncer:
    """Syncs the live sources that have an interval (``labeler source add --every``) whenever it is
    due, from a background thread of the app's server. Each sync runs as ``labeler sync NAME`` in a
    child process at a lower CPU priority: a sync is an ingest (parsing, redaction, writing), and
    in the server's own process it would hold the interpreter (and switch off its garbage
    collector) while the annotators' pages wait for it."""

    POLL_S = 15.0
    NICE = 10  # the child's CPU priority below the server's (POSIX; nothing elsewhere)
    TIMEOUT_S = 6 * 3600.0  # a sync that has not finished by then is stopped (it resumes next time)

    def __init__(self, path: str):
        self.path = path
        self.thread = threading.Thread(target=self._run, name="labeler-sync-sources", daemon=True)

    def once(self) -> list:
        """Sync the sources that are due, each in a child process; their results (``SyncResult``;
        errors are kept on each source too)."""
        from labeler import sources
        from labeler.sources.sync import SyncResult, is_due

        db = labeler.connect(self.path, migrate=False)
        try:
            due = [s.name for s in sources.list_sources(db) if is_due(s)]
        finally:
            db.conn.close()
        results = []
        for name in due:
            # `python -m labeler ...` with its priority lowered first (no preexec_fn: unsafe in a
            # process with threads, as the server is)
            cmd = [sys.executable, "-c", _NICE_LABELER.format(nice=self.NICE), "--db", self.path, "sync", name, "--json"]
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=self.TIMEOUT_S)
            try:
                results += [SyncResult(**row) for row in json.loads(run.stdout or "[]")]
            except (ValueError, TypeError):  # no JSON: the command failed before syncing
                results.append(SyncResult(name, "", ok=False, error=(run.stderr or run.stdout).strip()[-500:]))
        return results

    def _run(self) -> None:
        log = logging.getLogger(__name__)
        while True:
            try:
                for r in self.once():
                    log.info("background sync: %s", r.summary())
            except Exception as e:  # noqa: BLE001 - a background job: the Data page shows each source's error
                log.warning("background sync failed: %s", e)
            time.sleep(self.POLL_S)


_NICE_LABELER = ("import os, runpy\nif hasattr(os, 'nice'):\n    os.nice({nice})\n"
                 "runpy.run_module('labeler', run_name='__main__', alter_sys=True)")


@st.cache_resource
def _syncer(path: str) -> _Syncer:
    syncer = _Syncer(path)
    syncer.thread.start()
    return syncer


def sync_in_background() -> None:
    """Run the configured syncs at their intervals in the background (once per server and database).
    ``LABELER_BACKGROUND_SYNC=0`` turns this off."""
    if os.environ.get("LABELER_BACKGROUND_SYNC", "1") != "0":
        _syncer(db_path())


_REUSED: dict[tuple, tuple[Any, Any]] = {}  # (function, database file) -> (data token, value)
_REUSED_LOCK = threading.Lock()


def reused(fn: Callable[[Any], Any], db) -> Any:
    """``fn(db)``, read again only after something was committed to the database file (by any
    connection or process): pages call such counts on every rerun, widget clicks included. The
    latest value per function and file is kept; each caller gets its own copy."""
    from labeler import report

    token = report.data_token(db)
    key = (fn.__module__, fn.__qualname__, None if token is None else token[0])
    with _REUSED_LOCK:
        hit = _REUSED.get(key)
    if token is not None and hit is not None and hit[0] == token:
        return copy.deepcopy(hit[1])
    value = fn(db)
    if token is not None:
        with _REUSED_LOCK:
            _REUSED[key] = (token, copy.deepcopy(value))
    return value


def superseded() -> Callable[[], bool]:
    """A check that turns true once this script run is no longer wanted: Streamlit (``fastReruns``)
    starts a newer run for the same page at the next click or key and asks this one to stop, but a
    run inside a long SQLite statement only notices at its next ``st`` call. Always false where
    Streamlit does not say (outside a script run, or a Streamlit that keeps it elsewhere)."""
    try:
        from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType
        from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
    except ImportError:
        return lambda: False
    requests = getattr(get_script_run_ctx(), "script_requests", None)
    if requests is None or not hasattr(requests, "_state"):
        return lambda: False
    return lambda: requests._state != ScriptRequestType.CONTINUE


def db_path() -> str:
    """The database file, resolved (LABELER_DB, relative to the working folder)."""
    raw = os.environ.get("LABELER_DB", "labeler.db")
    return _resolved(raw, "" if os.path.isabs(raw) else os.getcwd())


@functools.lru_cache(maxsize=64)
def _resolved(raw: str, cwd: str) -> str:
    # every get_db() asks, many times a run: Path.resolve() walks the path with a system call per
    # part (a fifth of a Label page rerun's samples when profiled)
    return str(Path(cwd, raw).resolve())


def get_db():
    """The labeler database for this script run (a connection owned by the current thread)."""
    return _connections(db_path()).get()


def settings() -> dict:
    """The project settings (grade names, threshold, guidelines, ...), read once per run."""
    return labeler.get_settings(get_db())


def secrets():
    """``st.secrets`` when a secrets.toml exists, else None (then the environment alone counts)."""
    try:
        found = st.secrets
        found.get("OPENAI_API_KEY")  # parses the file; raises when there is none
        return found
    except Exception:
        return None


def llm_config(model: str | None = None):
    """The LLM endpoint from the environment or secrets.toml (the key is never shown or stored)."""
    from labeler import llm

    return llm.LLMConfig.from_env(secrets(), model=model or None)

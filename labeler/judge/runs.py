"""Judge runs: running through ``labeler.llm`` (cache, concurrency, retries, estimate, cancel),
resuming, the stability check, and judging new answers with a calibrated run (which items a run
covers: ``items``)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sqlite_utils

from .. import db as store
from .. import owners
from ..accounts.manage import require
from ..errors import JudgeError, LabelerError
from ..llm.batch import local as batch_local
from ..llm.batch import store as batch_store
from ..llm.batch import submitting as batch_submitting
from ..llm.cache import estimate as estimate_cost
from ..llm.client import LLMConfig, Progress, Task
from ..llm.direct import run_tasks
from .grading import scale_of
from .items import load_items, select_items
from .registry import Judge, JudgeItem, get_judge, get_rubric
from .store import JudgeRun, get_run

# --- running ----------------------------------------------------------------------------------------------

class _AnyEvent(threading.Event):
    """Set when it or any of ``others`` is set (run_tasks only asks ``is_set()``)."""

    def __init__(self, *others: threading.Event | None) -> None:
        super().__init__()
        self.others = [o for o in others if o is not None]

    def is_set(self) -> bool:
        return super().is_set() or any(o.is_set() for o in self.others)


def _tasks(judge: Judge, items: list[JudgeItem], rubric: str, settings: dict[str, Any],
           nonce: int | None = None) -> tuple[list[Task], list[tuple[str, str]]]:
    schema = judge.schema(settings)
    params = {"seed": int(nonce)} if nonce is not None else {}
    tasks, skipped = [], []
    for item in items:
        if judge.unit == "pair" and not (item.text or "").strip():
            skipped.append((item.key, "the chunk has no text (ingest the corpus file with its text)"))
        elif judge.unit == "query" and not (item.answer or "").strip():
            skipped.append((item.key, "the query has no production answer"))
        else:
            tasks.append(Task(item.key, judge.messages(item, rubric, settings), schema, dict(params)))
    return tasks, skipped


def _execute(db: sqlite_utils.Database, config: LLMConfig, run: JudgeRun, judge: Judge, rubric: str,
             items: list[JudgeItem], progress: Callable[[Progress], None] | None,
             cancel: threading.Event | None, *, cached_only: bool = False) -> JudgeRun:
    settings = run.params["scale"]
    tasks, skipped = _tasks(judge, items, rubric, settings)
    stop = _AnyEvent(cancel)
    interrupted: list[BaseException] = []

    def report(p: Progress) -> None:
        if progress is None or interrupted:
            return
        try:
            progress(p)
        except BaseException as e:  # e.g. Streamlit's rerun on a click: stop, store, then re-raise
            interrupted.append(e)
            stop.set()

    try:
        summary = run_tasks(db, config, tasks, progress=report, cancel=stop, cached_only=cached_only)
    except LabelerError as e:
        with store.transaction(db):
            db.execute("UPDATE judge_runs SET status = 'failed', error = ?, finished_at = ? WHERE id = ?",
                       [str(e), store.now(), run.id])
        raise
    spent = None
    if cached_only:  # a batch run read back: its answers were paid for by its batches
        summary.done, summary.cached = summary.cached, 0
        spent = batch_store.run_spend(db, "judge", run.id)[:3]
        # a run resumed as a batch is read back again: count only what its batches spent since
        counted = run.params.get("batch_spend") or [0, 0, None]
        summary.prompt_tokens, summary.completion_tokens = spent[0] - counted[0], spent[1] - counted[1]
        summary.cost = None if spent[2] is None else spent[2] - (counted[2] or 0)
    at = store.now()
    ok_rows, failed_rows = [], []
    for t in tasks:
        answer = summary.results.get(t.key)
        q, d = map(int, t.key.split(":"))
        if answer is not None:
            v = judge.parse(answer, settings)
            ok_rows.append([v.grade, v.score, v.label, v.rationale,
                            store.dumps(v.detail) if v.detail is not None else None,
                            summary.hashes.get(t.key), at, run.id, q, d])
    reasons = dict(summary.failed) | dict(skipped)
    for key, reason in reasons.items():
        q, d = map(int, key.split(":"))
        failed_rows.append([reason, summary.hashes.get(key), at, run.id, q, d])
    with store.transaction(db):
        db.conn.executemany(
            "UPDATE judge_labels SET status = 'ok', grade = ?, score = ?, label = ?, rationale = ?, detail = ?, "
            "call_hash = ?, error = NULL, updated_at = ? WHERE run_id = ? AND query_pk = ? AND doc_pk = ?", ok_rows)
        db.conn.executemany(
            "UPDATE judge_labels SET status = 'failed', error = ?, call_hash = ?, updated_at = ? "
            "WHERE run_id = ? AND query_pk = ? AND doc_pk = ?", failed_rows)
        counts = dict(db.execute("SELECT status, count(*) FROM judge_labels WHERE run_id = ? GROUP BY status",
                                 [run.id]).fetchall())
        status = "cancelled" if counts.get("pending") else "done"
        db.execute(
            "UPDATE judge_runs SET status = ?, done = done + ?, cached = cached + ?, failed = ?, cancelled = ?, "
            "prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ?, "
            "cost = CASE WHEN ? IS NULL THEN cost ELSE coalesce(cost, 0) + ? END, finished_at = ?, error = NULL "
            "WHERE id = ?",
            [status, summary.done, summary.cached, counts.get("failed", 0), counts.get("pending", 0),
             summary.prompt_tokens, summary.completion_tokens, summary.cost, summary.cost, at, run.id])
        if spent is not None:
            db.execute("UPDATE judge_runs SET params = json_set(params, '$.batch_spend', json(?)) WHERE id = ?",
                       [store.dumps(list(spent)), run.id])
        if run.on_set == "unlabeled" and judge.kind == "relevance":
            db.execute(
                "INSERT INTO suggestions (query_pk, doc_pk, run_id, grade, rationale, created_at) "
                "SELECT query_pk, doc_pk, run_id, grade, rationale, ? FROM judge_labels "
                "WHERE run_id = ? AND status = 'ok' AND grade IS NOT NULL ON CONFLICT (query_pk, doc_pk) DO UPDATE "
                "SET run_id = excluded.run_id, grade = excluded.grade, rationale = excluded.rationale, "
                "created_at = excluded.created_at", [at, run.id])
    result = get_run(db, run.id)
    result.failures = list(reasons.items())
    if interrupted:
        raise interrupted[0]
    return result


def run_judge(db: sqlite_utils.Database, config: LLMConfig, judge: str, *, on: str = "labeled",
              limit: int | None = None, rubric: int | str | None = None, seed: int = 0, max_chunks: int = 10,
              calibration_run: int | None = None, progress: Callable[[Progress], None] | None = None,
              cancel: threading.Event | None = None, dry_run: bool = False, by: str | None = None,
              batch: bool = False, batch_file: str | Path | None = None) -> JudgeRun:
    """Run ``judge`` over the labeled (calibrate) or unlabeled (pre-label) items; return the run.

    A paid LLM job: ``by`` (the signed-in account) must be a lead or allowed to run LLM jobs
    (``None`` is the local operator); a dry run is free.

    ``rubric``: a version number or name (default the latest). ``limit``: a seeded sample of that
    many items. ``dry_run``: nothing is sent or stored; the run carries ``estimate`` (tokens and
    cost of the requests not already cached). ``on="unlabeled"`` needs a calibration run of the
    same judge, rubric, model and temperature that passes the gate (``calibration_run``, or the
    newest passing one); raises GateError otherwise; the grades of a relevance run become
    suggestions. ``on="all"`` (every logged query, for ``labeler metrics --all-traffic``) runs
    whatever the gate says: the estimate corrects the judge's bias with the human labels; its
    grades never become suggestions. ``progress``/``cancel`` as in ``run_tasks``: a cancelled run keeps what was
    done, has status ``cancelled`` and can be finished with ``resume_run``. A progress callback that
    raises (Streamlit's rerun) cancels the same way and the exception is re-raised after storing.

    ``batch``: hand the requests to the Batch API (``labeler.llm.batch``) and return at once with
    status ``submitted`` and the batch ids; ``labeler llm collect`` stores the answers and finishes
    the run (requests already cached are not sent; when nothing is left to send the run finishes now).
    ``batch_file``: the same, but the request lines are written to this file for a local runner
    (``vllm run-batch``) instead of being sent (:mod:`labeler.llm.batch.local`); ``labeler llm
    collect --file RESULTS`` stores its output and finishes the run.
    """
    j = get_judge(judge)
    r = get_rubric(db, judge, rubric)
    scale = scale_of(db)
    items = select_items(db, j, on=on, limit=limit, seed=seed, max_chunks=max_chunks)
    params = {"seed": seed, "limit": limit, "max_chunks": max_chunks, "scale": scale}
    if batch or batch_file is not None:
        params["engine"] = "batch"
    run = JudgeRun(None, j.name, j.kind, r.name, r.hash, config.model, config.temperature, on, "dry_run",
                   items=len(items), params=params)
    if dry_run:
        tasks, _ = _tasks(j, items, r.text, scale)
        run.estimate = estimate_cost(db, config, tasks)
        return run
    require(db, by, "llm", "running a judge")
    if not items:
        raise JudgeError(f"no {on} items for {j.name}: "
                         + {"labeled": "label and submit some queries first", "unlabeled": "everything is labeled",
                            "all": "ingest logs first"}[on])
    if on == "unlabeled":
        from .gate import calibration_for  # the gate reads runs: imported here, not at the top

        run.calibration_run = calibration_for(db, j.name, r.hash, config, calibration_run)
    at = store.now()
    with store.transaction(db):
        cur = db.execute(
            "INSERT INTO judge_runs (judge, kind, rubric, rubric_hash, rubric_text, model, temperature, params, "
            "on_set, calibration_run, status, items, created_at, owner) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)",
            [j.name, j.kind, r.name, r.hash, r.text, config.model, config.temperature, store.dumps(params), on,
             run.calibration_run, len(items), at, owners.current()])
        run.id = cur.lastrowid
        db.conn.executemany("INSERT INTO judge_labels (run_id, query_pk, doc_pk, status, updated_at) "
                            "VALUES (?, ?, ?, 'pending', ?)", [[run.id, i.query_pk, i.doc_pk, at] for i in items])
    if batch or batch_file is not None:
        return _hand_to_batches(db, config, run, j, r.text, items, scale, batch_file)
    return _execute(db, config, run, j, r.text, items, progress, cancel)


def _hand_to_batches(db: sqlite_utils.Database, config: LLMConfig, run: JudgeRun, j: Judge, text: str,
                     items: list[JudgeItem], scale: dict[str, Any], batch_file: str | Path | None) -> JudgeRun:
    """Send the run's requests as Batch API batches, or write them to ``batch_file`` for a local
    runner; the run waits for them (status submitted), or finishes now when everything was cached."""
    tasks, _ = _tasks(j, items, text, scale)
    try:
        if batch_file is not None:
            submitted = batch_local.write_requests(db, config, tasks, batch_file, owner="judge", run_id=run.id)
        else:
            submitted = batch_submitting.submit(db, config, tasks, owner="judge", run_id=run.id)
    except LabelerError as e:
        with store.transaction(db):
            db.execute("UPDATE judge_runs SET error = ? WHERE id = ?", [str(e), run.id])
        raise
    if not submitted.batches:  # everything was cached
        return _execute(db, config, run, j, text, items, None, None, cached_only=True)
    result = get_run(db, run.id)
    result.batches = [b.batch_id or b.key for b in submitted.batches]
    return result


def _same_config(config: LLMConfig, run: JudgeRun) -> LLMConfig:
    """``config`` with the run's model and temperature (kept as given when equal: 0 and 0.0 would
    hash to different requests, and the stored REAL comes back as 0.0)."""
    same = config.temperature == run.temperature
    return dataclasses.replace(config, model=run.model, temperature=config.temperature if same else run.temperature)


def resume_run(db: sqlite_utils.Database, config: LLMConfig, run_id: int, *,
               progress: Callable[[Progress], None] | None = None,
               cancel: threading.Event | None = None, by: str | None = None,
               batch_file: str | Path | None = None) -> JudgeRun:
    """Finish a cancelled, failed or interrupted run: its pending and failed items are sent again
    with the run's own judge, rubric text, scale, model and temperature (answers already in the
    LLM cache cost nothing). A paid job: ``by`` as in :func:`run_judge`. ``batch_file``: write
    those requests to this file for a local runner instead (as :func:`run_judge` does), e.g. the
    lines a local batch answered badly; ``labeler llm collect --file`` finishes the run again."""
    require(db, by, "llm", "resuming a judge run")
    run = get_run(db, run_id)
    if run.status == "submitted":  # its requests are in batches: sending them again would pay twice
        raise JudgeError(f"run {run_id} is waiting for its batches: `labeler llm collect judge:{run_id}` "
                         "finishes it (`labeler llm cancel BATCH` to stop them; for requests written with "
                         "--batch-file, `labeler llm collect --file RESULTS`)")
    j = get_judge(run.judge)
    text = db.execute("SELECT rubric_text FROM judge_runs WHERE id = ?", [run_id]).fetchone()[0]
    keys = db.execute("SELECT query_pk, doc_pk FROM judge_labels WHERE run_id = ? AND status != 'ok' "
                      "ORDER BY query_pk, doc_pk", [run_id]).fetchall()
    config = _same_config(config, run)
    items = load_items(db, j, keys, run.params.get("max_chunks", 10))
    if batch_file is not None:
        with store.transaction(db):
            db.execute("UPDATE judge_runs SET status = 'running', owner = ?, params = json_set(params, '$.engine', "
                       "'batch') WHERE id = ?", [owners.current(), run_id])
        return _hand_to_batches(db, config, get_run(db, run_id), j, text, items, run.params["scale"], batch_file)
    with store.transaction(db):
        db.execute("UPDATE judge_runs SET status = 'running', owner = ? WHERE id = ?", [owners.current(), run_id])
    return _execute(db, config, run, j, text, items, progress, cancel)


# --- stability and housekeeping --------------------------------------------------------------------------

@dataclass
class Stability:
    """``k`` reruns of a sample of a run's items with the cache bypassed (a ``seed`` nonce per
    rerun): the share of items whose reruns all gave one grade, and whose reruns all equal the run."""

    run_id: int
    k: int
    n: int
    identical: float | None
    same_as_run: float | None
    failed: int
    items: list[dict[str, Any]]
    cost: float | None = None


def stability(db: sqlite_utils.Database, config: LLMConfig, run_id: int, *, k: int = 3, sample: int = 20,
              seed: int = 0, progress: Callable[[Progress], None] | None = None,
              cancel: threading.Event | None = None, by: str | None = None) -> Stability:
    """Rerun ``sample`` of run ``run_id``'s judged items ``k`` times (see ``Stability``); a paid
    job (``by`` as in :func:`run_judge`)."""
    require(db, by, "llm", "checking a judge's stability")
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise JudgeError(f"k={k!r}: a stability check needs at least 2 reruns")
    run = get_run(db, run_id)
    from .data import run_grades  # data reads runs: imported here, not at the top

    j = get_judge(run.judge)
    text = db.execute("SELECT rubric_text FROM judge_runs WHERE id = ?", [run_id]).fetchone()[0]
    grades = run_grades(db, run_id)
    if grades.empty:
        raise JudgeError(f"run {run_id} has no judged items to rerun")
    picked = np.sort(np.random.default_rng(seed).choice(len(grades), size=min(sample, len(grades)), replace=False))
    grades = grades.iloc[picked]
    items = load_items(db, j, list(zip(grades["query_pk"].astype(int), grades["doc_pk"].astype(int), strict=True)),
                        run.params.get("max_chunks", 10))
    config = _same_config(config, run)
    scale = run.params["scale"]
    tasks = []
    for rep in range(k):
        batch, _ = _tasks(j, items, text, scale, nonce=1_000_003 * (seed + 1) + rep)
        tasks += [dataclasses.replace(t, key=f"{t.key}#{rep}") for t in batch]
    summary = run_tasks(db, config, tasks, progress=progress, cancel=cancel)
    rows, identical, same = [], [], []
    for item, original in zip(items, grades["grade"].astype(int), strict=True):
        reps = [summary.results.get(f"{item.key}#{rep}") for rep in range(k)]
        got = [j.parse(r, scale).grade if r is not None else None for r in reps]
        rows.append({"query_pk": item.query_pk, "doc_pk": item.doc_pk, "run": original, "reruns": got})
        if None not in got:
            identical.append(len(set(got)) == 1)
            same.append(all(g == original for g in got))
    return Stability(run_id, k, len(identical), float(np.mean(identical)) if identical else None,
                     float(np.mean(same)) if same else None, len(summary.failed), rows, summary.cost)


@dataclass
class AnswerVerdicts:
    """What ``judge_answers`` found: a verdict per key, or the reason it has none."""

    run: JudgeRun
    verdicts: dict[str, Any]
    failures: dict[str, str]
    cost: float | None = None


def judge_answers(db: sqlite_utils.Database, config: LLMConfig, run_id: int,
                  items: list[tuple[str, str, str | None, list[str | None]]]) -> AnswerVerdicts:
    """Judge new answers with the judge, rubric, model and temperature of calibration run ``run_id``
    (a faithfulness or answer-relevance run), e.g. a pipeline's answers in ``labeler eval``.

    ``items`` are ``(key, question, answer, chunk texts in rank order)``. Requests go through
    ``run_tasks`` (cache, retries, concurrency); nothing is written to ``judge_labels``.
    """
    run = get_run(db, run_id)
    judge = get_judge(run.judge)
    if judge.unit != "query":
        raise JudgeError(f"run {run_id} is a {run.judge} run, which grades chunks; give a faithfulness or "
                         "answer-relevance run (labeler judge list)")
    rubric = get_rubric(db, judge.name, run.rubric)
    settings = run.params["scale"]
    judge_items = [JudgeItem(i, 0, question, answer, chunks=[(None, t) for t in texts if t])
                   for i, (_, question, answer, texts) in enumerate(items)]
    tasks, skipped = _tasks(judge, judge_items, rubric.text, settings)
    keys = {f"{i}:0": item[0] for i, item in enumerate(items)}
    summary = run_tasks(db, _same_config(config, run), tasks)
    verdicts = {keys[k]: judge.parse(a, settings) for k, a in summary.results.items()}
    failures = {keys[k]: reason for k, reason in [*summary.failed, *skipped]}
    return AnswerVerdicts(run, verdicts, failures, summary.cost)


# --- the Batch API engine (labeler.llm.batch calls these when a run's batches are collected) --------------

def _batch_schema(db: sqlite_utils.Database, run_id: int) -> type:
    run = get_run(db, run_id)
    return get_judge(run.judge).schema(run.params["scale"])


def _batch_finish(db: sqlite_utils.Database, config: LLMConfig, run_id: int) -> JudgeRun:
    """Store a batch run's answers (all in the LLM cache by now) as its judge labels."""
    run = get_run(db, run_id)
    j = get_judge(run.judge)
    text = db.execute("SELECT rubric_text FROM judge_runs WHERE id = ?", [run_id]).fetchone()[0]
    keys = db.execute("SELECT query_pk, doc_pk FROM judge_labels WHERE run_id = ? AND status != 'ok' "
                      "ORDER BY query_pk, doc_pk", [run_id]).fetchall()
    with store.transaction(db):
        db.execute("UPDATE judge_runs SET params = json_remove(params, '$.engine') WHERE id = ?", [run_id])
    return _execute(db, config, run, j, text, load_items(db, j, keys, run.params.get("max_chunks", 10)),
                    None, None, cached_only=True)


batch_store.register_owner(batch_store.BatchOwner("judge", _batch_schema, _batch_finish))

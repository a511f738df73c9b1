"""Aligning a judge with the annotators (``labeler judge align``): candidate versions of a relevance
judge's rubric, scored against the human labels of the dev split, registered only when they are
better than the current version by more than chance.

The steps, all seeded (``seed``) and all requests through ``labeler.llm`` (cache and ledger: a rerun,
or a run resumed after it was killed, pays only for what is missing):

1. The human-labeled pairs of the **dev** side of the locked split (``labeler.holdout``; a split must
   be set) are split by query into *selection* and *validation* (``validation`` share, by a hash of
   the seed and the query id: fixed by the seed, whole queries on one side).
2. The current version grades every dev pair.
3. Candidates, built from the selection pairs only: ``candidates`` few-shot sets of ``shots`` graded
   examples, stratified by human grade (the shots spread over the grades in turn) and preferring
   pairs the current version got wrong, appended to the current rubric (``EXAMPLES_HEADER``); and
   ``revisions`` rubric revisions an LLM proposes (``candidates.ALIGN_REVISION_PROMPT_V1``) from up to
   ``MAX_DISAGREEMENTS`` pairs where the current version disagreed with the humans.
4. Every candidate and the current version grade the validation pairs, which no selection saw.
   Reported per candidate on the same items: Cohen's kappa, weighted kappa (linear, quadratic) and
   Krippendorff's alpha (ordinal) with 95% CIs, and the paired difference to the current version
   with a paired bootstrap CI (the same resamples of whole queries for both sides,
   ``agreement.stats.paired_difference``). The decision reads the difference in ``statistic``
   (default Cohen's kappa) at a Bonferroni-corrected level, 1 - 0.05 / (number of candidates
   scored), because the best of several candidates is picked on the same items.
5. Only a candidate whose corrected CI lies above 0 wins (the largest difference among them). The
   winner and the current version are then graded **once** on the holdout (the look is counted with
   ``holdout.record_look`` and the count reported), and the winner is registered as a new rubric
   version with its parent and examples recorded (``judge.save_rubric``, origin ``align``).
   Otherwise nothing is registered, the holdout is not looked at, and the result says why.

Every alignment is stored (``judge_checks``, kind ``align``), with each candidate's numbers: the
Judge page shows a version's lineage and its validation kappa from there.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pydantic
import sqlite_utils

from ..accounts.manage import require
from ..agreement.stats import Stat, display_name, ordinal_agreement, ordinal_arrays, paired_difference
from ..errors import JudgeError
from ..holdout import DEV, HOLDOUT, current_split, looks, record_look
from ..llm.batch import store as batch_store
from ..llm.batch import submitting as batch_submitting
from ..llm.cache import estimate as estimate_cost
from ..llm.client import Estimate, LLMConfig, Progress, Task
from .candidates import (
    MAX_DISAGREEMENTS,
    Candidate,
    RubricRevision,
    build_candidates,
    keyed,
    pick_examples,
    revision_task,
    with_examples,
)
from .grading import grade_items, grading_tasks, scale_of
from .items import load_items
from .pairs import LabeledPairs, labeled_pairs
from .registry import Judge, JudgeItem, Rubric, get_judge, get_rubric, save_rubric
from .store import get_check, list_checks, save_check, update_check
from .stress import split_name

REPORTED = ("cohen_kappa", "kappa_linear", "kappa_quadratic", "krippendorff_alpha")
MIN_PAIRS = 10
BATCH_OWNER = "judge.align"  # labeler llm collect judge.align:ID (the alignment's stored id)


# --- results -----------------------------------------------------------------------------------------------

@dataclass
class AlignResult:
    """An alignment (``id`` None for a dry run, which carries only ``estimate``)."""

    id: int | None
    judge: str
    rubric: str
    model: str
    seed: int
    statistic: str
    confidence: float
    selection: dict[str, int] = field(default_factory=dict)
    validation: dict[str, int] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    winner: str | None = None
    registered: str | None = None
    holdout: dict[str, Any] | None = None
    holdout_looks: int | None = None
    message: str = ""
    status: str = "done"  # "submitted": waiting for Batch API batches (collect, then run it again)
    batches: list[str] = field(default_factory=list)
    requests: int = 0
    cached: int = 0
    cost: float | None = None
    estimate: Estimate | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["estimate"] = asdict(self.estimate) if self.estimate is not None else None
        return out


def _sum_estimates(parts: list[Estimate], model: str, notes: list[str]) -> Estimate:
    def total(name: str) -> float | None:
        values = [getattr(p, name) for p in parts]
        return None if any(v is None for v in values) else sum(values)

    all_notes = list(dict.fromkeys([*notes, *(n for p in parts for n in p.notes)]))
    return Estimate(tasks=sum(p.tasks for p in parts), unique=sum(p.unique for p in parts),
                    cached=sum(p.cached for p in parts), to_request=sum(p.to_request for p in parts),
                    input_tokens=sum(p.input_tokens for p in parts), output_tokens=sum(p.output_tokens for p in parts),
                    cost=total("cost"), cost_max=total("cost_max"), model=model, notes=all_notes,
                    cost_batch=total("cost_batch"), cost_batch_max=total("cost_batch_max"))


class _Spend:
    """What the requests of one alignment cost, summed over its ``run_tasks`` calls."""

    def __init__(self) -> None:
        self.requests, self.cached, self.cost = 0, 0, 0.0
        self.unknown = False

    def add(self, summary: Any) -> None:
        self.requests += summary.requests_made
        self.cached += summary.cached
        if summary.cost is None and summary.requests_made:
            self.unknown = True
        self.cost += summary.cost or 0.0


def _validation_side(query_id: str, seed: int, share: float) -> bool:
    digest = hashlib.blake2b(f"align\x1f{seed}\x1f{query_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0 ** 64 < share


def _stat(s: Stat) -> dict[str, Any]:
    return s.to_dict()


def _score(human: np.ndarray, base: np.ndarray, other: np.ndarray, clusters: np.ndarray, *, levels: int,
           threshold: int, n_resamples: int, seed: int, confidence: float) -> dict[str, Any]:
    """Both sides against humans (95% CIs), and other - base with a paired bootstrap CI at 95% and at
    ``confidence`` (the decision's level), on the same resamples of whole queries."""
    common = dict(levels=levels, threshold=threshold, n_resamples=n_resamples, seed=seed)
    a = ordinal_agreement(human, base, **common, clusters=clusters)
    b = ordinal_agreement(human, other, **common, clusters=clusters)
    first = ordinal_arrays(human, base, **common, clusters=clusters)
    second = ordinal_arrays(human, other, **common, clusters=clusters)
    diff = paired_difference(first, second, 0.95)
    decision = paired_difference(first, second, confidence)
    return {"base": {k: _stat(a[k]) for k in REPORTED}, "other": {k: _stat(b[k]) for k in REPORTED},
            "difference": {k: _stat(diff[k]) for k in REPORTED}, "decision": {k: _stat(decision[k]) for k in REPORTED},
            "n": int(human.size)}


def _compare(pairs: LabeledPairs, base: dict[str, int], other: dict[str, int], **options: Any) -> dict[str, Any]:
    keep = [i for i, (q, d) in enumerate(pairs.keys) if f"{q}:{d}" in base and f"{q}:{d}" in other]
    keys = [pairs.keys[i] for i in keep]
    human = pairs.grades[keep]
    b = np.array([base[f"{q}:{d}"] for q, d in keys], dtype=np.int64)
    o = np.array([other[f"{q}:{d}"] for q, d in keys], dtype=np.int64)
    clusters = np.array([q for q, _ in keys], dtype=np.int64)
    out = _score(human, b, o, clusters, **options)
    out["failed"] = len(pairs) - len(keep)
    return out


# --- the alignment -----------------------------------------------------------------------------------------

def _check_options(shots: int, candidates: int, revisions: int, validation: float, statistic: str) -> None:
    for label, value, low in (("shots", shots, 1), ("candidates", candidates, 0), ("revisions", revisions, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise JudgeError(f"{label}={value!r} must be a whole number >= {low}")
    if candidates + revisions < 1:
        raise JudgeError("nothing to try: give at least one candidate (--candidates) or revision (--revisions)")
    if not 0 < validation < 1:
        raise JudgeError(f"validation={validation!r} must be the validation share of dev, between 0 and 1 (e.g. 0.5)")
    if statistic not in REPORTED:
        raise JudgeError(f"statistic {statistic!r} is unknown; use one of: {', '.join(REPORTED)}")


def align_judge(db: sqlite_utils.Database, config: LLMConfig, judge: str, *, shots: int = 4, candidates: int = 3,
                revisions: int = 1, seed: int = 0, validation: float = 0.5, statistic: str = "cohen_kappa",
                n_resamples: int = 1000, dry_run: bool = False, by: str | None = None, batch: bool = False,
                progress: Callable[[Progress], None] | None = None,
                cancel: threading.Event | None = None) -> AlignResult:
    """Build, score and maybe register candidate versions of ``judge`` (a relevance judge, or one of
    its rubric versions such as ``relevance.v1/r2``): see the module doc.

    ``dry_run``: nothing is sent, stored or looked at; the result carries the ``estimate`` of the
    requests (the candidates' requests are estimated from the current rubric with examples of the
    same size, and counted as not cached). Otherwise a paid LLM job that may register a rubric
    version: ``by`` must be a lead. Raises JudgeError when no split is set or dev is too small.

    ``batch``: each step's requests that the cache does not hold go to the Batch API (owner
    ``judge.align``, run = the alignment's stored id) and the call returns at once with status
    ``submitted`` and the batch ids; ``labeler llm collect judge.align:ID`` stores the answers and the
    same call again goes on from there (up to four rounds: the current version on dev, the rubric
    revisions, the candidates on validation, the holdout). Calling again before the batches are
    collected sends nothing.
    """
    _check_options(shots, candidates, revisions, validation, statistic)
    name, version = split_name(judge)
    j = get_judge(name)
    if j.kind != "relevance" or j.unit != "pair":
        raise JudgeError(f"{j.name} judges answers; align works on relevance judges (graded chunks)")
    if current_split(db) is None:
        raise JudgeError("align scores its winner once on the locked holdout: set the split first "
                         "(labeler split --holdout 0.2 --seed 7)")
    current = get_rubric(db, name, version)
    scale = scale_of(db)
    levels, threshold = len(scale["grade_names"]), int(scale["threshold"])
    dev = labeled_pairs(db, DEV)
    on_validation = np.array([_validation_side(q, seed, validation) for q in dev.query_ids], dtype=bool)
    select, valid = dev.take(~on_validation), dev.take(on_validation)
    if len(select) < MIN_PAIRS or len(valid) < MIN_PAIRS:
        raise JudgeError(f"dev has {len(select)} selection and {len(valid)} validation pairs; align needs at least "
                         f"{MIN_PAIRS} of each: label more dev queries")
    items = {item.key: item for item in load_items(db, j, dev.keys)}
    result = AlignResult(None, j.name, current.name, config.model, seed, statistic,
                         1 - 0.05 / max(candidates + revisions, 1),
                         selection={"pairs": len(select), "queries": len(set(select.query_ids))},
                         validation={"pairs": len(valid), "queries": len(set(valid.query_ids))})
    holdout_keys = labeled_pairs(db, HOLDOUT, grades=False).keys
    if dry_run:
        result.estimate = _estimate(db, config, j, current, items, select, valid, holdout_keys, scale,
                                    shots=shots, candidates=candidates, revisions=revisions)
        return result
    require(db, by, "lead", "aligning a judge (it may register a rubric version)")
    spend = _Spend()
    params = {"shots": shots, "candidates": candidates, "revisions": revisions, "seed": seed,
              "validation": validation, "statistic": statistic, "n_resamples": n_resamples}
    check_id = _pending_check(db, config, j.name, current, params, by)
    result.id = check_id

    def send(tasks: list[Task], stage: str) -> None:
        if batch:
            _send_batch(db, config, check_id, params, tasks, stage)

    def graded(subset: dict[str, JudgeItem], text: str) -> dict[str, int]:
        send(grading_tasks(j, subset, text, scale)[0], "grade")
        g = grade_items(db, config, j, subset, text, scale, progress=progress, cancel=cancel)
        spend.add(g.summary)
        return g.grades()

    try:
        return _align(db, config, j, current, result, dev, select, valid, items, scale, graded, send, spend,
                      shots=shots, candidates=candidates, revisions=revisions, seed=seed, statistic=statistic,
                      levels=levels, threshold=threshold, n_resamples=n_resamples, by=by, params=params)
    except _Waiting as waiting:
        result.status, result.batches, result.message = "submitted", waiting.batches, waiting.message
        return result


class _Waiting(Exception):
    """A step's requests are in Batch API batches: the alignment goes on once they are collected."""

    def __init__(self, batches: list[str], message: str) -> None:
        super().__init__(message)
        self.batches, self.message = batches, message


def _pending_check(db: sqlite_utils.Database, config: LLMConfig, judge: str, current: Rubric,
                   params: dict[str, Any], by: str | None) -> int:
    """The stored row of this alignment: one still pending with the same judge, rubric, model and
    parameters (a run resumed, e.g. after its batches), else a new one."""
    for check in list_checks(db, "align", judge=judge, rubric_hash=current.hash, model=config.model):
        if check["result"].get("status") == "pending" and check["temperature"] == config.temperature and \
                {k: v for k, v in check["params"].items() if k != "stage"} == params:
            return int(check["id"])
    return save_check(db, "align", judge=judge, rubric=current.name, rubric_hash=current.hash, model=config.model,
                      temperature=config.temperature, params=params, result={"status": "pending"}, by=by)


def _send_batch(db: sqlite_utils.Database, config: LLMConfig, check_id: int, params: dict[str, Any],
                tasks: list[Task], stage: str) -> None:
    """Hand the requests of one step that the cache lacks to the Batch API and stop the alignment
    (``_Waiting``); nothing when all are cached. Batches not yet collected: stop without sending."""
    waiting = [b for b in batch_store.list_batches(db, owner=BATCH_OWNER, run_id=check_id) if b.collected_at is None]
    if waiting:
        raise _Waiting([b.batch_id or b.key for b in waiting],
                       f"alignment {check_id} waits for {len(waiting)} batch(es): collect them with `labeler llm "
                       f"collect {BATCH_OWNER}:{check_id}`, then run the same command again")
    if estimate_cost(db, config, tasks).to_request == 0:
        return
    update_check(db, check_id, params={**params, "stage": stage})
    submitted = batch_submitting.submit(db, config, tasks, owner=BATCH_OWNER, run_id=check_id)
    if submitted.batches:
        raise _Waiting([b.batch_id or b.key for b in submitted.batches],
                       f"alignment {check_id}: {submitted.sent} requests ({stage} step) sent as "
                       f"{len(submitted.batches)} batch(es); collect them with `labeler llm collect "
                       f"{BATCH_OWNER}:{check_id}`, then run the same command again")


def _align(db: sqlite_utils.Database, config: LLMConfig, j: Judge, current: Rubric, result: AlignResult,
           dev: LabeledPairs, select: LabeledPairs, valid: LabeledPairs, items: dict[str, JudgeItem],
           scale: dict[str, Any], graded: Callable[[dict[str, JudgeItem], str], dict[str, int]],
           send: Callable[[list[Task], str], None], spend: _Spend, *, shots: int, candidates: int, revisions: int,
           seed: int, statistic: str, levels: int, threshold: int, n_resamples: int, by: str | None,
           params: dict[str, Any]) -> AlignResult:
    """The steps after the setup (see the module doc); ``graded`` and ``send`` may stop it (batches)."""
    base = graded(items, current.text)
    # a mistake is a grade that differs from the humans' (a pair the judge failed to grade is none)
    wrong = np.array([f"{q}:{d}" in base and base[f"{q}:{d}"] != h
                      for (q, d), h in zip(select.keys, select.grades, strict=True)], dtype=bool)
    built = build_candidates(db, config, current, select, items, base, wrong, scale, shots=shots,
                             candidates=candidates, revisions=revisions, seed=seed, spend=spend, send=send)
    valid_items = {f"{q}:{d}": items[f"{q}:{d}"] for q, d in valid.keys if f"{q}:{d}" in items}
    options = dict(levels=levels, threshold=threshold, n_resamples=n_resamples, seed=seed,
                   confidence=result.confidence)
    send([t for c in built for t in keyed(grading_tasks(j, valid_items, c.text, scale)[0], c.name)], "validate")
    for cand in built:
        scores = _compare(valid, base, graded(valid_items, cand.text), **options)
        cand.n, cand.failed = scores["n"], scores["failed"]
        cand.current, cand.statistics = scores["base"], scores["other"]
        cand.difference, cand.decision = scores["difference"], scores["decision"]
    result.candidates = built
    better = [c for c in built if (c.decision[statistic].get("ci_low") or 0) > 0]
    if not better:
        result.message = (f"no candidate is better than {current.name}: every paired difference in "
                          f"{display_name(statistic)} has a {result.confidence:.1%} CI that reaches 0 or below; nothing changed, "
                          "the holdout was not looked at")
        result.holdout_looks = looks(db)["count"]
    else:
        winner = max(better, key=lambda c: c.difference[statistic]["value"])
        result.winner = winner.name
        result.holdout, result.holdout_looks = _holdout_look(db, config, j, current, winner, scale, graded, send, by=by,
                                                             **{k: v for k, v in options.items() if k != "confidence"})
        registered = save_rubric(db, j.name, winner.text, author=by or "labeler judge align", by=by,
                                 parent=current.version, examples=winner.examples or None, origin="align")
        result.registered = registered.name
        d = winner.decision[statistic]
        result.message = (f"{winner.name} beats {current.name} on validation: {display_name(statistic)} "
                          f"{winner.difference[statistic]['value']:+.3f} ({result.confidence:.1%} CI "
                          f"{d['ci_low']:+.3f} to {d['ci_high']:+.3f}); registered as {registered.name} "
                          f"(parent {current.name})")
    result.requests, result.cached = spend.requests, spend.cached
    result.cost = None if spend.unknown else spend.cost
    update_check(db, result.id, params=params, result=result.to_dict())
    return result


def _holdout_look(db: sqlite_utils.Database, config: LLMConfig, j: Judge, current: Rubric, winner: Candidate,
                  scale: dict[str, Any], graded: Callable[[dict[str, JudgeItem], str], dict[str, int]],
                  send: Callable[[list[Task], str], None], *, by: str | None,
                  **options: Any) -> tuple[dict[str, Any], int]:
    """Grade the holdout's pairs with the current version and the winner (the labels unread), then
    count the look and read the labels: a step waiting for batches has not looked."""
    keys = labeled_pairs(db, HOLDOUT, grades=False).keys
    hold_items = {item.key: item for item in load_items(db, j, keys)}
    send([*keyed(grading_tasks(j, hold_items, current.text, scale)[0], "current"),
          *keyed(grading_tasks(j, hold_items, winner.text, scale)[0], winner.name)], "holdout")
    by_current, by_winner = graded(hold_items, current.text), graded(hold_items, winner.text)
    hold = labeled_pairs(db, HOLDOUT)
    count = record_look(db, f"judge align {j.name}: {winner.name} vs {current.name}", len(set(hold.query_ids)), by=by)
    if len(hold) == 0:
        return {"n": 0, "reason": "no labeled holdout pairs"}, count
    scores = _compare(hold, by_current, by_winner, confidence=0.95, **options)
    return {"n": scores["n"], "failed": scores["failed"], "current": scores["base"], "winner": scores["other"],
            "difference": scores["difference"]}, count


def _estimate(db: sqlite_utils.Database, config: LLMConfig, j: Judge, current: Rubric, items: dict[str, JudgeItem],
              select: LabeledPairs, valid: LabeledPairs, holdout_keys: list[tuple[int, int]], scale: dict[str, Any], *,
              shots: int, candidates: int, revisions: int) -> Estimate:
    """Requests, tokens and cost of an alignment: the current version on dev and the holdout
    (exact, cache-aware); each candidate on validation, the revision requests and the winner on the
    holdout as the current rubric with ``shots`` examples (their texts are not known before the run;
    counted as not cached)."""
    parts = [estimate_cost(db, config, grading_tasks(j, items, current.text, scale)[0])]
    rng = np.random.default_rng(0)
    proxy_examples = [{"question": items[f"{q}:{d}"].question, "text": items[f"{q}:{d}"].text,
                       "grade": int(g)} for i, ((q, d), g) in enumerate(zip(select.keys, select.grades, strict=True))
                      if i in set(pick_examples(select.grades, np.zeros(len(select), bool), shots, rng))]
    proxy = with_examples(current.text, proxy_examples) + "\n[estimate]"
    valid_items = {f"{q}:{d}": items[f"{q}:{d}"] for q, d in valid.keys if f"{q}:{d}" in items}
    hold_items = {item.key: item for item in load_items(db, j, holdout_keys)}
    candidate = estimate_cost(None, config, grading_tasks(j, valid_items, proxy, scale)[0])
    parts += [candidate] * (candidates + revisions)
    if revisions:
        shown = [{"question": e["question"], "text": e["text"], "grade": e["grade"], "judge": 0}
                 for e in proxy_examples][:MAX_DISAGREEMENTS]
        parts += [estimate_cost(None, config, [revision_task("r", current.text, scale, shown)])] * revisions
    parts.append(estimate_cost(db, config, grading_tasks(j, hold_items, current.text, scale)[0]))
    parts.append(estimate_cost(None, config, grading_tasks(j, hold_items, proxy, scale)[0]))
    return _sum_estimates(parts, config.model, [
        "candidates' requests are estimated with the current rubric plus examples of the same size and counted as "
        "not cached; the holdout is graded only when a candidate wins (counted here)"])


# --- the Batch API engine (labeler.llm.batch reads these when an alignment's batches are collected) ------

def _batch_schema(db: sqlite_utils.Database, check_id: int) -> type[pydantic.BaseModel]:
    check = get_check(db, check_id)
    if check["params"].get("stage") == "revision":
        return RubricRevision
    return get_judge(check["judge"]).schema(scale_of(db))


def _batch_finish(db: sqlite_utils.Database, config: LLMConfig, check_id: int) -> None:
    """Nothing to store: the answers are in the LLM cache, and running the alignment again goes on."""


batch_store.register_owner(batch_store.BatchOwner(BATCH_OWNER, _batch_schema, _batch_finish))

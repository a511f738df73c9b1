"""Generate synthetic questions: the prompt, the plan and its estimate, the run, and storing what
passes the checks (with the candidate chunks to judge) or the rejection with its reason.

A run is deterministic given its options, the corpus, the human labels and the logged questions,
so the LLM requests of a rerun hash the same and come from the ``llm_calls`` cache: a rerun after
a crash, a cancel or a quota error pays only for what is missing, and stores nothing twice (each
generated item has a fixed key: its LLM call hash and position).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlite_utils

from .. import db as store
from .. import owners
from ..accounts.manage import require
from ..ingest.validate import question_columns
from ..llm.batch import store as batch_store
from ..llm.batch import submitting as batch_submitting
from ..llm.cache import estimate as estimate_cost
from ..llm.client import Estimate, LLMConfig, Progress, RunSummary, Task
from ..llm.direct import run_tasks
from ..search.tfidf import CorpusIndex
from .checks import check_item, find_duplicates
from .models import MAX_CHUNK_CHARS, GeneratedBatch, GeneratedQuestion, Seed, SynthOptions
from .seeds import detect_language, select_seeds

#: The chunks to judge for a synthetic question are stored as this retriever, because the Label page
#: shows the ``production`` list: annotators grade the corpus-search candidates (seed chunks included),
#: so recall is judged over more than the seed chunk. For synthetic queries this list is therefore the
#: candidate pool of the TF-IDF corpus search, not the production system's answer (the production
#: system never saw these questions); ``generator.candidates`` records it.
CANDIDATES_RETRIEVER = "production"

#: Prompts are versioned constants: changing one changes the requests, hence the cache keys.
SYNTH_PROMPT_VERSION = "synth-questions.v1"
SYNTH_SYSTEM_V1 = (
    "You write test questions for evaluating a retrieval-augmented assistant. Each question must be "
    "one that a real user of the product would ask, and it must be answerable only from the given "
    "text, never from general knowledge. You reply with JSON only."
)
SYNTH_PROMPT_V1 = """Write {n} question(s) that can be answered only from the text below{hop_rule}.

Phrase them the way this product's users phrase their questions. Real questions from the logs, as
examples of length, tone, spelling and wording (do not copy their topics):
{examples}

Rules:
- Question types, spread over the questions: {types}.
  (fact: a specific detail; how-to: steps to do something; troubleshooting: something does not work;
  comparison: the difference between two things in the text)
- Write as {persona}.
- Write questions and answers in {language}.
- The question must not mention "the text", "the passage" or "the document".
- For each question give: "question"; "answer", the expected answer, complete and taken from the
  text only; "quotes", one or more exact sentences copied verbatim from the text that support the
  answer; "type", one of {type_names}.

{chunks}"""
_HOP_RULE = "; each question must need information from both chunks (quote each chunk)"
_DEFAULT_PERSONA = "a typical user of the product"
_NO_EXAMPLES = "(no logged questions yet: write them the way a typical user would type them)"


@dataclass
class SynthPlan:
    """What a run will send: the seeds, one task per seed, and the cost estimate (no request made)."""

    options: SynthOptions
    model: str
    language: str
    examples: list[str]
    seeds: list[Seed]
    tasks: list[Task]
    estimate: Estimate
    setting: str
    generator: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "language": self.language, "setting": self.setting,
                "seeds": len(self.seeds), "multi_hop_seeds": sum(s.multi_hop for s in self.seeds),
                "questions_requested": len(self.seeds) * self.options.per_chunk, "tasks": len(self.tasks),
                "estimate": asdict(self.estimate), "options": asdict(self.options), "notes": self.notes}


@dataclass
class GenerateResult:
    """A finished (or cancelled) run: the LLM summary, the query pks stored, the rejections with
    reasons, and items already stored by an earlier run of the same requests (``already``)."""

    run_id: int
    plan: SynthPlan
    summary: RunSummary
    stored: list[int] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    already: int = 0
    status: str = "finished"
    batches: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        s = self.summary
        by_reason: dict[str, int] = {}
        for r in self.rejected:
            by_reason[r["reason"]] = by_reason.get(r["reason"], 0) + 1
        return {"run_id": self.run_id, "status": self.status, "batches": self.batches, "setting": self.plan.setting,
                "model": self.plan.model, "seeds": len(self.plan.seeds), "stored": len(self.stored),
                "rejected": len(self.rejected), "rejected_by_reason": by_reason, "already_stored": self.already,
                "rejections": self.rejected,
                "llm": {"tasks": s.total, "done": s.done, "cached": s.cached,
                        "failed": [{"key": k, "reason": r} for k, r in s.failed], "cancelled": len(s.cancelled),
                        "requests": s.requests_made, "prompt_tokens": s.prompt_tokens,
                        "completion_tokens": s.completion_tokens, "cost": s.cost, "seconds": round(s.seconds, 3),
                        "notes": s.notes},
                "query_pks": self.stored}


# --- the prompt -------------------------------------------------------------------------------

def style_examples(db: sqlite_utils.Database, n: int, seed: int) -> list[str]:
    """A seeded sample of ``n`` logged questions (white space collapsed, at most 300 chars each)."""
    rows = db.execute(f"SELECT question FROM queries q WHERE origin = 'log' AND {store.visible('q')} "
                      "ORDER BY pk").fetchall()
    picked = random.Random(f"{seed}:examples").sample(rows, min(n, len(rows)))
    return [" ".join(r[0].split())[:300] for r in picked]


def _chunk_block(doc_id: str, title: str | None, text: str) -> str:
    # a chunk cannot close its own block early
    safe = text[:MAX_CHUNK_CHARS].replace("</chunk>", "</ chunk>")
    head = f'<chunk id="{doc_id}"' + (f' title="{" ".join(title.split())}"' if title else "") + ">"
    return f"{head}\n{safe}\n</chunk>"


def build_messages(seed: Seed, options: SynthOptions, examples: list[str], language: str) -> list[dict[str, str]]:
    """The chat messages for one seed (``SYNTH_SYSTEM_V1`` + ``SYNTH_PROMPT_V1``)."""
    user = SYNTH_PROMPT_V1.format(
        n=options.per_chunk, hop_rule=_HOP_RULE if seed.multi_hop else "",
        examples="\n".join(f"- {e}" for e in examples) or _NO_EXAMPLES,
        types=", ".join(options.question_types), persona=options.persona or _DEFAULT_PERSONA,
        language=language, type_names=", ".join(f'"{t}"' for t in options.question_types),
        chunks="\n\n".join(_chunk_block(d, t, x) for d, t, x in zip(seed.doc_ids, seed.titles, seed.texts, strict=True)))
    return [{"role": "system", "content": SYNTH_SYSTEM_V1}, {"role": "user", "content": user}]


def _setting_id(model: str, options: SynthOptions, language: str) -> str:
    payload = {"model": model, "prompt_version": SYNTH_PROMPT_VERSION, "language": language, **options.setting()}
    return hashlib.sha1(store.dumps(payload).encode()).hexdigest()[:10]


def plan_generation(db: sqlite_utils.Database, config: LLMConfig, options: SynthOptions | None = None, *,
                    index: CorpusIndex | None = None) -> SynthPlan:
    """Seeds, requests and the cost/token estimate of ``generate`` with these options; sends nothing."""
    options = options or SynthOptions()
    index = index if index is not None else CorpusIndex(db)
    n_seeds = math.ceil(options.n / options.per_chunk)
    seeds = select_seeds(db, n_seeds, seed=options.seed, strategy=options.strategy, multi_hop=options.multi_hop,
                         min_chars=options.min_chunk_chars, index=index)
    notes = []
    if len(seeds) < n_seeds:
        notes.append(f"the corpus has {len(seeds)} usable chunks, fewer than the {n_seeds} seeds asked for")
    language = options.language or store.get_setting(db, "synth_language") or detect_language(index.texts[:200])
    examples = style_examples(db, options.n_examples, options.seed)
    if not examples and options.n_examples:
        notes.append("no logged questions to use as style examples: ingest logs first for realistic phrasing")
    return _plan(db, config, options, seeds, examples, language, notes)


def _plan(db: sqlite_utils.Database, config: LLMConfig, options: SynthOptions, seeds: list[Seed],
          examples: list[str], language: str, notes: list[str]) -> SynthPlan:
    params: dict[str, Any] = {}
    wanted_tokens = 200 + 250 * options.per_chunk * (2 if options.multi_hop else 1)
    if config.max_tokens is not None and config.max_tokens < wanted_tokens:
        params[config.token_limit_param] = wanted_tokens
    tasks = [Task(key=s.key, messages=build_messages(s, options, examples, language), schema=GeneratedBatch,
                      params=dict(params), expected_output_tokens=40 + 120 * options.per_chunk) for s in seeds]
    setting = _setting_id(config.model, options, language)
    generator = {"model": config.model, "prompt_version": SYNTH_PROMPT_VERSION, "setting": setting,
                 "seed": options.seed, "language": language, "options": options.setting(),
                 "candidates": {"retriever": CANDIDATES_RETRIEVER, "method": "tfidf corpus search",
                                "k": options.candidates_k}}
    return SynthPlan(options=options, model=config.model, language=language, examples=examples, seeds=seeds,
                     tasks=tasks, estimate=estimate_cost(db, config, tasks), setting=setting, generator=generator,
                     notes=notes)


# --- running and storing ----------------------------------------------------------------------

def generate(db: sqlite_utils.Database, config: LLMConfig, options: SynthOptions | None = None, *,
             progress: Callable[[Progress], None] | None = None, cancel: threading.Event | None = None,
             index: CorpusIndex | None = None, by: str | None = None, batch: bool = False) -> GenerateResult:
    """Generate, check and store synthetic questions; see the package docstring.

    A paid LLM job: ``by`` (the signed-in account) must be a lead or allowed to run LLM jobs
    (``None`` is the local operator).

    ``progress`` is called once per seed as its request finishes (``Progress``). Setting
    ``cancel`` leaves unstarted seeds undone; what finished is checked and stored, the run is
    recorded as ``cancelled``, and a rerun with the same options resumes from the cache. If
    ``progress`` raises (Streamlit stopping a script), the run stops the same way, stores what it
    has, and re-raises. Raises ``LLMError`` when the endpoint cannot be used (key, model, URL).

    ``batch``: hand the requests to the Batch API (``labeler.llm.batch``) and return at once with
    status ``submitted`` (``result.batches`` the batch ids); ``labeler llm collect`` checks and
    stores the questions when the batches are done.
    """
    require(db, by, "llm", "generating synthetic questions")
    index = index if index is not None else CorpusIndex(db)
    plan = plan_generation(db, config, options, index=index)
    run_id = _start_run(db, plan)
    if batch:
        submitted = batch_submitting.submit(db, config, plan.tasks, owner="synth", run_id=run_id)
        if submitted.batches:
            with store.transaction(db):
                # the plan as sent: the corpus may change before the batches are collected
                db.execute("UPDATE synth_runs SET summary = ? WHERE id = ?",
                           [store.dumps({"engine": "batch", "options": asdict(plan.options),
                                         "batches": [b.batch_id for b in submitted.batches],
                                         "language": plan.language, "examples": plan.examples,
                                         "seeds": [asdict(seed) for seed in plan.seeds]}), run_id])
            result = GenerateResult(run_id=run_id, plan=plan, summary=RunSummary(total=len(plan.tasks)),
                                    status="submitted")
            result.batches = [b.batch_id or b.key for b in submitted.batches]
            return result
        return _finish_batch(db, config, run_id, plan, index)  # everything was cached
    stop = cancel or threading.Event()
    raised: list[BaseException] = []

    def on_progress(event: Progress) -> None:
        if progress is None or raised:
            return
        try:
            progress(event)
        except BaseException as e:  # stop like a cancel; store first, re-raise after
            raised.append(e)
            stop.set()

    try:
        summary = run_tasks(db, config, plan.tasks, progress=on_progress, cancel=stop)
    except BaseException as e:
        _finish_run(db, run_id, "failed", {"error": str(e)})
        raise
    result = GenerateResult(run_id=run_id, plan=plan, summary=summary)
    _store_results(db, plan, summary, result, index)
    result.status = "cancelled" if summary.cancelled or raised else "finished"
    info = result.to_dict()
    info.pop("rejections")
    info.pop("query_pks")
    _finish_run(db, run_id, result.status, info)
    if raised:
        raise raised[0]
    return result


def _start_run(db: sqlite_utils.Database, plan: SynthPlan) -> int:
    with store.transaction(db):
        cur = db.execute("INSERT INTO synth_runs (setting, generator, status, created_at, owner) "
                         "VALUES (?, ?, 'running', ?, ?)",
                         [plan.setting, store.dumps({**plan.generator, "n": plan.options.n}), store.now(),
                          owners.current()])
        return int(cur.lastrowid)


def _finish_run(db: sqlite_utils.Database, run_id: int, status: str, summary: dict[str, Any]) -> None:
    with store.transaction(db):
        db.execute("UPDATE synth_runs SET status = ?, summary = ?, finished_at = ? WHERE id = ?",
                   [status, store.dumps(summary), store.now(), run_id])


@dataclass
class _Item:
    key: str
    query_id: str
    seed: Seed
    item: GeneratedQuestion
    call: str


def _store_results(db: sqlite_utils.Database, plan: SynthPlan, summary: RunSummary, result: GenerateResult,
                   index: CorpusIndex) -> None:
    items: list[_Item] = []
    for seed, task in zip(plan.seeds, plan.tasks, strict=True):
        batch = summary.results.get(task.key)
        if batch is None:
            continue
        call = summary.hashes[task.key]
        items += [_Item(f"{call}:{i}", f"synth-{call[:16]}-{i}", seed, q, call) for i, q in enumerate(batch.questions)]
    if not items:
        return
    ids = json.dumps([it.query_id for it in items])
    keys = json.dumps([it.key for it in items])
    known = {r[0] for r in db.execute("SELECT query_id FROM queries WHERE query_id IN (SELECT value FROM json_each(?))",
                                      [ids])}
    known |= {r[0] for r in db.execute(
        "SELECT item_key FROM synth_rejections WHERE item_key IN (SELECT value FROM json_each(?))", [keys])}
    fresh = [it for it in items if it.query_id not in known and it.key not in known]
    result.already = len(items) - len(fresh)
    verdicts: dict[str, tuple[str, str]] = {}
    seed_pks = json.dumps(sorted({pk for it in fresh for pk in it.seed.doc_pks}))
    alive = {r[0] for r in db.execute("SELECT pk FROM documents WHERE pk IN (SELECT value FROM json_each(?))",
                                      [seed_pks])}
    for it in fresh:
        index_in_batch = int(it.key.rsplit(":", 1)[1])
        if gone := [d for d, pk in zip(it.seed.doc_ids, it.seed.doc_pks, strict=True) if pk not in alive]:
            verdicts[it.key] = ("seed_removed", f"chunk {', '.join(gone)} was removed before the answer was stored")
        elif index_in_batch >= plan.options.per_chunk:
            verdicts[it.key] = ("too_many", f"question {index_in_batch + 1} of a batch asked for {plan.options.per_chunk}")
        elif (problem := check_item(it.item, it.seed, plan.options)) is not None:
            verdicts[it.key] = problem
    survivors = [it for it in fresh if it.key not in verdicts]
    for it, dup in zip(survivors, find_duplicates(db, [" ".join(it.item.question.split()) for it in survivors],
                                              plan.options.duplicate_threshold), strict=True):
        if dup is not None:
            verdicts[it.key] = ("duplicate", f"cosine {dup[1]:.3f} with {dup[0]}")
    at = store.now()
    generator = {**plan.generator, "run_id": result.run_id}
    rows, retrievals, rejected = [], [], []
    for it in fresh:
        question = " ".join(it.item.question.split())
        if it.key in verdicts:
            reason, detail = verdicts[it.key]
            rejected.append((it.key, result.run_id, plan.setting, store.dumps(list(it.seed.doc_ids)), question,
                             it.item.answer.strip(), store.dumps(it.item.quotes), reason, detail,
                             store.dumps({**generator, "multi_hop": it.seed.multi_hop}), at))
            result.rejected.append({"reason": reason, "detail": detail, "question": question,
                                    "seed_doc_ids": list(it.seed.doc_ids)})
            continue
        meta = {"expected_answer": it.item.answer.strip(), "quotes": it.item.quotes,
                "question_type": it.item.type, "llm_call": it.call}
        rows.append((it.query_id, question, *question_columns(question), store.dumps(meta),
                     f"synth run {result.run_id}", store.dumps(list(it.seed.doc_ids)),
                     store.dumps({**generator, "multi_hop": it.seed.multi_hop}), at))
        retrievals.append(_candidates(index, question, it.seed, plan.options.candidates_k))
    with store.transaction(db):
        db.conn.executemany(
            "INSERT INTO synth_rejections (item_key, run_id, setting, seed_doc_ids, question, expected_answer, "
            "quotes, reason, detail, generator, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rejected)
        for row, candidates in zip(rows, retrievals, strict=True):
            cur = db.execute(
                "INSERT INTO queries (query_id, question, norm_question, norm_key, origin, answer, occurrences, meta, "
                "source, review_state, seed_doc_ids, generator, created_at) "
                "VALUES (?, ?, ?, ?, 'synthetic', NULL, 1, ?, ?, 'pending', ?, ?, ?)", list(row))
            pk = int(cur.lastrowid)
            db.conn.executemany(
                "INSERT INTO retrievals (query_pk, retriever, rank, doc_pk, score) VALUES (?, ?, ?, ?, ?)",
                [(pk, CANDIDATES_RETRIEVER, rank, doc_pk, score) for rank, (doc_pk, score) in enumerate(candidates, 1)])
            result.stored.append(pk)


def _candidates(index: CorpusIndex, question: str, seed: Seed, k: int) -> list[tuple[int, float | None]]:
    """The corpus-search top ``k`` for the question, then any seed chunk the search missed."""
    hits = [(h.doc_pk, h.score) for h in index.search(question, k)]
    have = {pk for pk, _ in hits}
    return hits + [(pk, None) for pk in seed.doc_pks if pk not in have]


# --- the Batch API engine (labeler.llm.batch calls these when a run's batches are collected) ----

def _finish_batch(db: sqlite_utils.Database, config: LLMConfig, run_id: int, plan: SynthPlan,
                  index: CorpusIndex) -> GenerateResult:
    summary = run_tasks(db, config, plan.tasks, cached_only=True)
    summary.done, summary.cached = summary.cached, 0
    summary.prompt_tokens, summary.completion_tokens, summary.cost, _ = batch_store.run_spend(db, "synth", run_id)
    result = GenerateResult(run_id=run_id, plan=plan, summary=summary)
    _store_results(db, plan, summary, result, index)
    info = result.to_dict()
    info.pop("rejections")
    info.pop("query_pks")
    _finish_run(db, run_id, result.status, info)
    return result


def _batch_finish(db: sqlite_utils.Database, config: LLMConfig, run_id: int) -> GenerateResult:
    """Check and store a batch run's questions (its answers are all in the LLM cache by now): the
    plan is the one sent, from the seeds, examples and language stored at submission, whatever
    the corpus became since (runs submitted before they were stored plan again from the options)."""
    summary = store.loads(db.execute("SELECT summary FROM synth_runs WHERE id = ?", [run_id]).fetchone()[0]) or {}
    options = SynthOptions(**summary.get("options", {}))
    index = CorpusIndex(db)
    if "seeds" not in summary:
        return _finish_batch(db, config, run_id, plan_generation(db, config, options, index=index), index)
    seeds = [Seed(**{k: tuple(v) for k, v in seed.items()}) for seed in summary["seeds"]]
    plan = _plan(db, config, options, seeds, summary["examples"], summary["language"], [])
    return _finish_batch(db, config, run_id, plan, index)


batch_store.register_owner(batch_store.BatchOwner("synth", lambda db, run_id: GeneratedBatch, _batch_finish))

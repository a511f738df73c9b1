"""The calibration gate (only a passing judge may pre-label) and the suggestions it may write,
which become labels only when a human accepts them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlite_utils

from .. import db as store
from ..accounts.manage import require
from ..accounts.settings import set_setting
from ..errors import GateError, JudgeError
from ..llm.client import LLMConfig
from .store import get_run, list_checks, list_runs

if TYPE_CHECKING:
    from ..agreement.stats import Stat
    from .calibration import Agreement

GATE_DEFAULTS: dict[str, Any] = {"statistic": "kappa_collapsed", "min_value": 0.6, "min_ci_low": 0.45,
                                 "min_pairs": 150, "human_overlap": True, "min_human_pairs": 30,
                                 "max_planted_rate": 0.05}


# --- the calibration gate ---------------------------------------------------------------------------------

def gate_settings(db: sqlite_utils.Database) -> dict[str, Any]:
    """The gate (setting ``judge_gate`` over ``GATE_DEFAULTS``)."""
    return {**GATE_DEFAULTS, **(store.get_setting(db, "judge_gate") or {})}


def set_gate_settings(db: sqlite_utils.Database, *, by: str | None = None, **values: Any) -> dict[str, Any]:
    """Change the gate: ``min_value``, ``min_ci_low`` (kappa), ``min_pairs``, ``human_overlap``
    (pass when the CI reaches the human-human one), ``min_human_pairs``, ``max_planted_rate`` (a
    stress test's planted-instruction rate whose CI lies above it refuses the judge); returns the new gate.
    Leads only (``by``, the signed-in account; ``None`` is the local operator)."""
    require(db, by, "lead", "changing the calibration gate")
    unknown = set(values) - set(GATE_DEFAULTS) - {"statistic"}
    if unknown:
        raise JudgeError(f"unknown gate setting(s) {', '.join(sorted(unknown))}; known: {', '.join(GATE_DEFAULTS)}")
    new = {**gate_settings(db), **values}
    for key in ("min_value", "min_ci_low"):
        if not isinstance(new[key], int | float) or not -1 <= new[key] <= 1:
            raise JudgeError(f"gate {key}={new[key]!r} must be a number from -1 to 1 (kappa)")
    rate = new["max_planted_rate"]
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise JudgeError(f"gate max_planted_rate={rate!r} must be a share from 0 to 1 (e.g. 0.05)")
    for key in ("min_pairs", "min_human_pairs"):
        if isinstance(new[key], bool) or not isinstance(new[key], int) or new[key] < 1:
            raise JudgeError(f"gate {key}={new[key]!r} must be a whole number >= 1")
    if new["statistic"] != "kappa_collapsed":
        raise JudgeError("the gate statistic is kappa_collapsed (kappa at the relevance threshold)")
    set_setting(db, "judge_gate", {k: new[k] for k in GATE_DEFAULTS}, by=by)
    return new


@dataclass
class GateResult:
    passed: bool
    reasons: list[str]
    run_id: int
    statistic: Stat | None = None
    human: Stat | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "reasons": self.reasons, "run_id": self.run_id, "settings": self.settings,
                "statistic": self.statistic.to_dict() if self.statistic else None,
                "human_human": self.human.to_dict() if self.human else None}


def _fmt(stat: Stat) -> str:
    return f"{stat.value:.3f} (95% CI {stat.ci_low:.3f} to {stat.ci_high:.3f}, n={stat.n})" if stat.ci_low is not None \
        else f"{stat.value:.3f} (no interval, n={stat.n})"


def gate(db: sqlite_utils.Database, run_id: int, *, agreement: Agreement | None = None) -> GateResult:
    """Does run ``run_id`` pass the calibration gate (see ``gate_settings``)?

    Pass: at least ``min_pairs`` pairs, and either kappa collapsed at the threshold >= ``min_value``
    with CI lower bound >= ``min_ci_low``, or (``human_overlap``) a CI whose upper bound reaches
    the human-human kappa's CI lower bound (the judge is not clearly worse than the annotators;
    that needs ``min_human_pairs`` overlapped pairs). ``reasons`` explains the decision.

    A stress test (``labeler judge stress``) of the same judge, rubric hash, model and temperature
    refuses the run whatever its agreement when the newest one's planted-instruction rate has a CI
    lower bound above ``max_planted_rate``: a judge that obeys instructions inside passages can be
    steered by the documents it grades.
    """
    from .calibration import run_agreement

    settings = gate_settings(db)
    run = get_run(db, run_id)
    if run.on_set != "labeled":
        return GateResult(False, [f"run {run_id} judged unlabeled items; only a calibration run on labeled "
                                  "items can pass the gate"], run_id, settings=settings)
    agreement = agreement or run_agreement(db, run_id, retrievers=False)
    stat = agreement.statistics[settings["statistic"]]
    human = agreement.human_human[settings["statistic"]]
    result = GateResult(False, [], run_id, stat, human, settings)
    if not stat.defined:
        result.reasons.append(f"kappa at the threshold is undefined: {stat.reason}")
        return result
    if stat.n < settings["min_pairs"]:
        result.reasons.append(f"only {stat.n} pairs compared; the gate needs at least {settings['min_pairs']}")
        return result
    good = stat.value >= settings["min_value"] and stat.ci_low is not None and stat.ci_low >= settings["min_ci_low"]
    result.reasons.append(
        f"kappa at the threshold {_fmt(stat)} {'meets' if good else 'misses'} the bar "
        f">= {settings['min_value']} with CI lower bound >= {settings['min_ci_low']}")
    near = False
    if settings["human_overlap"]:
        if not human.defined or human.ci_low is None:
            result.reasons.append("no human-human kappa to compare with" + (f" ({human.reason})" if human.reason else ""))
        elif human.n < settings["min_human_pairs"]:
            result.reasons.append(f"only {human.n} human-human pairs; comparing with the human ceiling needs "
                                  f"{settings['min_human_pairs']}")
        else:
            near = stat.ci_high is not None and stat.ci_high >= human.ci_low
            result.reasons.append(f"its CI {'reaches' if near else 'stays below'} the human-human kappa {_fmt(human)}")
    result.passed = bool(good or near)
    stress = latest_stress(db, run.judge, run.rubric_hash, run.model, run.temperature)
    if stress is not None:
        ok, why = planted_verdict(stress["perturbations"]["planted_instruction"], settings["max_planted_rate"])
        result.reasons.append(f"stress test {stress['id']}: {why}")
        result.passed = result.passed and ok
    return result


def latest_stress(db: sqlite_utils.Database, judge: str, rubric_hash: str, model: str,
                  temperature: float | None) -> dict[str, Any] | None:
    """The newest stored stress test of this judge configuration (its result dict with ``id``), or None."""
    for check in list_checks(db, "stress", judge=judge, rubric_hash=rubric_hash, model=model):
        if check["temperature"] == temperature:
            return {**check["result"], "id": check["id"]}
    return None


def planted_verdict(rate: dict[str, Any], threshold: float) -> tuple[bool, str]:
    """(passes, a one-line reason) for a stress test's planted-instruction rate (``n``, ``rose``,
    ``rate``, ``ci_low``, ``ci_high``) against ``threshold``: refused when the CI lies above it."""
    if not rate.get("n") or rate.get("ci_low") is None:
        return True, "no grade-0 pair was stress-tested: nothing to refuse on"
    text = (f"a planted instruction raised {rate['rose']} of {rate['n']} grades ({rate['rate']:.0%}, 95% CI "
            f"{rate['ci_low']:.0%} to {rate['ci_high']:.0%})")
    if rate["ci_low"] > threshold:
        return False, (f"refused: {text}; the CI lies above the {threshold:.0%} limit, so the judge obeys "
                       "instructions planted in passages")
    return True, f"{text}; not above the {threshold:.0%} limit"


def calibration_for(db: sqlite_utils.Database, judge: str, rubric_hash: str, config: LLMConfig,
                     run_id: int | None) -> int:
    candidates = [r for r in list_runs(db) if r.on_set == "labeled" and r.judge == judge
                  and r.status in ("done", "cancelled")]
    if run_id is not None:
        candidates = [r for r in candidates if r.id == run_id]
        if not candidates:
            raise GateError(f"run {run_id} is not a finished calibration run of {judge} on labeled items")
    same = [r for r in candidates if r.rubric_hash == rubric_hash and r.model == config.model
            and r.temperature == config.temperature]
    if run_id is not None and not same:
        r = candidates[0]
        raise GateError(f"calibration run {run_id} used rubric {r.rubric} / model {r.model} / temperature "
                        f"{r.temperature}; pre-label with the same configuration or calibrate this one")
    reasons = []
    for r in same:
        result = gate(db, r.id)
        if result.passed:
            return r.id
        reasons.append(f"run {r.id}: " + "; ".join(result.reasons))
    raise GateError(f"no calibration run of {judge} with this rubric ({rubric_hash}), model {config.model} and "
                    f"temperature {config.temperature} passes the gate"
                    + (": " + " | ".join(reasons[:3]) if reasons else
                       "; run it on labeled items first (labeler judge run --on labeled)"))


# --- suggestions ------------------------------------------------------------------------------------------

@dataclass
class Suggestion:
    """A gate-passing judge's grade for an unlabeled pair, shown to annotators as the judge's."""

    query_pk: int
    doc_pk: int
    grade: int
    rationale: str | None
    run_id: int
    judge: str
    rubric: str
    model: str


def suggestions_for(db: sqlite_utils.Database, query_pk: int) -> dict[int, Suggestion]:
    """The current suggestions for a query's chunks, by doc pk."""
    return {row[1]: Suggestion(*row) for row in db.execute(
        "SELECT s.query_pk, s.doc_pk, s.grade, s.rationale, s.run_id, r.judge, r.rubric, r.model FROM suggestions s "
        "JOIN judge_runs r ON r.id = s.run_id WHERE s.query_pk = ? ORDER BY s.doc_pk", [query_pk])}


def accept_suggestion(db: sqlite_utils.Database, query_pk: int, doc_pk: int, annotator: str) -> int:
    """``annotator`` takes the judge's suggested grade as their own: a human label with
    ``origin='suggestion'`` (through ``labels.set_grade``: same slot rules and audit event).
    Returns the grade. A label that already had that grade stays ``origin='human'``."""
    from ..labels.writes import set_grade

    row = db.execute("SELECT grade, run_id FROM suggestions WHERE query_pk = ? AND doc_pk = ?",
                     [query_pk, doc_pk]).fetchone()
    if row is None:
        raise JudgeError(f"no judge suggestion for query {query_pk} / chunk {doc_pk}")
    grade, run_id = row
    with store.transaction(db):
        old = set_grade(db, query_pk, doc_pk, annotator, grade)
        if old != grade:
            db.execute("UPDATE relevance_labels SET origin = 'suggestion' WHERE query_pk = ? AND doc_pk = ? "
                       "AND annotator = ?", [query_pk, doc_pk, annotator.strip()])
            db.execute("INSERT INTO label_events (at, annotator, query_pk, doc_pk, field, old, new) "
                       "VALUES (?, ?, ?, ?, 'origin', 'human', ?)",
                       [store.now(), annotator.strip(), query_pk, doc_pk, f"suggestion of judge run {run_id}"])
    return grade

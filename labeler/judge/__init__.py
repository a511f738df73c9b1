"""LLM judges: a registry of versioned judges and rubrics, judge runs, the calibration gate, suggestions.

A judge is registered under a versioned name (``relevance.v1``) with its prompt template, the
pydantic model of its answer and a parser; built-ins register the same way as extensions. Its
*rubric* (the instructions inside the prompt) is editable: each saved edit is a new version named
``{judge}/r{n}`` with a content hash, and every run stores the judge, the rubric name, hash and text,
the model, the temperature and its parameters. Runs go through ``labeler.llm`` (cache, concurrency,
retries, cost estimate): a rerun or ``resume_run`` pays only for what is missing. ``judge_labels``
keeps per item the grade, score, verdict, rationale, claim list and the ``llm_calls`` hash of the
raw response. A run over the *unlabeled* pairs is allowed only for a judge configuration (judge,
rubric hash, model, temperature) whose calibration run on labeled pairs passes the gate; its grades
become **suggestions**, which become labels only when a human accepts them (``origin='suggestion'``).
An **alignment** (``align_judge``) builds candidate versions (few-shot examples, LLM rubric revisions)
from the dev split's labels and registers one only when it beats the current version beyond chance.
A **stress test** (``stress_judge``) grades perturbed copies of human grade-0 chunks; the gate refuses
a judge that obeys an instruction planted in a passage.
"""

from .align import AlignResult, align_judge
from .calibration import Agreement, Comparison, compare_runs, drift, run_agreement
from .candidates import ALIGN_REVISION_PROMPT_V1, Candidate
from .data import (
    TAGS,
    ComparisonData,
    Disagreement,
    comparison_data,
    data_version,
    disagreements,
    human_answers,
    human_grades,
    retrievals_for,
    retrievers,
    run_grades,
    tag_counts,
    tag_item,
)
from .gate import (
    GATE_DEFAULTS,
    GateResult,
    Suggestion,
    accept_suggestion,
    gate,
    gate_settings,
    set_gate_settings,
    suggestions_for,
)
from .items import ON_SETS, select_items
from .lineage import lineage
from .registry import (
    ANSWER_FIELDS,
    ANSWER_RELEVANCE_PROMPT_V1,
    ANSWER_RELEVANCE_RUBRIC_V1,
    FAITHFULNESS_PROMPT_V1,
    FAITHFULNESS_RUBRIC_V1,
    JUDGES,
    KINDS,
    RELEVANCE_PROMPT_V1,
    RELEVANCE_RUBRIC_V1,
    VERDICTS,
    AnswerRelevanceJudgment,
    Claim,
    FaithfulnessJudgment,
    Judge,
    JudgeItem,
    Rubric,
    Verdict,
    faithfulness_verdict,
    get_judge,
    get_rubric,
    register_judge,
    rubrics,
    save_rubric,
)
from .runs import AnswerVerdicts, Stability, judge_answers, resume_run, run_judge, stability
from .store import JudgeRun, get_run, list_checks, list_runs
from .stress import PERTURBATIONS, PLANTED_INSTRUCTION, StressResult, perturb, stress_judge

__all__ = [
    "Agreement",
    "Comparison",
    "compare_runs",
    "drift",
    "run_agreement",
    "ANSWER_FIELDS", "ANSWER_RELEVANCE_PROMPT_V1", "ANSWER_RELEVANCE_RUBRIC_V1", "FAITHFULNESS_PROMPT_V1",
    "FAITHFULNESS_RUBRIC_V1", "GATE_DEFAULTS", "JUDGES", "KINDS", "ON_SETS", "RELEVANCE_PROMPT_V1",
    "RELEVANCE_RUBRIC_V1", "TAGS", "VERDICTS", "AnswerRelevanceJudgment", "Claim", "ComparisonData", "Disagreement",
    "FaithfulnessJudgment", "GateResult", "Judge", "JudgeItem", "JudgeRun", "Rubric", "Stability", "Suggestion",
    "Verdict", "accept_suggestion", "comparison_data", "data_version", "disagreements", "faithfulness_verdict",
    "gate", "gate_settings", "get_judge", "get_rubric", "get_run", "human_answers", "human_grades", "list_runs",
    "register_judge", "resume_run", "judge_answers", "AnswerVerdicts", "retrievals_for", "retrievers", "rubrics", "run_grades", "run_judge",
    "save_rubric", "select_items", "set_gate_settings", "stability", "suggestions_for", "tag_counts", "tag_item",
    "ALIGN_REVISION_PROMPT_V1", "AlignResult", "Candidate", "align_judge", "lineage", "PERTURBATIONS", "PLANTED_INSTRUCTION", "StressResult", "list_checks", "perturb", "stress_judge",
]

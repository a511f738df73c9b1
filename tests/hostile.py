"""A database in which every logged or user-written field carries markup that a browser would act on
if the app interpreted it: for tests/test_app_escape.py (AppTest) and tests/e2e/test_no_tracking.py
(a real browser and a tracker server).

The data takes every shape that has a branch of its own on some page: two retrievers, both with
hostile names and none called production; a logs file with a hostile name; metadata keys and values
and outcome signals (feedback text, thumbs, rating) in every record; topics built over the hostile
questions; a judge batch the provider refused with hostile error text; a judge run over all
traffic; hostile model, persona and annotator names and rubric text (judge and rubric names come
from the code's registry, not from data).

``payload(base, field)`` is, in one string, a markdown image, an HTML ``<img>``, a markdown link, a
``javascript:`` link, a bare URL, a ``www.`` autolink, a Streamlit colour directive, a material icon
and a formula; every URL points at ``base`` with a path that names the field, so a request that
reaches the tracker says which field leaked. The database is built through the public API only:
ingest, label writes, synthetic questions and judge runs against the fake OpenAI server.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, replace
from pathlib import Path

import labeler
import labeler.labels as labels
from labeler import judge, llm, synth, topics
from tests.fake_openai import FakeOpenAI, grade_responder

LEAD = "lead"
QUOTE = "Refunds are paid within five days."  # in every chunk, so the generator's quotes check out
TOPIC_WORDS = ("refund policy for damaged parcels", "shipping times to islands")
N_LOGGED = 6  # q0..q3 labeled by both (q0 and q1 conflict), q4 flagged by the annotator, q5 open


def payload(base: str, field: str) -> str:
    """Every kind of markup that would fetch ``base`` (or run script) if it were interpreted."""
    return (f"![x]({base}/md-{field}) <img src=\"{base}/html-{field}\"> [c]({base}/link-{field}) "
            f"[j](javascript:fetch('{base}/js-{field}')) {base}/bare-{field} www.example.com "
            f":red[{field}] :material/home: $x^2$ {field}")


def annotator_name(base: str) -> str:
    """A hostile annotator name that still fits the sign-in box (80 characters)."""
    name = f"![x]({base}/md-name) <img src={base}/html-name>"
    assert len(name) <= 80, name
    return name


def file_name(base: str) -> str:
    """A hostile name for an uploaded log file."""
    return f"![x]({base}/md-file) <img src={base}/html-file> [c]({base}/link-file).jsonl"


def log_records(base: str, prefix: str = "") -> list[dict]:
    def p(field: str) -> str:
        return payload(base, prefix + field)

    # every record names its (hostile) retriever, so none is called production and pages that need one
    # ask; the questions come in two kinds, so that topics have two clusters to find
    records = [{"query_id": p(f"query_id-{i}"), "question": f"{p(f'question-{i}')} {TOPIC_WORDS[i % 2]}",
                "answer": p(f"answer-{i}"),
                "timestamp": f"2026-01-0{i + 1}T00:00:00Z", "retriever": p("retriever"),
                "metadata": {p("meta_key"): p(f"meta_value-{i}"), "tenant": p("tenant"), "thumbs": "down" if i % 2 else "up",
                             "rating": 1 + i % 5, "comment": p(f"feedback-{i}")},
                "escalated": p("escalated") if i % 3 == 0 else None, "outcome": {"failure": p(f"error-{i}")},
                "retrieved": [{"id": p(f"doc_id-{i}-{j}"), "title": p(f"title-{i}-{j}"),
                               "text": f"{p(f'chunk-{i}-{j}')} {QUOTE}", "score": round(0.9 - j / 10, 2)}
                              for j in range(3)]}
               for i in range(N_LOGGED)]
    # a second retriever over the labeled queries
    records += [{**r, "retriever": p("retriever_b"), "retrieved": r["retrieved"][::-1]} for r in records[:4]]
    return records


@dataclass
class Hostile:
    path: Path
    base: str
    lead: str
    annotator: str
    open_pk: int  # the logged query nobody labeled: it has the judge's suggestions
    synthetic_pks: list[int]  # [accepted, pending, pending]

    def p(self, field: str) -> str:
        return payload(self.base, field)


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def build(path: Path, base: str) -> Hostile:
    """The hostile database at ``path``; every URL in it points at ``base``."""
    def p(field: str) -> str:
        return payload(base, field)

    db = labeler.connect(path)
    annotator = annotator_name(base)
    labels.add_annotator(db, LEAD, "lead")
    labels.add_annotator(db, annotator, "annotator")
    labeler.set_setting(db, "overlap_fraction", 1.0)
    labeler.set_setting(db, "queue_order", "oldest")

    labeler.ingest_logs(db, _write_jsonl(path.with_name("hostile-logs.jsonl"), log_records(base)),
                        name=file_name(base), mapping={"signal.error": "outcome.failure"})  # a mapped signal
    corpus = [{"id": p(f"corpus_id-{k}"), "title": p(f"corpus_title-{k}"), "text": f"{p(f'corpus_text-{k}')} {QUOTE}"}
              for k in range(4)]
    labeler.ingest_corpus(db, _write_jsonl(path.with_name("hostile-corpus.jsonl"), corpus))
    pks = [db.execute("SELECT pk FROM queries WHERE query_id = ?", [p(f"query_id-{i}")]).fetchone()[0]
           for i in range(N_LOGGED)]

    truth: dict[tuple[str, str], int] = {}
    for i, pk in enumerate(pks[:5]):
        lead_item = labels.get_item(db, pk, LEAD)
        for j, c in enumerate(lead_item.chunks):
            grade = (i + j) % 4
            truth[(lead_item.question, c.text)] = grade
            labels.set_grade(db, pk, c.doc_pk, LEAD, grade)
            # the annotator agrees except on the first chunk of q0 and q1 (two grades apart: a conflict)
            labels.set_grade(db, pk, c.doc_pk, annotator, (grade + 2) % 4 if i < 2 and j == 0 else grade)
        labels.set_status(db, pk, LEAD, "submitted")
        labels.set_query_fields(db, pk, annotator, expected_answer=p(f"expected-{i}"), notes=p(f"notes-{i}"))
        if i < 4:
            labels.set_status(db, pk, annotator, "submitted")
        else:
            labels.set_status(db, pk, annotator, "flagged", reason=p("flag_reason"))

    with FakeOpenAI() as server:
        config = llm.LLMConfig(base_url=server.url, api_key="sk-test-hostile", model=p("model"), timeout_s=5,
                               max_retries=1, backoff_base_s=0.001, backoff_max_s=0.01, concurrency=4)

        # synthetic questions: three stored (one accepted, two left pending), one rejected by the quote check
        counter = itertools.count()

        def generator(request: dict) -> dict:
            k = next(counter)
            quote = p("quote") if k == 3 else QUOTE
            word = ("alpha", "bravo", "charlie", "delta")[k]  # digits alone would make TF-IDF twins
            return {"questions": [{"question": p(f"synthetic_question-{word}"), "answer": p(f"synthetic_answer-{k}"),
                                   "quotes": [quote], "type": "fact"}]}

        server.responder = generator
        options = synth.SynthOptions(n=4, per_chunk=1, seed=1, duplicate_threshold=1.0, max_question_chars=2000,
                                     persona=p("persona"))
        generated = synth.generate(db, config, options)
        stored = list(generated.stored)
        assert len(stored) == 3 and len(generated.rejected) == 1, generated.summary
        synth.review(db, stored[0], "accept", reviewer=LEAD)

        # judge runs: a perfect one, a +1-biased one (disagreements, compare), then pre-labels (suggestions)
        judge.save_rubric(db, "relevance.v1", f"Grade how well the chunk answers. {p('rubric')}", author=LEAD)
        judge.set_gate_settings(db, min_value=-1.0, min_ci_low=-1.0, min_pairs=1, human_overlap=False)
        for shift, tokens in ((0, None), (1, 999)):
            graded = grade_responder(lambda q, c: truth.get((q, c)), shift=shift)
            server.responder = lambda request, graded=graded: {**graded(request), "rationale": p("rationale")}
            if shift:  # between the two: a batch run the provider refuses, with its own (hostile) error text
                refused = judge.run_judge(db, replace(config, max_tokens=555), "relevance.v1", limit=2, batch=True)
                for batch_id in list(server.batch.batches):
                    server.batch.advance(batch_id, "failed", errors=[p("batch_error")])
                collected = llm.batch.collect(db, config, run_id=refused.id)
                assert collected.failed and any(p("batch_error") in n for n in collected.notes), collected
            judge.run_judge(db, config if tokens is None else replace(config, max_tokens=tokens), "relevance.v1")
        pre = judge.run_judge(db, config, "relevance.v1", on="unlabeled")
        assert pre.done >= 3, pre
        # every logged query judged: the Metrics page's numbers for all traffic
        everything = judge.run_judge(db, config, "relevance.v1", on="all")
        assert everything.status == "done", everything
    topics.build_topics(db, k=2, by=LEAD)
    db.close()
    return Hostile(path=path, base=base, lead=LEAD, annotator=annotator, open_pk=pks[5], synthetic_pks=stored)

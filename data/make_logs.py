#!/usr/bin/env python3
"""Build the bundled demo retrieval logs and golden set for labeler.

The data set lives inside the package, in ``labeler/demo_data/``, so that it ships in the wheel and
``labeler demo`` finds it wherever labeler is installed; this script stays out of the package.

Reads (from labeler/demo_data/):
    corpus.jsonl     help-center chunks  {"id", "title", "text", "source"}
    questions.jsonl  logged questions    {"question", "timestamp", "answer"?, "relevant",
                                          "grades", "expected_answer"?}
Writes:
    logs.jsonl       one line per question line, in the same order:
                     {"timestamp", "question", "answer"?, "retrieved": [{"id", "score", "text"}, ...]}
                     (top 8 chunks of a TF-IDF retriever; no labels)
    golden.jsonl     the first 50 distinct answerable questions (file order):
                     {"question", "relevance": {id: grade}, "relevant_ids": [...], "expected_answer"}

The retriever is plain TF-IDF (scikit-learn) over "title + text" with cosine similarity.
It is deliberately simple, so it sometimes misses the right chunk; the script prints how often.

Deterministic and idempotent: no randomness, ties broken by chunk id, keys sorted,
UTF-8 without ASCII escaping, "\\n" line endings. Run from anywhere:

    python data/make_logs.py
"""
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

DATA = Path(__file__).resolve().parent.parent / "labeler" / "demo_data"
CORPUS = DATA / "corpus.jsonl"
QUESTIONS = DATA / "questions.jsonl"
LOGS = DATA / "logs.jsonl"
GOLDEN = DATA / "golden.jsonl"

TOP_K = 8
GOLDEN_SIZE = 50
SCORE_DECIMALS = 4
MIN_MISS_RATE = 0.15  # the demo should show the retriever missing relevant chunks sometimes


def read_jsonl(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"{path.name}:{n}: invalid JSON: {e}")
    return rows


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")


def validate(corpus, questions):
    ids = [c["id"] for c in corpus]
    if len(ids) != len(set(ids)):
        sys.exit("corpus.jsonl: duplicate chunk ids")
    known = set(ids)
    by_text = {}
    for n, q in enumerate(questions, 1):
        where = f"questions.jsonl:{n}"
        for key in ("question", "timestamp", "relevant", "grades"):
            if key not in q:
                sys.exit(f"{where}: missing field {key!r}")
        for doc_id, grade in q["grades"].items():
            if doc_id not in known:
                sys.exit(f"{where}: unknown chunk id {doc_id!r} in grades")
            if grade not in (1, 2, 3):
                sys.exit(f"{where}: grade for {doc_id} must be 1, 2 or 3")
        graded_relevant = {d for d, g in q["grades"].items() if g >= 2}
        if set(q["relevant"]) != graded_relevant:
            sys.exit(f"{where}: 'relevant' must equal the chunks graded >= 2")
        # repeated questions must carry identical labels
        labels = (json.dumps(q["grades"], sort_keys=True), q.get("expected_answer"))
        if by_text.setdefault(q["question"], labels) != labels:
            sys.exit(f"{where}: repeated question has different grades/expected_answer")


def build_retriever(corpus):
    vectorizer = TfidfVectorizer(lowercase=True, stop_words="english", sublinear_tf=True)
    doc_matrix = vectorizer.fit_transform([c["title"] + "\n" + c["text"] for c in corpus])
    return vectorizer, doc_matrix


def retrieve(vectorizer, doc_matrix, corpus, query):
    # rows are L2-normalised, so the dot product is the cosine similarity
    scores = (doc_matrix @ vectorizer.transform([query]).T).toarray().ravel()
    scores = np.round(scores, SCORE_DECIMALS)
    order = sorted(range(len(corpus)), key=lambda i: (-scores[i], corpus[i]["id"]))
    return [
        # "+ 0.0" turns a possible -0.0 into 0.0 so the output never contains "-0.0"
        {"id": corpus[i]["id"], "score": float(scores[i]) + 0.0, "text": corpus[i]["text"]}
        for i in order[:TOP_K]
    ]


def relevant_ids(relevance):
    return sorted((d for d, g in relevance.items() if g >= 2), key=lambda d: (-relevance[d], d))


def main():
    corpus = read_jsonl(CORPUS)
    questions = read_jsonl(QUESTIONS)
    validate(corpus, questions)
    vectorizer, doc_matrix = build_retriever(corpus)

    cache = {}  # identical question text -> identical retrieval
    logs = []
    for q in questions:
        if q["question"] not in cache:
            cache[q["question"]] = retrieve(vectorizer, doc_matrix, corpus, q["question"])
        row = {"timestamp": q["timestamp"], "question": q["question"], "retrieved": cache[q["question"]]}
        if q.get("answer"):
            row["answer"] = q["answer"]
        logs.append(row)
    write_jsonl(LOGS, logs)

    # golden set + retrieval quality stats over distinct answerable questions
    golden, seen = [], set()
    answerable = miss_any = miss_all = 0
    answerable_lines = miss_any_lines = 0
    for q in questions:
        if not q["relevant"]:
            continue
        got = {r["id"] for r in cache[q["question"]]}
        missed = [d for d in q["relevant"] if d not in got]
        answerable_lines += 1
        miss_any_lines += bool(missed)
        if q["question"] in seen:
            continue
        seen.add(q["question"])
        answerable += 1
        miss_any += bool(missed)
        miss_all += len(missed) == len(q["relevant"])
        if len(golden) < GOLDEN_SIZE:
            if not q.get("expected_answer"):
                sys.exit(f"golden question without expected_answer: {q['question']!r}")
            relevance = {d: q["grades"].get(d, 0) for d in sorted(got)}
            relevance.update({d: q["grades"][d] for d in missed})
            golden.append({
                "question": q["question"],
                "relevance": relevance,
                "relevant_ids": relevant_ids(relevance),
                "expected_answer": q["expected_answer"],
            })
    write_jsonl(GOLDEN, golden)

    counts = Counter(q["question"] for q in questions)
    distinct = len(counts)
    repeated = sum(1 for n in counts.values() if n > 1)
    rate = miss_any / answerable if answerable else 0.0
    print(f"chunks:                       {len(corpus)}")
    print(f"question lines:               {len(questions)}")
    print(f"distinct questions:           {distinct} ({repeated} asked more than once)")
    print(f"answerable (distinct):        {answerable}")
    print(f"relevant chunk missed in top {TOP_K}: {miss_any}/{answerable} = {rate:.1%} "
          f"(all relevant missed: {miss_all}/{answerable} = {miss_all / max(answerable, 1):.1%}; "
          f"per line: {miss_any_lines}/{answerable_lines} = {miss_any_lines / max(answerable_lines, 1):.1%})")
    print(f"wrote {LOGS.name} ({len(logs)} lines), {GOLDEN.name} ({len(golden)} lines)")
    if rate < MIN_MISS_RATE:
        print(f"WARNING: miss rate below {MIN_MISS_RATE:.0%}; the demo retriever looks too perfect",
              file=sys.stderr)


if __name__ == "__main__":
    main()

"""Benchmark: the corpus search (FTS5 BM25 in SQLite) at a million chunks.

Generates N chunks of about 100 words from a vocabulary with Zipf-like frequencies (rank r has
weight 1 / r^1.1), ingests them with ``labeler.ingest_corpus`` (the index is filled by the
documents table's triggers as the rows arrive) in a child process, and reports ingest time, the
index's size (bytes of the FTS5 tables, from dbstat) and that process's peak RSS. Then, in a second
child process: ``search_text`` over 200 questions of 3-8 words, and ``search_missed`` over 200
logged queries (10 retrieved chunks each, graded, 2 of them relevant), p50/p95 in ms and peak RSS;
``first_ms`` is the first ``search_missed`` of the process, which fits the latent semantic space
when the corpus is in its range (200 to 20,000 chunks: try ``--docs 20000``).
With ``--trigger-cost N`` it also ingests N chunks into a database whose index triggers were
dropped, and the same N with the triggers, to measure what keeping the index costs the ingest.
Prints one JSON document.

    python tests/bench/bench_search.py [--docs 1000000] [--queries 200] [--trigger-cost 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def vocabulary(size: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: dict[str, None] = {}
    while len(words) < size:
        n = int(rng.integers(3, 11))
        words["".join(rng.choice(letters, n))] = None
    return list(words)


def zipf_p(size: int, s: float = 1.1) -> np.ndarray:
    w = 1.0 / np.arange(1, size + 1) ** s
    return w / w.sum()


def make_corpus(path: Path, docs: int, words: int, vocab: list[str], seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = zipf_p(len(vocab))
    voc = np.array(vocab, dtype=object)
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, docs, 10_000):
            n = min(10_000, docs - start)
            ids = rng.choice(len(vocab), size=(n, words), p=p)
            title_ids = rng.choice(len(vocab), size=(n, 4), p=p)
            lines = []
            for i in range(n):
                lines.append(json.dumps({"id": f"c{start + i}", "title": " ".join(voc[title_ids[i]]),
                                         "text": " ".join(voc[ids[i]])}))
            f.write("\n".join(lines) + "\n")


def make_log(path: Path, queries: int, docs: int, vocab: list[str], seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    p = zipf_p(len(vocab))
    questions = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(queries):
            question = " ".join(vocab[j] for j in rng.choice(len(vocab), int(rng.integers(3, 9)), p=p)) + "?"
            questions.append(question)
            chunks = rng.choice(docs, 10, replace=False)
            f.write(json.dumps({"query_id": f"b{i}", "question": question,
                                "retrieved": [{"id": f"c{c}", "score": round(1 - r / 20, 3)}
                                              for r, c in enumerate(chunks)]}) + "\n")
    return questions


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def child_ingest(db_path: str, corpus: str, drop_triggers: bool) -> dict:
    import labeler

    db = labeler.connect(db_path)
    if drop_triggers:
        for name in ("documents_fts_insert", "documents_fts_update", "documents_fts_delete"):  # no index at all
            db.execute(f"DROP TRIGGER {name}")
    start = time.perf_counter()
    labeler.ingest_corpus(db, corpus)
    out = {"ingest_s": round(time.perf_counter() - start, 2), "peak_rss_mb": peak_rss_mb()}
    rows = db.execute("SELECT name, sum(pgsize) FROM dbstat WHERE name LIKE 'documents_fts%' GROUP BY name").fetchall()
    out["fts_bytes"] = {name: size for name, size in rows}
    out["fts_mb"] = round(sum(size for _, size in rows) / 1e6, 1)
    out["documents_mb"] = round(db.execute("SELECT sum(pgsize) FROM dbstat WHERE name = 'documents'").fetchone()[0] / 1e6, 1)
    out["db_file_mb"] = round(os.path.getsize(db_path) / 1e6, 1)
    return out


def child_search(db_path: str, log: str, questions_file: str) -> dict:
    import labeler
    from labeler.labels.writes import set_grade
    from labeler.search import labeled_queries, search_missed, search_text

    db = labeler.connect(db_path)
    labeler.ingest_logs(db, log)
    for pk, _ in labeled_queries(db) or [(r[0], None) for r in db.execute("SELECT pk FROM queries")]:
        docs = [r[0] for r in db.execute("SELECT doc_pk FROM retrievals WHERE query_pk = ? ORDER BY rank", [pk])]
        for rank, doc_pk in enumerate(docs):
            set_grade(db, pk, doc_pk, "bench", 2 if rank in (0, 3) else 0)
    questions = json.loads(Path(questions_file).read_text())
    search_text(db, questions[0])  # warm the page cache once
    text_ms = []
    for q in questions:
        start = time.perf_counter()
        search_text(db, q, 10)
        text_ms.append((time.perf_counter() - start) * 1000)
    missed_ms = []
    for pk, _ in labeled_queries(db):
        start = time.perf_counter()
        search_missed(db, pk, 10)
        missed_ms.append((time.perf_counter() - start) * 1000)

    def pct(values: list[float]) -> dict:
        return {"n": len(values), "p50_ms": round(float(np.percentile(values, 50)), 1),
                "p95_ms": round(float(np.percentile(values, 95)), 1), "max_ms": round(max(values), 1)}

    from labeler.search import latent

    # the first search_missed of a process fits the latent space when the corpus is in its range
    missed = pct(missed_ms) | {"first_ms": round(missed_ms[0], 1) if missed_ms else None,
                               "latent_space": latent.LSA_MIN_DOCS <= db["documents"].count <= latent.LSA_MAX_DOCS}
    return {"search_text": pct(text_ms), "search_missed": missed, "peak_rss_mb": peak_rss_mb()}


def run_child(*args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--words", type=int, default=100)
    ap.add_argument("--vocab", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--trigger-cost", type=int, default=0, help="also measure the triggers' ingest cost on N chunks")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dir", help="work folder (default: a temporary one, deleted)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        kind, *rest = a.child
        result = child_ingest(rest[0], rest[1], rest[2] == "1") if kind == "ingest" else child_search(*rest)
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        work = Path(tmp)
        vocab = vocabulary(a.vocab, a.seed)
        report: dict = {"benchmark": "search", "docs": a.docs, "words_per_doc": a.words, "vocab": a.vocab,
                        "zipf_s": 1.1}
        if a.trigger_cost:
            small = work / "small.jsonl"
            make_corpus(small, a.trigger_cost, a.words, vocab, a.seed + 1)
            without = run_child("ingest", str(work / "without.db"), str(small), "1")
            with_ = run_child("ingest", str(work / "with.db"), str(small), "0")
            report["trigger_cost"] = {"docs": a.trigger_cost, "ingest_s_without_index": without["ingest_s"],
                                      "ingest_s_with_index": with_["ingest_s"],
                                      "ratio": round(with_["ingest_s"] / without["ingest_s"], 2)}
        start = time.perf_counter()
        corpus = work / "corpus.jsonl"
        make_corpus(corpus, a.docs, a.words, vocab, a.seed)
        report["generate_s"] = round(time.perf_counter() - start, 1)
        report["corpus_file_mb"] = round(corpus.stat().st_size / 1e6, 1)
        db_path = str(work / "bench.db")
        report["ingest"] = run_child("ingest", db_path, str(corpus), "0")
        corpus.unlink()
        log = work / "log.jsonl"
        questions = make_log(log, a.queries, a.docs, vocab, a.seed + 2)
        qfile = work / "questions.json"
        qfile.write_text(json.dumps(questions))
        report["search"] = run_child("search", db_path, str(log), str(qfile))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""Export formats: a registry of writers, and the built-in jsonl, trec, beir, ragas and csv."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from .. import db as store
from .golden import ExportError, GoldenSet, column_lists, ids_json

Writer = Callable[[GoldenSet, str], dict[str, bytes]]


@dataclass(frozen=True)
class ExportFormat:
    """A registered export format: ``write(golden, stem)`` returns {relative name: bytes};
    ``directory`` formats write several files into the folder PATH, the others one file at PATH.
    ``runs``: which logged rankings it embeds: ``none``, ``one`` (the named or default retriever's:
    several retrievers without a default are then an error) or ``each`` (every retriever's, or
    only the named one's)."""

    name: str
    write: Writer
    directory: bool
    description: str
    runs: str = "none"


FORMATS: dict[str, ExportFormat] = {}


def register_format(name: str, write: Writer, *, directory: bool = False, description: str = "",
                    runs: str = "none") -> ExportFormat:
    """Register an export format under ``name`` (an existing name raises ExportError); ``runs``: see
    :class:`ExportFormat`."""
    if name in FORMATS:
        raise ExportError(f"export format {name!r} is already registered; pick another name")
    if runs not in ("none", "one", "each"):
        raise ExportError(f"runs={runs!r} is unknown; use one of: none, one, each")
    FORMATS[name] = ExportFormat(name, write, directory, description or (write.__doc__ or "").strip().split("\n")[0],
                                 runs)
    return FORMATS[name]


def _json_line(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False) + "\n"


def _none(value: Any) -> Any:
    return None if value is None or (isinstance(value, float) and value != value) else value


def _write_jsonl(g: GoldenSet, stem: str) -> dict[str, bytes]:
    """The golden set, one query per line (this tool's golden JSONL)."""
    relevance: dict[int, dict[str, int]] = {}
    for pk, doc, grade in zip(*column_lists(g.pairs, "query_pk", "doc_id", "grade"), strict=True):
        relevance.setdefault(pk, {})[doc] = int(grade)
    relevant: dict[int, list[str]] = {}
    rel = g.relevant()
    for pk, doc in zip(*column_lists(rel, "query_pk", "doc_id"), strict=True):
        relevant.setdefault(pk, []).append(doc)
    out = io.StringIO()
    for pk, qid, question, expected, origin, annotators, conflict, faithful, answers, split in zip(*column_lists(
            g.queries, "query_pk", "query_id", "question", "expected_answer", "origin", "annotators", "conflict",
            "answer_faithful", "answer_relevant", "split"), strict=True):
        line = {
            "query_id": qid, "question": question, "relevant_ids": relevant.get(pk, []),
            "relevance": relevance.get(pk, {}), "expected_answer": _none(expected), "origin": origin,
            "annotators": list(annotators), "conflict": bool(conflict), "answer_faithful": _none(faithful),
            "answer_relevant": _none(answers)}
        if split is not None:  # dev / holdout once a split is set (labeler split); no key before
            line["split"] = split
        out.write(_json_line(line))
    return {stem: out.getvalue().encode()}


def _check_ids(values: pd.Series, what: str, fmt: str, pattern: str) -> None:
    found = values[values.astype(str).str.contains(pattern, regex=True)]
    if len(found):
        raise ExportError(f"{what} {found.iloc[0]!r} contains white space, which the {fmt} format cannot hold; "
                          "export jsonl or csv instead")


def run_file_name(retriever: str) -> str:
    """The trec run file of ``retriever``: ``run.<retriever>.txt``, the name kept when it is made of
    letters, digits, ``.``, ``_`` and ``-``; otherwise every other character becomes ``_`` and 8
    hex digits of its sha256 are appended, so two names never share a file."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", retriever)
    if safe != retriever or not safe.strip("."):
        safe = f"{safe}-{hashlib.sha256(retriever.encode()).hexdigest()[:8]}"
    return f"run.{safe}.txt"


def _write_trec(g: GoldenSet, stem: str) -> dict[str, bytes]:
    """TREC qrels (qid 0 docid grade) and one run per retriever (qid Q0 docid rank score tag).

    ``qrels.txt`` holds every judged pair of the queries that have a relevant chunk, whatever
    retriever ran them; ``run.<retriever>.txt`` (see :func:`run_file_name`) each retriever's
    ranking of those it ran (the named one only, when one is named)."""
    # Queries without a relevant chunk are left out (trec_eval would score them 0, labeler leaves
    # them out of the means), and a run holds only the queries its retriever ran, so
    # `trec_eval -l<threshold> qrels.txt run.X.txt` (no -c) reproduces `labeler metrics --retriever X`.
    with_rel = set(g.pairs.loc[g.pairs["grade"] >= g.threshold, "query_pk"].tolist())
    pairs = g.pairs[g.pairs["query_pk"].isin(with_rel)]
    _check_ids(pairs["query_id"], "query_id", "TREC", r"\s")
    _check_ids(pairs["doc_id"], "doc_id", "TREC", r"\s")
    qrels = "".join(f"{q} 0 {d} {gr}\n" for q, d, gr in zip(*column_lists(pairs, "query_id", "doc_id", "grade"), strict=True))
    files = {f"{stem}/qrels.txt": qrels.encode()}
    for retriever in g.run_names:
        whole, ran = g.run_of(retriever)
        run = whole[whole["query_pk"].isin(with_rel & ran)]
        _check_ids(run["doc_id"], "doc_id", "TREC", r"\s")
        name = run_file_name(retriever)
        tag = name.removeprefix("run.").removesuffix(".txt")
        # trec_eval orders by score (ties: doc id descending) and ignores the rank column, so the score
        # is the position counted from the bottom: distinct and descending in the logged rank order.
        depth = run.groupby("query_pk")["rank"].transform("max") if len(run) else run["rank"]
        lines = [f"{q} Q0 {d} {int(r)} {int(top) + 1 - int(r)} {tag}\n"
                 for q, d, r, top in zip(*column_lists(run, "query_id", "doc_id", "rank"), depth.tolist(), strict=True)]
        files[f"{stem}/{name}"] = "".join(lines).encode()
    return files


def _write_beir(g: GoldenSet, stem: str) -> dict[str, bytes]:
    """BEIR layout: corpus.jsonl, queries.jsonl, qrels/test.tsv (relevant pairs) and qrels/test.graded.tsv.

    BEIR's evaluator (pytrec_eval at relevance level 1) counts every grade > 0 as relevant, so
    ``test.tsv`` holds only the pairs with grade >= threshold (with their grades): its recall,
    precision, MAP and hit rate are then ``labeler metrics``'. Its nDCG misses the gain of grades
    below the threshold, which ``labeler metrics`` counts (as trec_eval does): ``test.graded.tsv``
    holds every judged grade, zeros included, of the same queries (those with a relevant chunk),
    and BEIR's nDCG on it is ours."""
    _check_ids(g.pairs["query_id"], "query_id", "BEIR", r"[\t\r\n]")
    _check_ids(g.pairs["doc_id"], "doc_id", "BEIR", r"[\t\r\n]")
    judged = ids_json(g.pairs["doc_pk"])
    docs = g.db.execute(f"SELECT doc_id, title, text FROM documents d WHERE (text IS NOT NULL AND {store.visible('d')}) "
                        "OR pk IN (SELECT value FROM json_each(?)) ORDER BY doc_id", [judged]).fetchall()
    corpus = "".join(_json_line({"_id": d, "title": t or "", "text": x or ""}) for d, t, x in docs)
    queries = "".join(_json_line({"_id": q, "text": t}) for q, t in zip(*column_lists(g.queries, "query_id", "question"),
                                                                        strict=True))
    # queries without a relevant chunk are left out of both files, as of labeler's means (BEIR's
    # loader keeps only the queries that have qrels, and pytrec_eval would score them 0)
    relevant = g.pairs["grade"] >= g.threshold
    graded = g.pairs[g.pairs["query_pk"].isin(set(g.pairs.loc[relevant, "query_pk"].tolist()))]
    header = "query-id\tcorpus-id\tscore\n"

    def tsv(pairs: pd.DataFrame) -> bytes:
        return (header + "".join(f"{q}\t{d}\t{gr}\n" for q, d, gr in zip(
            *column_lists(pairs, "query_id", "doc_id", "grade"), strict=True))).encode()

    return {f"{stem}/corpus.jsonl": corpus.encode(), f"{stem}/queries.jsonl": queries.encode(),
            f"{stem}/qrels/test.tsv": tsv(g.pairs[relevant]), f"{stem}/qrels/test.graded.tsv": tsv(graded)}


def _write_ragas(g: GoldenSet, stem: str) -> dict[str, bytes]:
    """Ragas EvaluationDataset rows (JSONL): user_input, retrieved_contexts, retrieved_context_ids, response,
    reference, reference_contexts, reference_context_ids.

    The ids are Ragas' SingleTurnSample fields read by IDBasedContextRecall and
    IDBasedContextPrecision: the retrieved chunk ids in rank order (as retrieved_contexts) and the
    golden relevant ids (grade >= threshold, highest grade first, as reference_contexts)."""
    rel = g.relevant()
    texts = g.texts(list(rel["doc_pk"]) + list(g.run["doc_pk"]))
    retrieved: dict[int, list[tuple[str, str]]] = {}
    for pk, doc_pk, doc in zip(*column_lists(g.run, "query_pk", "doc_pk", "doc_id"), strict=True):
        retrieved.setdefault(pk, []).append((doc, texts.get(doc_pk, (None, None))[1] or ""))
    reference: dict[int, list[tuple[str, str]]] = {}
    for pk, doc_pk, doc in zip(*column_lists(rel, "query_pk", "doc_pk", "doc_id"), strict=True):
        reference.setdefault(pk, []).append((doc, texts.get(doc_pk, (None, None))[1] or ""))
    out = io.StringIO()
    for pk, question, answer, expected in zip(*column_lists(g.queries, "query_pk", "question", "answer", "expected_answer"),
                                              strict=True):
        got, ref = retrieved.get(pk, []), reference.get(pk, [])
        out.write(_json_line({"user_input": question, "retrieved_contexts": [t for _, t in got],
                              "retrieved_context_ids": [d for d, _ in got], "response": _none(answer),
                              "reference": _none(expected), "reference_contexts": [t for _, t in ref],
                              "reference_context_ids": [d for d, _ in ref]}))
    return {stem: out.getvalue().encode()}


# OWASP's CSV injection advice: a spreadsheet runs a cell that starts with one of these as a formula
# (=HYPERLINK(...) sends data away, =cmd|... runs programs); a leading ' makes it text.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(text: str) -> str:
    """``text`` with a leading ``'`` when it starts with ``= + - @``, a tab or a carriage return, so that
    a spreadsheet shows it as text instead of running it (OWASP's advice on CSV injection). Only
    for text cells: numbers are written as numbers (a score of -0.5 stays -0.5)."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


CSV_COLUMNS = ("query_id", "question", "doc_id", "grade", "relevant", "rank", "score", "n_annotators", "conflict",
               "adjudicated", "origin")  # and "split" (dev / holdout) once a split is set (labeler split)


def _write_csv(g: GoldenSet, stem: str) -> dict[str, bytes]:
    """One row per judged (query, chunk) pair, retrieved chunks first in rank order.

    Text cells (query_id, question, doc_id, origin) go through :func:`spreadsheet_safe`."""
    safe = spreadsheet_safe
    question = dict(zip(*column_lists(g.queries, "query_pk", "question"), strict=True))
    origin = dict(zip(*column_lists(g.queries, "query_pk", "origin"), strict=True))
    split = dict(zip(*column_lists(g.queries, "query_pk", "split"), strict=True))
    pairs = g.pairs.assign(unranked=g.pairs["rank"].isna()).sort_values(
        ["query_id", "unranked", "rank", "doc_id"], kind="stable")
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    with_split = any(v is not None for v in split.values())
    w.writerow((*CSV_COLUMNS, "split") if with_split else CSV_COLUMNS)
    w.writerows(
        [safe(qid), safe(question[pk]), safe(doc), grade, int(grade >= g.threshold), "" if rank != rank else int(rank),
         "" if score is None or score != score else repr(float(score)), n, int(conflict), int(adjudicated),
         safe(origin[pk]), *([split[pk]] if with_split else [])]
        for pk, qid, doc, grade, rank, score, n, conflict, adjudicated in zip(*column_lists(
            pairs, "query_pk", "query_id", "doc_id", "grade", "rank", "score", "n_annotators", "conflict",
            "adjudicated"), strict=True))
    return {stem: out.getvalue().encode()}


register_format("jsonl", _write_jsonl)
register_format("trec", _write_trec, directory=True, runs="each")
register_format("beir", _write_beir, directory=True)
register_format("ragas", _write_ragas, runs="one")
register_format("csv", _write_csv, runs="one")


def format_named(fmt: str) -> ExportFormat:
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; use one of: {', '.join(FORMATS)}")
    return FORMATS[fmt]

"""Writing an export: files, the manifest, the ``exports`` row, and the download archive."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import threading
import time
import zipfile
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sqlite_utils

from .. import db as store
from ..accounts.manage import audit, require
from ..metrics.bootstrap import aggregate
from ..metrics.evaluate import n_without_relevant as count_without_relevant
from ..metrics.evaluate import per_query
from ..metrics.judgments import COUNT_COLUMNS
from ..report.load import data_token
from ..report.specs import DEFAULT_KS, DEFAULT_METRICS, expand_specs
from ..version import version
from .formats import format_named
from .golden import ExportError, GoldenSet, golden_counts, golden_set

MANIFEST_VERSION = 1
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


@dataclass
class ExportResult:
    """A written export: ``files`` {relative name: sha256} (relative to the manifest's folder),
    ``manifest`` as written to ``manifest_path``, ``version`` its row in ``exports``."""

    format: str
    path: str
    manifest_path: str | None
    version: int
    files: dict[str, str]
    counts: dict[str, Any]
    manifest: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _metrics(g: GoldenSet, retriever: str | None = None) -> dict[str, Any] | None:
    """The retrieval metrics of the exported queries for ``retriever`` (default: the golden set's),
    as ``labeler metrics --json`` prints them; None without a retriever."""
    retriever = retriever or g.retriever
    if retriever is None:
        return None
    specs = expand_specs(DEFAULT_METRICS, DEFAULT_KS)
    whole, ran = g.run_of(retriever)
    pairs = g.pairs[g.pairs["query_pk"].isin(ran)]
    qrels = pd.DataFrame({"query": pairs["query_pk"].to_numpy(np.int64), "doc": pairs["doc_pk"].to_numpy(np.int64),
                          "grade": pairs["grade"].to_numpy(np.int64)})
    run = pd.DataFrame({"query": whole["query_pk"].to_numpy(np.int64), "doc": whole["doc_pk"].to_numpy(np.int64),
                        "rank": whole["rank"].to_numpy(np.int64)})
    judged = [f"judged@{k}" for k in DEFAULT_KS]
    per_q = per_query(run, qrels, [*specs, *judged], threshold=g.threshold)
    return {"n_queries": len(per_q), "n_without_relevant": count_without_relevant(per_q), "threshold": g.threshold,
            "retriever": retriever, "metrics": aggregate(per_q[[*specs, *COUNT_COLUMNS]], n_resamples=1000, seed=0),
            "judged": {s: float(per_q[s].mean()) if per_q[s].notna().any() else None for s in judged}}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _build(db: sqlite_utils.Database, fmt: str, stem: str, **filters: Any) -> tuple[GoldenSet, dict[str, bytes]]:
    spec = format_named(fmt)
    g = golden_set(db, required=spec.runs == "one", **filters)
    return g, spec.write(g, stem)


def _record(db: sqlite_utils.Database, fmt: str, path: str, g: GoldenSet, files: dict[str, bytes],
            *, manifest_name: str | None = None, by: str | None = None) -> tuple[int, dict[str, Any]]:
    """Insert the ``exports`` row (and the audit row: who exported) and return (version, manifest)."""
    hashes = {name: _sha(data) for name, data in sorted(files.items())}
    digest = _sha("".join(f"{h}  {n}\n" for n, h in hashes.items()).encode())
    counts = g.counts()
    created = store.now()
    with store.transaction(db):
        version_no = db.execute(
            "INSERT INTO exports (format, path, sha256, filters, counts, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            [fmt, path, digest, store.dumps(g.filters), store.dumps(counts), created]).lastrowid
        audit(db.conn, created, by, "export", path, f"{fmt} version {version_no}")
    manifest = {
        "manifest_version": MANIFEST_VERSION, "labeler_version": version(), "version": version_no, "format": fmt,
        "created_at": created, "sha256": digest, "files": hashes, "filters": g.filters, "threshold": g.threshold,
        "grade_names": store.get_setting(db, "grade_names"), "counts": counts, "metrics": _metrics(g),
    }
    if format_named(fmt).runs == "each":  # the metrics of every run file written
        manifest["run_metrics"] = {r: _metrics(g, r) for r in g.run_names}
    return version_no, manifest


def export_golden(db: sqlite_utils.Database, path: str | Path, fmt: str = "jsonl", *, origin: str | None = None,
                  min_annotators: int = 1, include_unreviewed_synthetic: bool = False,
                  retriever: str | None = None, judge_run: int | None = None, by: str | None = None) -> ExportResult:
    """Write the golden set to ``path`` in ``fmt`` (see ``FORMATS``) and ``PATH.manifest.json``.

    Single-file formats (jsonl, ragas, csv) write the file ``path``; folder formats (trec: qrels.txt
    and one run.<retriever>.txt per retriever, or only ``retriever``'s; beir: corpus.jsonl, queries.jsonl, qrels/test.tsv and qrels/test.graded.tsv) write
    into the folder ``path``.
    The same database and options give the same bytes. Filters as in :func:`golden_set`.
    ``retriever``: None = the default retriever (ragas and csv embed its ranking: several retrievers
    without a default raise RetrieverError, as does a named one that logged nothing).
    Exports hold every annotator's consolidated grades: leads only (``by``; ``None`` is the local
    operator). ``judge_run``: a relevance run over all traffic; the manifest then cites the
    all-traffic estimate (``all_traffic``, :func:`labeler.estimate.report.all_traffic_report`, with
    labels drawn at random only); the golden set itself stays human-only.
    """
    require(db, by, "lead", "exporting the golden set")
    cited = None
    if judge_run is not None:  # computed first: a refused estimate writes nothing
        from ..estimate.report import all_traffic_report

        cited = all_traffic_report(db, judge_run, retriever=retriever, random_only=True).to_dict()
    spec = format_named(fmt)
    path = Path(path)
    if not path.parent.exists():
        raise ExportError(f"cannot write {path}: folder {path.parent} does not exist (create it first)")
    if spec.directory and path.exists() and not path.is_dir():
        raise ExportError(f"{path} is a file; the {fmt} format writes a folder: give a folder path")
    if not spec.directory and path.is_dir():
        raise ExportError(f"{path} is a folder; the {fmt} format writes one file: give a file path")
    g, files = _build(db, fmt, path.name, origin=origin, min_annotators=min_annotators,
                      include_unreviewed_synthetic=include_unreviewed_synthetic, retriever=retriever)
    base = path.parent
    manifest_path = Path(str(path) + ".manifest.json")
    # every file goes to a temporary name next to its target first; only when all of them and the
    # manifest are written (and the export recorded) are they renamed, data first, manifest last,
    # so a failure (a full disk, a busy database) never leaves data without its manifest
    token = f".{os.getpid()}-{time.monotonic_ns()}.tmp"
    staged: list[tuple[Path, Path]] = []
    try:
        try:
            for name, data in files.items():
                target = base / name
                target.parent.mkdir(parents=True, exist_ok=True)
                staged.append((target.with_name(target.name + token), target))
                staged[-1][0].write_bytes(data)
        except OSError as e:
            raise ExportError(f"cannot write {path}: {e.strerror}") from None
        version_no, manifest = _record(db, fmt, str(path), g, files, by=by)
        if cited is not None:
            manifest["all_traffic"] = cited
        staged.append((manifest_path.with_name(manifest_path.name + token), manifest_path))
        staged[-1][0].write_text(json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        for temporary, target in staged:
            os.replace(temporary, target)
    finally:
        for temporary, _ in staged:
            with contextlib.suppress(OSError):
                temporary.unlink()
    return ExportResult(fmt, str(path), str(manifest_path), version_no, manifest["files"], manifest["counts"],
                        manifest)


def export_data(db: sqlite_utils.Database, fmt: str = "jsonl", *, target: str = "stdout", origin: str | None = None,
                min_annotators: int = 1, include_unreviewed_synthetic: bool = False,
                retriever: str | None = None, by: str | None = None) -> tuple[bytes, ExportResult]:
    """A single-file format's export as bytes, for the caller to send somewhere (``labeler export -o -``
    writes them to standard output): (data, result). Recorded in ``exports`` with path ``target``;
    no manifest file is written (``result.manifest`` is it). Folder formats raise ExportError.
    Leads only (``by``; ``None`` is the local operator)."""
    require(db, by, "lead", "exporting the golden set")
    spec = format_named(fmt)
    if spec.directory:
        raise ExportError(f"the {fmt} format writes a folder of files, not one stream: give a folder path")
    g, files = _build(db, fmt, target, origin=origin, min_annotators=min_annotators,
                      include_unreviewed_synthetic=include_unreviewed_synthetic, retriever=retriever)
    version_no, manifest = _record(db, fmt, target, g, files, by=by)
    return files[target], ExportResult(fmt, target, None, version_no, manifest["files"], manifest["counts"], manifest)


_COUNTS: OrderedDict[tuple, dict[str, Any]] = OrderedDict()  # (data token, filters) -> counts
_COUNTS_LOCK = threading.Lock()
_COUNTS_KEPT = 16


def export_counts(db: sqlite_utils.Database, *, origin: str | None = None, min_annotators: int = 1,
                  include_unreviewed_synthetic: bool = False, reuse: bool = False) -> dict[str, Any]:
    """What an export with these filters would contain (queries, pairs, ...), without writing.
    ``reuse``: answer from memory while nothing was committed to the database file since the same
    counts were computed (the Data page asks on every rerun; each costs seconds at 100k queries)."""
    token = data_token(db) if reuse else None
    key = None if token is None else (token, origin, min_annotators, bool(include_unreviewed_synthetic))
    if key is not None:
        with _COUNTS_LOCK:
            if key in _COUNTS:
                _COUNTS.move_to_end(key)
                return json.loads(json.dumps(_COUNTS[key]))  # a copy: the caller may change it
    counts = golden_counts(db, origin=origin, min_annotators=min_annotators,
                           include_unreviewed_synthetic=include_unreviewed_synthetic)
    if key is not None:
        with _COUNTS_LOCK:
            _COUNTS[key] = json.loads(json.dumps(counts))
            while len(_COUNTS) > _COUNTS_KEPT:
                _COUNTS.popitem(last=False)
    return counts


def archive_name(fmt: str, name: str = "golden") -> str:
    """The download's file name: ``golden.jsonl``, ``golden-ragas.jsonl``, ``golden.csv``, or a zip
    (``golden-trec.zip``) for folder formats."""
    spec = format_named(fmt)
    if spec.directory:
        return f"{name}-{fmt}.zip"
    return {"jsonl": f"{name}.jsonl", "ragas": f"{name}-ragas.jsonl", "csv": f"{name}.csv"}.get(fmt, f"{name}.{fmt}")


def export_archive(db: sqlite_utils.Database, fmt: str = "jsonl", *, name: str = "golden",
                   origin: str | None = None, min_annotators: int = 1, include_unreviewed_synthetic: bool = False,
                   retriever: str | None = None, by: str | None = None) -> tuple[str, bytes, ExportResult]:
    """The export as one download: (file name, bytes, result). Single-file formats give the file
    itself; folder formats a zip of the folder plus its manifest (fixed timestamps, so the same
    database gives the same zip). Recorded in ``exports`` with path ``download:<file name>``.
    Leads only (``by``; ``None`` is the local operator)."""
    require(db, by, "lead", "exporting the golden set")
    spec = format_named(fmt)
    stem = archive_name(fmt, name).removesuffix(".zip")
    g, files = _build(db, fmt, stem, origin=origin, min_annotators=min_annotators,
                      include_unreviewed_synthetic=include_unreviewed_synthetic, retriever=retriever)
    filename = stem if not spec.directory else f"{stem}.zip"
    version_no, manifest = _record(db, fmt, f"download:{filename}", g, files, by=by)
    if spec.directory:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            # the manifest's created_at/version differ per export; everything else is reproducible
            for arcname, data in [*sorted(files.items()),
                                  (f"{stem}.manifest.json", (json.dumps(manifest, ensure_ascii=False, indent=2)
                                                             + "\n").encode())]:
                info = zipfile.ZipInfo(arcname, date_time=_ZIP_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                z.writestr(info, data)
        data = buf.getvalue()
    else:
        data = files[stem]
    result = ExportResult(fmt, f"download:{filename}", None, version_no, manifest["files"], manifest["counts"], manifest)
    return filename, data, result

"""The lineage of a judge's rubric versions for the Judge page: parent, origin, the examples each
carries, and the numbers the stored alignments and stress tests give it (``judge_checks``)."""

from __future__ import annotations

from typing import Any

import sqlite_utils

from .registry import rubrics
from .store import list_checks


def lineage(db: sqlite_utils.Database, judge: str) -> list[dict[str, Any]]:
    """Every rubric version of ``judge``, oldest first, with its lineage and numbers: ``parent`` (the
    version it was derived from), ``origin``, the ``examples`` it carries, and from the stored
    alignments its validation kappa (as the registered winner, or as the version a later alignment
    started from) and holdout kappa, and from the newest stress test its planted-instruction rate."""
    versions = rubrics(db, judge)
    aligned = list_checks(db, "align", judge=judge)
    stresses = list_checks(db, "stress", judge=judge)
    out = []
    for r in versions:
        row: dict[str, Any] = {
            "version": r.name, "parent": f"{judge}/r{r.parent}" if r.parent else None, "origin": r.origin or
            ("built-in" if r.version == 1 else "edited"), "hash": r.hash, "created_at": r.created_at,
            "author": r.author, "examples": r.examples or [], "kappa": None, "kappa_ci": None, "kappa_n": None,
            "kappa_from": None, "holdout_kappa": None, "planted_rate": None}
        for check in aligned:  # newest first
            result = check["result"]
            won = next((c for c in result.get("candidates", []) if c["name"] == result.get("winner")), None)
            if won is not None and result.get("registered") == r.name:
                stat, where = won["statistics"]["cohen_kappa"], f"alignment {check['id']} (validation, as the winner)"
                holdout = result.get("holdout") or {}
                row["holdout_kappa"] = (holdout.get("winner") or {}).get("cohen_kappa", {}).get("value")
            elif check["rubric"] == r.name and result.get("candidates"):
                stat, where = result["candidates"][0]["current"]["cohen_kappa"], \
                    f"alignment {check['id']} (validation, as the current version)"
            else:
                continue
            row.update(kappa=stat.get("value"), kappa_ci=[stat.get("ci_low"), stat.get("ci_high")],
                       kappa_n=stat.get("n"), kappa_from=where)
            break
        stress = next((s for s in stresses if s["rubric_hash"] == r.hash), None)
        if stress is not None:
            row["planted_rate"] = stress["result"]["perturbations"]["planted_instruction"].get("rate")
        out.append(row)
    return out

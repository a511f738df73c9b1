"""The fake Langfuse's score lists (tests/fake_tracestores.py serves them): ``GET /api/public/v3/scores``
and ``GET /api/public/v2/scores`` answering as Langfuse's own routes do (langfuse
``web/src/pages/api/public/v3/scores/index.ts`` and ``v2/scores/index.ts``, the zod schemas
``GetScoresQueryV3``/``APIScoreSchemaV3`` and ``GetScoresQueryV2``/``APIScoreSchemaV2`` in
``packages/shared``, ``listScoresV3ForPublicApi`` in ``repositories/scores.ts``).

v3: unknown parameters are a 400 (the schema is strict), ``limit`` 1-100 (default 50), comma-separated
filters (``traceId``, ``observationId`` only with ``traceId``, ``source`` of API/EVAL/ANNOTATION,
``name``, ``dataType``, ``id``), newest first by (timestamp, id), paged by a base64url cursor
``{"v": 1, "lastTimestamp", "lastId"}`` in ``meta.cursor`` (absent on the last page); each score has
the core fields and a polymorphic ``value`` (a number, a boolean, a label), plus ``comment``,
``configId``, ``metadata`` with the field group ``details``, ``subject`` (``{kind: trace|observation,
id, traceId}``) with ``subject``, ``authorUserId``, ``queueId`` with ``annotation``.

v2: ``page`` (from 1) and ``limit`` (1-100, default 50), one ``traceId``, ``observationId``
comma-separated, one ``source``; newest first; ``meta`` ``{page, limit, totalItems, totalPages}``;
each score as stored (``value`` a number, ``stringValue`` the label of a boolean or categorical
score, ``traceId``, ``observationId``...) with its trace's ``trace`` fields.

A page holds at most ``page_size`` scores whatever ``limit`` asks (v2 then says that limit in its
``meta``, so its page count stays true), so a few scores make several pages.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any

PROJECT = "proj-1"
WHEN = "2026-12-05T09:30:00.000Z"
V3_PARAMS = {"limit", "cursor", "fields", "id", "name", "source", "dataType", "environment", "configId", "queueId",
             "authorUserId", "value", "valueMin", "valueMax", "traceId", "sessionId", "observationId", "experimentId",
             "fromTimestamp", "toTimestamp", "userId", "traceTags"}
V3_FIELDS = ("core", "details", "subject", "annotation")
SOURCES = ("API", "EVAL", "ANNOTATION")
TYPES = ("NUMERIC", "CATEGORICAL", "BOOLEAN", "CORRECTION", "TEXT")


def langfuse_score(trace: str, name: str, value: Any, *, observation: str | None = None, data_type: str | None = None,
                   source: str = "API", comment: str | None = None, metadata: dict | None = None,
                   timestamp: str = WHEN, score_id: str | None = None) -> dict[str, Any]:
    """A score as Langfuse stores it (the v2 fields): a boolean is 1/0 with "True"/"False" as its
    label, a categorical or text score has its label in ``stringValue``."""
    body = {"id": score_id or f"score-{trace}-{observation or 'trace'}-{name}-{source}", "traceId": trace,
            "observationId": observation, "name": name, "value": value, "source": source, "comment": comment,
            "metadata": metadata or {}, "timestamp": timestamp}
    if data_type:
        body["dataType"] = data_type
    return stored(body)


def stored(body: dict[str, Any]) -> dict[str, Any]:
    """A score with every field Langfuse keeps, from what was sent (``POST /api/public/scores``'s body
    or ``langfuse_score``'s)."""
    value, label = body.get("value"), body.get("stringValue")
    data_type = body.get("dataType") or ("CATEGORICAL" if isinstance(value, str) else
                                         "BOOLEAN" if isinstance(value, bool) else "NUMERIC")
    if data_type == "BOOLEAN":
        value = 1.0 if value in (True, 1, 1.0, "true", "True") else 0.0
        label = "True" if value else "False"
    elif data_type in ("CATEGORICAL", "TEXT") and isinstance(value, str):
        label, value = value, 0.0
    when = body.get("timestamp") or WHEN
    return {"id": body["id"], "projectId": PROJECT, "environment": body.get("environment") or "default",
            "name": body["name"], "value": value, "stringValue": label, "dataType": data_type,
            "source": body.get("source") or "API", "authorUserId": body.get("authorUserId"),
            "comment": body.get("comment"), "metadata": body.get("metadata") or {}, "configId": body.get("configId"),
            "queueId": body.get("queueId"), "executionTraceId": None, "createdAt": when, "updatedAt": when,
            "timestamp": when, "traceId": body.get("traceId"), "observationId": body.get("observationId"),
            "sessionId": body.get("sessionId"), "datasetRunId": body.get("datasetRunId")}


def v1_score(score: dict[str, Any]) -> dict[str, Any]:
    """A stored score as ``GET /api/public/traces/{traceId}`` lists it (``ScoreV1``: no session or dataset run)."""
    return {k: v for k, v in score.items() if k not in ("sessionId", "datasetRunId", "executionTraceId")}


def _newest_first(scores: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(scores, key=lambda s: (s["timestamp"], s["id"]), reverse=True)


def _csv(query: dict[str, list[str]], name: str) -> list[str] | None:
    values = [v.strip() for v in ",".join(query.get(name) or []).split(",") if v.strip()]
    return values or None


def _limit(query: dict[str, list[str]]) -> int | None:
    text = (query.get("limit") or ["50"])[-1] or "50"
    try:
        limit = int(text)
    except ValueError:
        return None
    return limit if 1 <= limit <= 100 else None


def _bad(message: str) -> tuple[int, Any]:
    return 400, {"message": "Invalid request data", "error": [{"message": message}]}


def v3_value(score: dict[str, Any]) -> Any:
    kind = score["dataType"]
    if kind == "NUMERIC":
        return score["value"]
    if kind == "BOOLEAN":
        return score["value"] == 1
    return score["stringValue"]


def v3_score(score: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    out = {k: score[k] for k in ("id", "projectId", "name", "dataType", "source", "timestamp", "environment",
                                 "createdAt", "updatedAt")}
    out["value"] = v3_value(score)
    if "details" in fields:
        out.update(comment=score["comment"], configId=score["configId"], metadata=score["metadata"])
    if "annotation" in fields:
        out.update(authorUserId=score["authorUserId"], queueId=score["queueId"])
    if "subject" in fields:
        if score["observationId"]:
            out["subject"] = {"kind": "observation", "id": score["observationId"],
                              **({"traceId": score["traceId"]} if score["traceId"] else {})}
        elif score["sessionId"]:
            out["subject"] = {"kind": "session", "id": score["sessionId"]}
        else:
            out["subject"] = {"kind": "trace", "id": score["traceId"]}
    return out


def list_v3(scores: list[dict[str, Any]], query: dict[str, list[str]], page_size: int) -> tuple[int, Any]:
    unknown = sorted(set(query) - V3_PARAMS)
    if unknown:
        return _bad(f"Unrecognized key(s) in object: {', '.join(repr(k) for k in unknown)}")
    limit = _limit(query)
    if limit is None:
        return _bad("limit: a whole number from 1 to 100")
    fields = _csv(query, "fields") or ["core"]
    if any(f not in V3_FIELDS for f in fields):
        return _bad(f"fields: allowed {', '.join(V3_FIELDS)}")
    for name, allowed in (("source", SOURCES), ("dataType", TYPES)):
        if any(v.upper() not in allowed for v in _csv(query, name) or []):
            return _bad(f"Invalid {name} value. Allowed: {', '.join(allowed)}")
    if query.get("userId") or query.get("traceTags"):
        return _bad("userId and traceTags filters require a trace JOIN and are not supported in v3")
    traces, observations = _csv(query, "traceId"), _csv(query, "observationId")
    if observations and not traces:
        return _bad("observationId filter requires traceId — observation IDs are scoped to a trace")
    if sum(bool(_csv(query, k)) for k in ("traceId", "sessionId", "experimentId")) > 1:
        return _bad("At most one of traceId, sessionId, experimentId may be specified")
    after = None
    if query.get("cursor"):
        try:
            text = query["cursor"][-1]
            cursor = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            after = (cursor["lastTimestamp"], cursor["lastId"]) if cursor.get("v") == 1 else None
        except (ValueError, KeyError, TypeError, binascii.Error):
            after = None
        if after is None:
            return _bad("Invalid cursor format")
    wanted = {k: {v.upper() for v in vs} if k in ("source", "dataType") else set(vs)
              for k in ("id", "name", "source", "dataType", "traceId", "observationId", "sessionId")
              if (vs := _csv(query, k))}
    found = [s for s in _newest_first(scores) if all(s.get(k) in vs for k, vs in wanted.items())]
    if after is not None:
        found = [s for s in found if (s["timestamp"], s["id"]) < after]
    size = min(limit, page_size)
    page = found[:size]
    meta: dict[str, Any] = {"limit": limit}
    if len(found) > size:
        last = page[-1]
        meta["cursor"] = base64.urlsafe_b64encode(json.dumps(
            {"v": 1, "lastTimestamp": last["timestamp"], "lastId": last["id"]}).encode()).decode().rstrip("=")
    return 200, {"data": [v3_score(s, fields) for s in page], "meta": meta}


def list_v2(scores: list[dict[str, Any]], query: dict[str, list[str]], page_size: int) -> tuple[int, Any]:
    one = {k: v[-1] for k, v in query.items()}
    limit = _limit(query)
    try:
        page = int(one.get("page") or 1)
    except ValueError:
        page = 0
    if limit is None or page < 1:
        return _bad("page: from 1; limit: from 1 to 100")
    if one.get("source") and one["source"] not in SOURCES:
        return _bad(f"source: one of {', '.join(SOURCES)}")
    observations = set(_csv(query, "observationId") or [])
    found = [s for s in _newest_first(scores)
             if all(s.get(k) == one[k] for k in ("traceId", "source", "name", "dataType", "sessionId") if one.get(k))
             and (not observations or s["observationId"] in observations)]
    size = min(limit, page_size)
    items = found[(page - 1) * size:page * size]
    fields = _csv(query, "fields") or ["score", "trace"]
    trace = {"trace": {"userId": None, "tags": [], "environment": "default", "sessionId": None}} \
        if "trace" in fields else {}
    data = [{**{k: v for k, v in s.items() if not (k == "value" and s["dataType"] == "TEXT")}, **trace}
            for s in items]
    return 200, {"data": data, "meta": {"page": page, "limit": size, "totalItems": len(found),
                                        "totalPages": math.ceil(len(found) / size)}}

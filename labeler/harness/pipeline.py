"""Run a RAG pipeline over many questions: a Python callable (``module:function``) or an HTTP endpoint,
with bounded concurrency and a timeout per question. A question whose call raises, returns something
unreadable or overruns the timeout becomes a miss (no retrieved chunks) carrying its error; the run
itself never fails because of one question.

A pipeline's output is read like a production log record (``labeler.ingest`` aliases and ``--map``):
``(docs, answer)``, a list of docs, or a dict such as ``{"answer": ..., "contexts": [...]}``. A doc is
a dict (``id``/``doc_id``/``chunk_id``..., or ``metadata.id``), an object with such attributes (a
LangChain ``Document``, a LlamaIndex ``NodeWithScore``), or a bare string; a doc with no id is
identified by its text, as ingest does.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import LabelerError
from ..ingest.mapping import CHUNK_ALIASES, LOG_ALIASES, canonical
from ..ingest.validate import unwrap_chunk, validate_log


class Output(tuple):
    """``(chunk ids, answer)`` as a pipeline returned them; ``.texts`` holds the chunk texts (None
    where the pipeline gave only an id), for judging the answer's faithfulness."""

    texts: list

    def __new__(cls, ids: list[str], answer: str | None, texts: list | None = None) -> Output:
        out = super().__new__(cls, (ids, answer))
        out.texts = texts if texts is not None else [None] * len(ids)
        return out
_ID_NAMES = tuple(a for a in CHUNK_ALIASES["id"] if "." not in a)


class PipelineError(LabelerError):
    """The pipeline cannot be set up: a bad ``module:function``, an import error, a bad URL."""


class OutputError(Exception):
    """One question's output could not be read (the question becomes a miss with this message)."""


@dataclass
class Answer:
    """One question's result: chunk ids in rank order, the generated answer, the seconds it took, and
    ``status`` ok / error / timeout / skipped (``error`` says why)."""

    docs: list[str]
    answer: str | None
    seconds: float
    status: str = "ok"
    error: str | None = None
    texts: list = field(default_factory=list)  # chunk texts in rank order, when the pipeline gave them


@dataclass
class Pipeline:
    """Something that answers a question: ``call(question) -> (chunk ids, answer)``. ``id`` names it in
    reports and baselines (the ``module:function`` or the URL); ``kind`` is callable, http or database."""

    id: str
    kind: str
    call: Callable[[str], Output]


# --- reading outputs -----------------------------------------------------------------------

_TEXT_NAMES = ("text", "content", "page_content", "chunk")


def _doc_record(doc: Any) -> Any:
    """A doc reduced to what identifies it (dict or string), so scores of exotic types never matter."""
    if isinstance(doc, str):
        return doc
    if isinstance(doc, Mapping):
        doc = unwrap_chunk(dict(doc))
        out = {k: doc[k] for k in _ID_NAMES if doc.get(k) is not None}
        if "document.id" in doc:
            out["document.id"] = doc["document.id"]
        if isinstance(doc.get("metadata"), Mapping):
            out["metadata"] = dict(doc["metadata"])
        text = next((doc[k] for k in _TEXT_NAMES if isinstance(doc.get(k), str)), None)
        if text is not None:  # kept for judging the answer's faithfulness
            out["text"] = text
        return out
    node = getattr(doc, "node", None)  # LlamaIndex NodeWithScore: the node holds the id and text
    if node is not None and not isinstance(node, str | Mapping):
        doc = node
    out = {k: getattr(doc, k) for k in _ID_NAMES if isinstance(getattr(doc, k, None), str | int)}
    meta = getattr(doc, "metadata", None)
    if isinstance(meta, Mapping):
        out["metadata"] = dict(meta)
    text = next((getattr(doc, k) for k in _TEXT_NAMES if isinstance(getattr(doc, k, None), str)), None)
    if text is not None:  # identifies a doc without an id, as ingest does
        out["text"] = text
    if not out:
        raise OutputError(f"a doc of type {type(doc).__name__} has no id attribute "
                          f"({', '.join(_ID_NAMES)}), no metadata id and no text")
    return out


def _doc_id(doc: Any, i: int) -> tuple[str, str | None]:
    record = {"question": "-", "retrieved": [_doc_record(doc)], "query_id": None, "answer": None,
              "timestamp": None, "retriever": None, "meta": None}
    try:
        rec = validate_log(record)
        return rec["ids"][0], (rec["texts"] or [None])[0]
    except Exception as e:  # ingest's field error: name the doc the way the pipeline returned it
        where = str(getattr(e, "field", "")).replace("retrieved[0]", f"docs[{i}]") or f"docs[{i}]"
        raise OutputError(f"{where}: {getattr(e, 'message', e)}") from None


def read_output(out: Any, mapping: dict[str, str] | None = None) -> Output:
    """Chunk ids (rank order, repeats dropped) and answer from what a pipeline returned.

    Accepts ``(docs, answer)``, a list of docs (no answer), or a dict mapped like an ingest log
    record (``retrieved``/``contexts``/``documents``..., ``answer``/``response``..., or ``mapping``).
    Raises OutputError saying what is wrong.
    """
    if isinstance(out, tuple) and len(out) == 2:
        docs, answer = out
    elif isinstance(out, Mapping):
        rec = canonical(dict(out), mapping or {})
        docs, answer = rec.get("retrieved"), rec.get("answer")
        if docs is None:
            names = ", ".join(LOG_ALIASES["retrieved"])
            raise OutputError(f"the response has no retrieved chunks (expected one of: {names}; or --map "
                              f"retrieved=PATH); keys: {', '.join(map(str, out))}")
    elif isinstance(out, list):
        docs, answer = out, None
    else:
        raise OutputError(f"expected (docs, answer), a list of docs or a dict; got {type(out).__name__}")
    if not isinstance(docs, list | tuple):
        raise OutputError(f"docs must be a list, got {type(docs).__name__}")
    ids: list[str] = []
    texts: list[str | None] = []
    seen: set[str] = set()
    for i, doc in enumerate(docs):
        cid, text = _doc_id(doc, i)
        if cid not in seen:  # a chunk retrieved twice counts at its best rank
            seen.add(cid)
            ids.append(cid)
            texts.append(text)
    if answer is not None and not isinstance(answer, str):
        answer = getattr(answer, "content", answer)  # chat messages carry the text in .content
        answer = answer if isinstance(answer, str) else json.dumps(answer, default=str)
    return Output(ids, answer, texts)


# --- building pipelines --------------------------------------------------------------------

def callable_pipeline(spec: str) -> Pipeline:
    """Import ``module:function`` (``module:obj.method`` works too) as a pipeline.

    The current directory is put on ``sys.path`` first (as uvicorn and gunicorn do), so a package in
    the repository under test imports without being installed. Raises PipelineError on a malformed
    spec, an import error (naming the exception) or a missing or non-callable attribute.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise PipelineError(f"--pipeline {spec!r}: expected MODULE:FUNCTION, e.g. mypkg.rag:answer")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        target: Any = importlib.import_module(module_name.strip())
    except Exception as e:  # any import-time failure of user code is the user's to fix
        first = str(e).splitlines()[0] if str(e) else ""
        raise PipelineError(f"--pipeline {spec!r}: cannot import {module_name!r}: "
                            f"{type(e).__name__}: {first}") from None
    for part in attr.strip().split("."):
        if not hasattr(target, part):
            raise PipelineError(f"--pipeline {spec!r}: {module_name} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise PipelineError(f"--pipeline {spec!r}: {attr} is a {type(target).__name__}, not a function")
    return function_pipeline(target, spec)


def function_pipeline(fn: Callable[[str], Any], name: str | None = None) -> Pipeline:
    """A Python function as a pipeline; an ``async def`` function runs on its own event loop in the
    worker thread. ``name`` defaults to ``module:qualname``."""
    if name is None:
        name = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__name__)}"

    def call(question: str) -> Output:
        out = fn(question)
        if inspect.isawaitable(out):
            out = asyncio.run(_awaited(out))
        return read_output(out)

    return Pipeline(name, "callable", call)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def http_pipeline(url: str, *, mapping: dict[str, str] | None = None, headers: Mapping[str, str] | None = None,
                  timeout: float | None = 30.0) -> Pipeline:
    """A pipeline served over HTTP: POST ``{"question": ...}`` as JSON to ``url``; the JSON response is
    read by :func:`read_output` with ``mapping`` (``--map`` paths, as in ingest). ``headers`` are
    sent with every request (e.g. Authorization). Proxies come from the environment, as usual."""
    if not url.startswith(("http://", "https://")):
        raise PipelineError(f"--endpoint {url!r}: expected an http:// or https:// URL")
    sent = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}

    def call(question: str) -> Output:
        body = json.dumps({"question": question}).encode()
        request = urllib.request.Request(url, data=body, headers=sent, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                data = response.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:200].decode("utf-8", "replace").strip()
            raise OutputError(f"HTTP {e.code} {e.reason}" + (f": {detail}" if detail else "")) from None
        except urllib.error.URLError as e:
            raise OutputError(f"cannot reach {url}: {e.reason}") from None
        try:
            out = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise OutputError(f"the response is not JSON ({e}): {data[:100]!r}") from None
        return read_output(out, mapping)

    return Pipeline(url, "http", call)


def parse_headers(pairs: Sequence[str]) -> dict[str, str]:
    """``--header 'Name: value'`` options as a dict; raises PipelineError on a malformed one."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition(":")
        if not sep or not name.strip():
            raise PipelineError(f"--header {pair!r}: expected 'Name: value', e.g. 'Authorization: Bearer $TOKEN'")
        out[name.strip()] = value.strip()
    return out


# --- running -------------------------------------------------------------------------------

def _describe(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    if isinstance(e, OutputError):  # our own message says it all; a user exception keeps its type
        return text[0] if text else "unreadable output"
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def run_pipeline(pipeline: Pipeline, questions: Sequence[str], *, concurrency: int = 8,
                 timeout: float | None = 30.0,
                 progress: Callable[[int, int], None] | None = None) -> list[Answer]:
    """Ask ``pipeline`` every question, at most ``concurrency`` at a time, and return one
    :class:`Answer` per question in order.

    Each question runs in its own daemon thread. A question still running ``timeout`` seconds after
    it started is recorded as a timeout and its slot goes to the next question at once; its thread
    is abandoned (Python cannot stop a thread) and its late result ignored, so a hanging pipeline
    costs threads, never the run. ``progress(done, total)`` is called as questions finish.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise PipelineError(f"concurrency must be a whole number >= 1, got {concurrency!r}")
    if timeout is not None and not timeout > 0:
        raise PipelineError(f"timeout must be a positive number of seconds, got {timeout!r}")
    n = len(questions)
    results: list[Answer | None] = [None] * n
    running: dict[int, float] = {}  # question index -> start time
    cond = threading.Condition()
    done = 0

    def finish(i: int, answer: Answer) -> None:
        nonlocal done
        if results[i] is None:  # the first of (result, timeout) wins
            results[i] = answer
            running.pop(i, None)
            done += 1
            cond.notify()

    def work(i: int, start: float) -> None:
        try:
            out = pipeline.call(questions[i])
            ids, text = out
            answer = Answer(ids, text, time.perf_counter() - start, texts=getattr(out, "texts", None) or [])
        except BaseException as e:  # noqa: BLE001 - one question's failure must not end the run
            answer = Answer([], None, time.perf_counter() - start, "error", _describe(e))
        with cond:
            finish(i, answer)

    reported = 0
    with cond:
        next_i = 0
        while done < n:
            while len(running) < concurrency and next_i < n:
                start = time.perf_counter()
                running[next_i] = start
                threading.Thread(target=work, args=(next_i, start), daemon=True,
                                 name=f"labeler-eval-{next_i}").start()
                next_i += 1
            wait = None if timeout is None or not running else \
                max(min(running.values()) + timeout - time.perf_counter(), 0.0)
            cond.wait(wait)
            if timeout is not None:
                now = time.perf_counter()
                for i, start in list(running.items()):
                    if now - start >= timeout:
                        finish(i, Answer([], None, now - start, "timeout", f"timed out after {timeout:g} s"))
            if progress is not None and done != reported:
                reported = done
                cond.release()  # never call out while holding the lock the workers need
                try:
                    progress(done, n)
                finally:
                    cond.acquire()
    return [r for r in results if r is not None]

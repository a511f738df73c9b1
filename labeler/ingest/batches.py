"""Reading a log file as batches of validated, keyed records, in this process or in a forked child
that parses while the parent writes (same batches, same order)."""

from __future__ import annotations

import gc
import io
import itertools
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..errors import IngestError
from ..privacy.records import StoredTexts, redact_batch
from ..privacy.redactor import Redactor
from . import formats
from .common import FieldError as _FieldError
from .fastlines import FastLines, Valid
from .mapping import LOG_ALIASES
from .readers import BadRecord, iter_records
from .validate import DEFAULT_RETRIEVER, RECORD_KEYS, hash_parts, question_columns, validate_log

BATCH = 2000
# the first batches are smaller (250, 500, 1000, then BATCH records): the writer waits for the
# first one, and with chunk texts the first batches are the slow ones (most texts new, each searched)
FIRST_BATCH = 250
# CSV columns that hold JSON (or a Python list's repr, as pandas writes lists): the chunks and meta
JSON_COLUMNS = (*LOG_ALIASES["retrieved"], "meta", "retrieved_context_ids", "reference_context_ids",
                "reference_contexts")

class Row(NamedTuple):  # a tuple: cheap to pass from the parsing process
    line: int
    rec: dict[str, Any]
    query_id: str
    content_hash: str
    line_key: str | None
    norm: tuple[str, int] | None  # the question's (norm_question, norm_key) (validate.question_columns), or None: the writer makes them


def content_hash(rec: dict[str, Any], *, exact: bool = False, rounded: list[float | None] | None = None) -> str:
    """What makes two records with one query id the same: question, answer, chunk ids and scores.
    Scores are rounded to 9 decimals, so that the same span exported as JSON (10 significant
    digits) and as Parquet (full doubles) is the same (``rounded``: those scores, made already by
    ``round_scores``); ``exact`` gives the hash of earlier versions, which used the scores as logged."""
    scores = rec["scores"] if exact else rounded if rounded is not None else \
        [None if v is None else round(v, 9) for v in rec["scores"]]
    return hash_parts(rec["question"], rec["answer"], list(zip(rec["ids"], scores, strict=True)))


_SCALE = 1e9  # 10 ** the decimals content_hash keeps


def round_scores(columns: list[list[float | None]]) -> list[list[float | None]]:
    """``[[round(v, 9) for v in scores] for scores in columns]`` (None stays None), the same
    floats, a sixth of the time: numpy scales, rounds to an integer and divides back. Where
    ``v * 1e9`` is below 2**43, the product is off by at most 2**-11, so a fraction not within
    1e-3 of a half rounds to the integer Python's exact decimal rounding gives; dividing that
    integer by 1e9 is correctly rounded, as is Python's conversion of the rounded decimal. Every
    other value (a near tie, a huge or non-finite one) is rounded by Python itself."""
    flat = list(itertools.chain.from_iterable(columns))
    if not flat:
        return [[] for _ in columns]
    nones = [i for i, v in enumerate(flat) if v is None] if None in flat else []
    with np.errstate(over="ignore", invalid="ignore"):  # huge values: rounded by Python below
        scaled = np.array(flat, dtype=np.float64) * _SCALE  # None becomes NaN: put back below
        whole = np.rint(scaled)
        unsure = np.flatnonzero(~(np.abs(np.abs(scaled - whole) - 0.5) > 1e-3) | ~(np.abs(scaled) < 2.0 ** 43))
    out = (whole / _SCALE).tolist()
    for i in unsure.tolist():
        v = flat[i]
        out[i] = None if v is None else round(v, 9)
    for i in nones:
        out[i] = None
    it = iter(out)
    return [list(itertools.islice(it, len(scores))) for scores in columns]


class _Keyer:
    """Gives each validated record its query id, content hash and (without an id) line key."""

    def __init__(self) -> None:
        self.ordinals: dict[str, int] = {}

    def key(self, line: int, rec: dict[str, Any], rounded: list[float | None] | None = None) -> Row:
        content = content_hash(rec, rounded=rounded)
        if rec["query_id"] is not None:
            # the question's columns are made by the writer, for the new queries only: the
            # parser sets the pace where chunk texts are logged, and has the longer task
            return Row(line, rec, rec["query_id"], content, None, None)
        norm = question_columns(rec["question"])
        qid = "q-" + hash_parts(norm[0], rec["retriever"], rec["ids"])[:16]
        raw = hash_parts(content, rec["timestamp"], rec["meta"])
        if rec["retriever"] != DEFAULT_RETRIEVER:
            # the same line logged by another retriever is another line (the default's keys are as before)
            raw = hash_parts(raw, rec["retriever"])
        n = self.ordinals.get(raw, 0)
        self.ordinals[raw] = n + 1
        # without an id, a different answer or score is another occurrence, never a conflict
        return Row(line, rec, qid, qid, f"{raw}#{n}", norm)



class Batch(NamedTuple):
    """One batch of a file: ``items`` ``(line, row or None, (field, message) or None, raw or None)``
    (a record skipped as not a retrieval is ``(line, None, None, reason)``), the bytes read so far,
    the chunk ids that no earlier batch of the file had (first seen first), and, when texts are
    sent apart (``texts_apart``), ``{chunk id: (text, title)}`` for the chunks whose text the file
    gives for the first time in this batch (the rows' own texts and titles are then None)."""

    items: list[tuple]
    bytes_read: int
    fresh_ids: list[str]
    texts: dict[str, tuple[str | None, str | None]] | None


TEXTS_SENT_MAX = 1_000_000  # chunk ids remembered as sent; past it they are forgotten (sent again)


def parsed_batches(path: Path, fmt: str, gz: bool, mapping: dict[str, str] | None, max_line_bytes: int,
                   keep_raw: bool, tool: str | None = None, redactor: Redactor | None = None,
                   texts_apart: bool = False) -> Iterator[Batch]:
    """Read, map, validate and key the records of a file, in batches (``Batch``). With a
    ``redactor`` every valid record is redacted before it is keyed (its ids and content hash are of
    what is stored), and problem messages and rejected records are scrubbed (``raw`` is None unless
    ``keep_raw``).

    ``texts_apart``: a chunk's text travels once, with the batch that first gives it, not with
    every row that retrieves it again (logs repeat their corpus: a chunk is retrieved tens of times,
    and its text was half of what crossed from the parsing process to the writer). Rows then carry
    no texts or titles; a chunk logged with a title and no text sends its title the same way."""
    json_columns = set(JSON_COLUMNS)
    if mapping and "retrieved" in mapping:
        json_columns.add(mapping["retrieved"].split(".", 1)[0])
    # plain JSON lines of one shape are decoded and checked in C (``fastlines``); where a rejected
    # record's raw form is kept, or records are mapped or read as a tool's, the general path reads
    fast = FastLines() if fmt == "jsonl" and not mapping and tool in (None, "plain") and not keep_raw else None
    records, bytes_read = iter_records(path, fmt, gz, max_line_bytes=max_line_bytes, json_columns=json_columns,
                                       fast=fast.decode if fast is not None else None)
    keyer = _Keyer()
    batch: list[tuple] = []
    seen: set[str] = set()
    stored = StoredTexts()  # the chunks whose text went with an earlier row (texts_apart)
    sent = stored.ids
    titled: set[str] = set()  # chunk ids whose title (without a text) went with an earlier row

    valid: list[int] = []  # where the batch's valid records wait to be keyed (scores rounded for all at once)
    size = min(FIRST_BATCH, BATCH)  # records in this batch (doubling up to BATCH)

    def done() -> Batch:
        if valid and redactor is not None:
            # at once: most records hold no value, and the batch's texts and ids are screened together
            redact_batch(redactor, [batch[i][1] for i in valid], stored if texts_apart else None)
        if valid:
            rounded = round_scores([batch[i][1]["scores"] for i in valid])
            for i, scores in zip(valid, rounded, strict=True):
                at, rec, _, raw = batch[i]
                batch[i] = (at, keyer.key(at, rec, scores), None, raw)
            valid.clear()
        order = dict.fromkeys(itertools.chain.from_iterable(item[1].rec["ids"] for item in batch
                                                            if item[1] is not None))
        new = set(order).difference(seen)  # in C; most ids of a big file were seen before
        fresh = [cid for cid in order if cid in new] if new else []
        if len(seen) > 1_000_000:
            seen.clear()  # only makes later lists longer than needed, never shorter
        seen.update(fresh)
        return Batch(batch, bytes_read(), fresh, take_texts(batch) if texts_apart else None)

    def take_texts(items: list[tuple]) -> dict[str, tuple[str | None, str | None]]:
        """The texts (and titles) of the batch's chunks not sent before, first given first;
        the rows keep none."""
        if len(sent) > TEXTS_SENT_MAX:
            stored.clear()
            titled.clear()
        out: dict[str, tuple[str | None, str | None]] = {}
        for item in items:
            row = item[1]
            if row is None:
                continue
            rec = row.rec
            texts, titles = rec["texts"], rec["titles"]
            if texts is None and titles is None:
                continue
            if sent.issuperset(rec["ids"]):  # every text sent before (most rows of a big file)
                rec["texts"] = rec["titles"] = None
                continue
            for i, cid in enumerate(rec["ids"]):
                text = texts[i] if texts is not None else None
                if text is not None:
                    if cid not in sent and (cid not in out or out[cid][0] is None):
                        title = titles[i] if titles is not None else None
                        # a title given before the text (without it) stays with the chunk
                        out[cid] = (text, title if title is not None or cid not in out else out[cid][1])
                elif titles is not None and titles[i] is not None and cid not in sent and cid not in titled \
                        and cid not in out:
                    out[cid] = (None, titles[i])
            rec["texts"] = rec["titles"] = None
        stored.keep(out)
        titled.update(cid for cid, (text, _) in out.items() if text is None)
        return out

    def problem(field: str, message: str, raw: Any) -> tuple:
        if redactor is None:
            return (line, None, (field, message), raw)
        return (line, None, (field, redactor.scrub(message)), redactor.scrub_value(raw) if keep_raw else None)

    for line, item, raw in formats.Reader(tool, mapping).read(records):
        if isinstance(item, formats.Skip):
            batch.append((line, None, None, item.reason))
        elif isinstance(item, BadRecord | _FieldError):
            batch.append(problem(item.field, item.message, raw))
        else:
            try:
                if type(item) is Valid:
                    rec = item.rec
                else:
                    rec = validate_log(item)
                    if fast is not None and raw is not item:  # a plain record (a tool's has no raw form)
                        fast.learn(raw)
                valid.append(len(batch))  # redacted and keyed in done()
                batch.append((line, rec, None, (redactor.scrub_value(raw) if redactor else raw) if keep_raw else None))
            except _FieldError as e:
                batch.append(problem(e.field, e.message, raw))
        if len(batch) >= size:
            yield done()
            batch = []
            size = min(BATCH, size * 2)
    yield done()


# files at least this big are parsed in a second process while this one writes (when it may fork)
PARALLEL_MIN_BYTES = 4 * 1024 * 1024
_QUEUED_BATCHES = 4  # batches in flight between the processes: bounds the memory


def may_fork() -> bool:
    """Forking is safe only from a single-threaded process (the CLI; not the Streamlit server), and
    only done on Linux (macOS frameworks are not fork-safe, which is why Python spawns there)."""
    return (sys.platform.startswith("linux") and (os.cpu_count() or 1) > 1
            and threading.active_count() == 1)


def _die_with_parent(parent: int) -> None:
    """Have the kernel kill this (forked) process when its parent dies, so that killing an ingest
    never leaves its parser running (Linux ``PR_SET_PDEATHSIG``); the parent may have died
    before this call, hence the check that follows it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's queue.get timeout notices instead
        pass
    if os.getppid() != parent:
        os._exit(1)


def pack(batch: Batch) -> bytes:
    """``batch`` as bytes for the writer's process (``unpack``). A row whose record has exactly
    ``RECORD_KEYS`` travels as a flat tuple of its values, not as a ``Row`` holding a dict, and the
    pickler keeps no memo (nothing in a batch refers to itself): 40k pooled records pickle in 0.10 s
    instead of 0.18 s. The parsing process sets the pace with chunk texts; the writer, which waits
    for it, unpickles a little longer (0.21 s instead of 0.17 s)."""
    items = []
    for item in batch.items:
        row = item[1]
        if row is not None and item[2] is None and item[3] is None and tuple(row.rec) == RECORD_KEYS:
            items.append((row.line, tuple(row.rec.values()), row.query_id, row.content_hash, row.line_key, row.norm))
        else:
            items.append(item)
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True  # no memo (its only loss: a value shared by two records travels twice)
    pickler.dump((items, batch.bytes_read, batch.fresh_ids, batch.texts))
    return out.getvalue()


def unpack(data: bytes) -> Batch:
    """The batch ``pack`` made."""
    items, bytes_read, fresh_ids, texts = pickle.loads(data)
    keys = RECORD_KEYS
    return Batch([(item[0], Row(item[0], dict(zip(keys, item[1], strict=True)), *item[2:]), None, None)
                  if len(item) == 6 else item for item in items], bytes_read, fresh_ids, texts)


def _produce(out: Any, args: tuple, parent: int) -> None:
    _die_with_parent(parent)
    gc.disable()
    try:
        for item in parsed_batches(*args):
            # packed here, not by the queue's feeder thread: the two threads of this process
            # took turns at the GIL, 0.3-1.0 s more of this process at 100k pooled records
            out.put(("batch", pack(item)))
        out.put(("done", None))
    except BaseException as e:  # noqa: BLE001 - everything is handed to the parent to raise
        try:
            out.put(("error", e))
        except Exception:  # noqa: BLE001 - an exception that cannot be pickled
            out.put(("error", IngestError(f"{type(e).__name__}: {e}")))


def parsed_batches_forked(*args: Any, idle: Callable[[], bool] | None = None) -> Iterator[Batch]:
    """``parsed_batches`` run in a forked child process, so that reading, JSON parsing, validation
    and hashing (half the work) run on another core while this process writes. The batches
    arrive in file order, so the result is the same as in one process. ``idle``: work to do while
    the next batch is not ready, a step at a time (it returns whether there may be more)."""
    ctx = multiprocessing.get_context("fork")
    channel = ctx.Queue(maxsize=_QUEUED_BATCHES)
    child = ctx.Process(target=_produce, args=(channel, args, os.getpid()), daemon=True, name="labeler-parse")
    child.start()
    try:
        while True:
            try:
                if idle is not None:
                    try:
                        kind, payload = channel.get_nowait()
                    except queue.Empty:
                        if idle():
                            continue
                        kind, payload = channel.get(timeout=1.0)  # nothing to do meanwhile: wait
                else:
                    kind, payload = channel.get(timeout=1.0)
            except queue.Empty:
                if not child.is_alive():
                    raise IngestError(f"the parsing process stopped unexpectedly (exit code {child.exitcode})") \
                        from None
                continue
            if kind == "batch":
                yield unpack(payload)
            elif kind == "error":
                raise payload
            else:
                return
    finally:
        if child.is_alive():
            child.terminate()
        child.join()
        channel.close()


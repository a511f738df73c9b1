"""A simulated annotator for the capacity benchmark: one real Streamlit browser session over the
websocket (``/_stcore/stream``), speaking the browser's protocol (protobuf ``BackMsg`` out,
``ForwardMsg`` in) and doing what the Label page's grading widget (``grader.js``) does on the wire.

A grade key or Enter in the browser becomes one ``rerun_script`` BackMsg whose widget states hold
the widget's whole state as JSON (``{"outbox": {"batches": [{"client", "item", "events"}], "n"}}``,
every event the server has not acknowledged yet); the server's answer is a script run whose
``bidi_component`` element carries the widget's new ``data`` (the acknowledged sequence numbers,
and after a submit the next item). This client keeps the unacknowledged events as the widget does,
drops them on acknowledgement, and resends them after 1.5 s without one, so the server does for it
exactly the work it does for a browser: the benchmark checks that in a real browser once.

The session signs in as a browser that signed in before: its ``labeler_session`` cookie (a token
from ``labeler.accounts.start_session``) is sent with the websocket handshake.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

RETRY_S = 1.5  # grader.js resends unacknowledged events after this long (RETRY_MS)
GRADER_KEY = "-grader"  # the grading widget's element id ends with its user key


@dataclass
class Run:
    """What one BackMsg made the server do: when it was sent, when the answer's first byte, the
    next item's widget data and the end of the script run arrived, and how many messages and bytes."""

    kind: str  # "load", "key", "submit", "resend"
    sent: float
    first: float | None = None
    item_at: float | None = None  # the widget data of a different item than before arrived
    done: float | None = None
    messages: int = 0
    bytes: int = 0
    scripts: int = 0  # script runs it caused (st.rerun() in the page adds one)


@dataclass
class SessionStats:
    runs: list[Run] = field(default_factory=list)
    grades_sent: int = 0
    submits_sent: int = 0
    items_seen: int = 0
    errors: list[str] = field(default_factory=list)


class Annotator:
    """One annotator's browser tab. ``await run()`` labels at human speed until ``stop_at``
    (``time.monotonic()``, which the driver may move while it runs): a key every ``key_gap``
    seconds, Enter ``item_s`` seconds after the item appeared (both ``(low, high)``, drawn from
    ``rng``)."""

    def __init__(self, url: str, token: str, rng: Any, *, key_gap: tuple[float, float] = (0.3, 0.8),
                 item_s: tuple[float, float] = (8.0, 15.0), grades: int = 4) -> None:
        self.url = url.replace("http://", "ws://").rstrip("/") + "/_stcore/stream"
        self.token = token
        self.rng = rng
        self.key_gap = key_gap
        self.item_s = item_s
        self.grades = grades
        self.client = "c" + secrets.token_hex(9)  # one stream per page load, as grader.js makes
        self.stats = SessionStats()
        self.stop_at = float("inf")
        self.ws: Any = None
        self.page_hash = ""
        self.grader_id: str | None = None
        self.data: dict[str, Any] | None = None
        self.pending: list[dict[str, Any]] = []  # (this client, current item) events not acknowledged
        self.next_seq: dict[int, int] = {}
        self.send_count = 0
        self.last_sent = 0.0
        self.current: Run | None = None
        self.idle = asyncio.Event()
        self._reader: asyncio.Task | None = None

    # --- the wire ---------------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the tab: handshake with the session cookie, then the first script run (the page load)."""
        self.ws = await websockets.connect(self.url, subprotocols=["streamlit"], max_size=None,
                                           additional_headers={"Cookie": f"labeler_session={self.token}"},
                                           open_timeout=60, ping_interval=None)
        self._reader = asyncio.create_task(self._read())
        await self._rerun("load", widgets=False)
        await self.wait_idle(120)
        if self.data is None:
            raise RuntimeError(f"no grading widget after the page load: {self.stats.errors[-3:]}")

    async def close(self) -> None:
        if self._reader:
            self._reader.cancel()
        if self.ws is not None:
            await self.ws.close()

    async def wait_idle(self, timeout: float) -> None:
        await asyncio.wait_for(self.idle.wait(), timeout)

    async def _rerun(self, kind: str, *, widgets: bool = True) -> None:
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string = ""
        cs.page_script_hash = self.page_hash
        cs.context_info.timezone = "UTC"
        cs.context_info.locale = "en-US"
        if widgets and self.grader_id:
            w = cs.widget_states.widgets.add()
            w.id = self.grader_id
            w.json_value = json.dumps({"outbox": self._outbox()})
        self.idle.clear()
        self.current = Run(kind, time.monotonic())
        self.stats.runs.append(self.current)
        self.last_sent = self.current.sent
        await self.ws.send(msg.SerializeToString())

    def _outbox(self) -> dict[str, Any]:
        self.send_count += 1
        batches = [{"client": self.client, "item": self.data["item"], "events": list(self.pending)}] \
            if self.pending else []
        return {"batches": batches, "n": self.send_count}

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                now = time.monotonic()
                msg = ForwardMsg()
                msg.ParseFromString(raw)
                run = self.current
                if run is not None:
                    run.messages += 1
                    run.bytes += len(raw)
                    run.first = run.first or now
                kind = msg.WhichOneof("type")
                if kind == "navigation":
                    self.page_hash = msg.navigation.page_script_hash
                elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
                    el = msg.delta.new_element
                    if el.WhichOneof("type") == "bidi_component" and el.bidi_component.id.endswith(GRADER_KEY):
                        self._take(el.bidi_component, now)
                    elif el.WhichOneof("type") == "exception":
                        self.stats.errors.append(el.exception.message)
                elif kind == "script_finished":
                    if run is not None:
                        run.scripts += 1
                    if msg.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:  # st.rerun(): one more follows
                        # a key sent while an earlier run was going interrupts that run (as in a
                        # browser): the run that finishes has drawn every key sent before it
                        for r in reversed(self.stats.runs):
                            if r.done is not None:
                                break
                            r.done = now
                        self.idle.set()
        except (websockets.ConnectionClosed, asyncio.CancelledError):
            self.idle.set()

    def _take(self, proto: Any, now: float) -> None:
        """The widget's new data: take acknowledgements as grader.js does (takeAcks)."""
        self.grader_id = proto.id
        data = json.loads(proto.json)
        if self.data is None or data["item"] != self.data["item"]:
            self.stats.items_seen += 1
            if self.current is not None:
                self.current.item_at = now
            if self.data is not None:
                old = self._acked(data, self.data["item"])
                if any(e["seq"] > old for e in self.pending):
                    self.stats.errors.append(f"item {self.data['item']}: events left unacknowledged")
            self.pending = []  # the old item's stream is acknowledged: a new item starts a new stream
        self.data = data
        acked = self._acked(data, data["item"])
        self.pending = [e for e in self.pending if e["seq"] > acked]
        self.next_seq[data["item"]] = max(self.next_seq.get(data["item"], 1), acked + 1)

    def _acked(self, data: dict[str, Any], item: int) -> int:
        return max((seq for client, it, seq in data.get("acks") or [] if client == self.client and it == item),
                   default=0)

    # --- the annotator ----------------------------------------------------------------------

    async def _push(self, event: dict[str, Any], kind: str) -> None:
        item = self.data["item"]
        event["seq"] = self.next_seq.get(item, 1)
        event["at"] = int(time.time() * 1000)
        self.next_seq[item] = event["seq"] + 1
        self.pending.append(event)
        await self._rerun(kind)

    async def press_grade(self, doc_pk: int, grade: int) -> Run:
        """One grade key, waited for (the validation against a browser uses it)."""
        await self._push({"doc_pk": doc_pk, "grade": grade}, "key")
        await self.wait_idle(60)
        return self.stats.runs[-1]

    async def press_enter(self) -> Run:
        """Enter (submit), waited for until the script run it caused has finished."""
        await self._push({"submit": True}, "submit")
        await self.wait_idle(60)
        return self.stats.runs[-1]

    async def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` (resending as grader.js does meanwhile); False once ``stop_at`` passed."""
        until = time.monotonic() + seconds
        while (left := min(until, self.stop_at) - time.monotonic()) > 0:
            await asyncio.sleep(min(left, 0.5))
            if self.pending and self.idle.is_set() and time.monotonic() - self.last_sent > RETRY_S:
                await self._rerun("resend")
        return time.monotonic() < self.stop_at

    async def run(self) -> None:
        """Label items at human speed until ``stop_at``."""
        try:
            while time.monotonic() < self.stop_at and self.data is not None:
                chunks = [c for c in self.data["chunks"] if not c.get("added")]
                if not chunks:
                    break
                item_at = time.monotonic()
                gaps = [self.rng.uniform(*self.key_gap) for _ in chunks]
                deadline = item_at + max(self.rng.uniform(*self.item_s), sum(gaps) + 0.3)
                # read first, then grade at typing speed, then Enter on the item's deadline
                if not await self._pause(deadline - item_at - sum(gaps)):
                    break
                for c, gap in zip(chunks, gaps, strict=True):
                    await self._push({"doc_pk": c["doc_pk"], "grade": self.rng.randrange(self.grades)}, "key")
                    self.stats.grades_sent += 1
                    if not await self._pause(gap):
                        return
                item = self.data["item"]
                await self._push({"submit": True}, "submit")
                self.stats.submits_sent += 1
                await self.wait_idle(60)
                if self.data["item"] == item:  # not moved on yet: the next answer brings it
                    await self._pause(RETRY_S)
        except (TimeoutError, websockets.ConnectionClosed) as e:
            self.stats.errors.append(f"{type(e).__name__}: {e}")

"""The capacity benchmark's check that a simulated session costs the server what a browser costs.

One real Chromium tab (Playwright, Debian chromium) and one simulated session (``st_session``)
each grade every chunk of an item with a key, waiting for the answer, and press Enter; the frames
on the tab's websocket are decoded with Streamlit's protobufs. For each the report gives, per key
and per submit: the rerun requests sent, the script runs the server made (``script_finished``),
and the messages and bytes it sent back. Equal counts mean the same work per submit.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from statistics import mean
from typing import Any

from st_session import Annotator
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

CHROMIUM = os.environ.get("LABELER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
QUIET_S = 0.6  # no frame for this long after the last script run: the server is done with the key


class _Wire:
    """Counts of one tab's websocket frames since the last ``mark``."""

    def __init__(self) -> None:
        self.reruns = self.scripts = self.messages = self.bytes = 0
        self.last = time.monotonic()
        self.finished_at = 0.0

    def sent(self, payload: Any) -> None:
        if isinstance(payload, str):
            return
        msg = BackMsg()
        msg.ParseFromString(payload)
        if msg.WhichOneof("type") == "rerun_script":
            self.reruns += 1
        self.last = time.monotonic()

    def received(self, payload: Any) -> None:
        if isinstance(payload, str):
            return
        msg = ForwardMsg()
        msg.ParseFromString(payload)
        self.messages += 1
        self.bytes += len(payload)
        if msg.WhichOneof("type") == "script_finished":
            self.scripts += 1
            self.finished_at = time.monotonic()
        self.last = time.monotonic()

    def take(self) -> dict[str, int]:
        out = {"reruns": self.reruns, "scripts": self.scripts, "messages": self.messages, "bytes": self.bytes}
        self.reruns = self.scripts = self.messages = self.bytes = 0
        return out


def _quiet(page: Any, wire: _Wire, since: float, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = time.monotonic()
        if wire.finished_at > since and now - wire.last > QUIET_S:
            return
        page.wait_for_timeout(50)
    raise TimeoutError("the tab's script runs did not settle")


def _browser(url: str, token: str) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    wire = _Wire()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        context.add_cookies([{"name": "labeler_session", "value": token, "url": url}])
        page = context.new_page()
        page.on("websocket", lambda ws: (ws.on("framesent", wire.sent), ws.on("framereceived", wire.received)))
        page.goto(url)  # the root: /label is the Label page only once issue 25 part 3 lands
        page.locator(".lb-grader .lb-chunk").first.wait_for(timeout=60_000)
        _quiet(page, wire, 0.0)
        load = wire.take()
        item = page.locator(".lb-grader").get_attribute("data-item")
        keys = []
        for _ in range(page.locator(".lb-grader .lb-chunk").count()):
            t = time.monotonic()
            page.keyboard.press("1")
            _quiet(page, wire, t)
            keys.append(wire.take())
        t = time.monotonic()
        page.keyboard.press("Enter")
        page.wait_for_function("(old) => document.querySelector('.lb-grader')?.dataset.item !== old", arg=item)
        _quiet(page, wire, t)
        submit = wire.take()
        browser.close()
    return {"load": load, "per_key": _mean(keys), "submit": submit}


async def _simulated(url: str, token: str) -> dict[str, Any]:
    a = Annotator(url, token, random.Random(0))
    await a.connect()
    load = a.stats.runs[0]
    keys = []
    for c in [c for c in a.data["chunks"] if not c.get("added")]:
        keys.append(await a.press_grade(c["doc_pk"], 1))
    item = a.data["item"]
    submit = await a.press_enter()
    moved = a.data["item"] != item
    await a.close()

    def counts(r: Any) -> dict[str, int]:
        return {"reruns": 1, "scripts": r.scripts, "messages": r.messages, "bytes": r.bytes}

    return {"load": counts(load), "per_key": _mean([counts(r) for r in keys]), "submit": counts(submit),
            "next_item_shown": moved}


def _mean(rows: list[dict[str, int]]) -> dict[str, float]:
    return {k: round(mean(r[k] for r in rows), 2) for k in rows[0]} if rows else {}


def validate(url: str, browser_token: str, simulated_token: str) -> dict[str, Any]:
    """Both sides' counts, and whether reruns and script runs per key and per submit agree."""
    sim = asyncio.run(_simulated(url, simulated_token))
    if not Path(CHROMIUM).exists():
        return {"simulated": sim, "browser": None, "same_work": None, "why": f"{CHROMIUM} not installed"}
    real = _browser(url, browser_token)
    same = all(real[part][k] == sim[part][k] for part in ("per_key", "submit") for k in ("reruns", "scripts"))
    return {"simulated": sim, "browser": real, "same_work": same}

"""Where the server's time goes, for the capacity benchmark: ``py-spy record --gil`` of a running
process (raw collapsed stacks of the thread holding the GIL: one Streamlit process runs Python on
one core at a time, so that thread's time is what the sessions queue for), summarised as shares
of the samples: by the
function on top of the stack (own time), by labeler function anywhere in the stack (total time),
and by the package the innermost frame belongs to (labeler, streamlit, sqlite3, protobuf, ...)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

_FRAME = re.compile(r"^(?P<fn>.*?) \((?P<path>[^()]*?)(?::\d+)?\)$")


SCRIPT_THREAD = "ScriptRunner._run_script_thread"


def record(pid: int, seconds: float, workdir: Path, rate: int = 100) -> dict[str, Any]:
    """Sample ``pid`` for ``seconds`` in each mode and summarise; ``{"skipped": why}`` without py-spy."""
    exe = shutil.which("py-spy")
    if exe is None:
        return {"skipped": "py-spy is not installed (pip install py-spy)"}
    out: dict[str, Any] = {"seconds_each": seconds, "rate_hz": rate}
    for mode, flags, only in (("gil", ["--gil"], None), ("script_runs", ["--idle"], SCRIPT_THREAD)):
        raw = workdir / f"server.pyspy.{mode}.txt"
        done = subprocess.run([exe, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", str(rate),
                               *flags, "--full-filenames", "--format", "raw", "--output", str(raw)],
                              capture_output=True, text=True)
        if done.returncode != 0 or not raw.exists():
            out[mode] = {"skipped": f"py-spy failed: {(done.stderr or done.stdout).strip()[-300:]}"}
            continue
        out[mode] = summarise(raw.read_text().splitlines(), only=only)
        out[mode]["raw"] = str(raw)
    if "samples" in out.get("gil", {}):
        # samples / (seconds * rate): the share of the time py-spy saw a thread holding the GIL
        out["gil"]["gil_seen_held_share"] = round(out["gil"]["samples"] / (seconds * rate), 3)
    return out


def _frame(text: str) -> tuple[str, str]:
    m = _FRAME.match(text.strip())
    return (m["fn"], m["path"]) if m else (text.strip(), "")


def _package(path: str) -> str:
    if "/labeler/" in path:
        return "labeler." + path.rsplit("/labeler/", 1)[1].removesuffix(".py").replace("/", ".")
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
    if path.startswith("<"):
        return path
    return "stdlib." + Path(path).stem


def _short(fn: str, path: str) -> str:
    return f"{fn} ({_package(path)})"


def summarise(lines: list[str], top: int = 15, only: str | None = None) -> dict[str, Any]:
    """Shares of samples from py-spy's raw lines (``frame;frame;... count``, outermost first);
    ``only``: the stacks with a frame containing it."""
    own: Counter = Counter()
    total_labeler: Counter = Counter()
    leaf_package: Counter = Counter()
    page: Counter = Counter()
    n = 0
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        if only is not None and only not in stack:
            continue
        k = int(count)
        frames = [_frame(f) for f in stack.split(";") if f and not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        n += k
        fn, path = frames[-1]
        own[_short(fn, path)] += k
        top_pkg = _package(path)
        leaf_package[top_pkg.split(".")[0] if not top_pkg.startswith("labeler") else "labeler"] += k
        seen = set()
        for fn, path in frames:
            if "/labeler/" in path and (name := _short(fn, path)) not in seen:
                seen.add(name)
                total_labeler[name] += k
        views = [p for _, p in frames if "/labeler/app/" in p]
        page[_package(views[-1]) if views else "(no labeler app frame)"] += k

    def shares(c: Counter) -> list[list[Any]]:
        return [[name, round(v / n, 3)] for name, v in c.most_common(top)] if n else []

    return {"samples": n, "own_time": shares(own), "total_time_labeler": shares(total_labeler),
            "innermost_package": shares(leaf_package), "innermost_app_module": shares(page)}

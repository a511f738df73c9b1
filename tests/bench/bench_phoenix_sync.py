"""Benchmark: ``labeler sync`` from a real Arize Phoenix server against ``labeler ingest logs`` of the
same spans exported through Phoenix's REST API (the file a team would export by hand).

Starts ``phoenix serve`` on 127.0.0.1 (a temporary working folder), sends ``--traces`` traces (a
CHAIN root with the question and answer, a RETRIEVER child with ``--docs`` documents) over OTLP with
the OpenTelemetry SDK (as ``phoenix.otel`` sets it up), waits until Phoenix has stored every one, exports every
span of the project through the REST API into one JSON file, then times, each in a fresh database
and in a child process (wall time, CPU of the child, its peak RSS):

- ``labeler source add phoenix`` + ``labeler sync`` (the REST API read page by page, each batch
  ingested like a file),
- ``labeler ingest logs`` of the exported file.

Needs Phoenix, which is not a test dependency; run it where Phoenix is installed, e.g. in the venv
CI's Phoenix step makes::

    python3 -m venv --system-site-packages /tmp/pxvenv && /tmp/pxvenv/bin/pip install 'arize-phoenix>=20.26.1'
    PYTHONPATH=. /tmp/pxvenv/bin/python tests/bench/bench_phoenix_sync.py --traces 20000

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

PROJECT = "bench"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_phoenix(work: Path) -> tuple[subprocess.Popen, str]:
    port = _port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(work), "PHOENIX_PORT": str(port), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_GRPC_PORT": str(_port()), "PHOENIX_TELEMETRY_ENABLED": "false"}
    env.pop("PHOENIX_COLLECTOR_ENDPOINT", None)
    log = open(work / "phoenix.log", "w")  # noqa: SIM115 - the server's, for its lifetime
    server = subprocess.Popen([sys.executable, "-m", "phoenix.server.main", "serve"], env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        if server.poll() is not None:
            raise SystemExit("phoenix serve exited: " + (work / "phoenix.log").read_text()[-2000:])
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return server, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("phoenix serve did not start in 180 s")
        time.sleep(0.5)


def send(url: str, traces: int, docs: int) -> float:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # what phoenix.otel.register(batch=True) sets up, with a queue that holds every span: its default
    # queue (2,048) drops spans sent faster than Phoenix takes them
    provider = TracerProvider(resource=Resource({"openinference.project.name": PROJECT}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url + "/v1/traces"),
                                                   max_queue_size=4 * traces + 1000, max_export_batch_size=512))
    tracer = provider.get_tracer("bench")
    start = time.perf_counter()
    for n in range(traces):
        with tracer.start_as_current_span("RunnableSequence") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", f"question {n} about plan {n % 97}?")
            with tracer.start_as_current_span("VectorStoreRetriever") as ret:
                ret.set_attribute("openinference.span.kind", "RETRIEVER")
                ret.set_attribute("input.value", f"question {n} about plan {n % 97}?")
                for i in range(docs):
                    ret.set_attribute(f"retrieval.documents.{i}.document.id", f"doc-{(n * 7 + i) % 5000}")
                    ret.set_attribute(f"retrieval.documents.{i}.document.content",
                                      f"chunk {(n * 7 + i) % 5000} on plan {n % 97}: " + "words of the page " * 8)
                    ret.set_attribute(f"retrieval.documents.{i}.document.score", 0.9 - i / 20)
            root.set_attribute("output.value", f"answer {n}")
    provider.force_flush()
    provider.shutdown()
    return time.perf_counter() - start


def _pages(url: str, **params: Any):
    cursor = None
    while True:
        answer = httpx.get(f"{url}/v1/projects/{PROJECT}/spans",
                           params={"limit": 1000, **params, **({"cursor": cursor} if cursor else {})}, timeout=60)
        if answer.status_code == 404:
            return
        page = answer.json()
        yield page["data"]
        cursor = page.get("next_cursor")
        if not cursor:
            return


def wait_stored(url: str, traces: int) -> float:
    start = time.perf_counter()
    while sum(len(p) for p in _pages(url, span_kind="RETRIEVER")) < traces:
        if time.perf_counter() - start > 1800:
            raise SystemExit("Phoenix did not store every span in 30 minutes")
        time.sleep(2)
    return time.perf_counter() - start


def export(url: str, path: Path) -> int:
    spans = [s for page in _pages(url) for s in page]
    path.write_text(json.dumps({"data": spans, "next_cursor": None}))
    return len(spans)


# the child reports its own peak RSS at exit from /proc (VmHWM starts again at exec; ru_maxrss would
# carry this benchmark's own peak, Phoenix's imports and all, into the child)
_MEASURED = ("import atexit, runpy, sys\n"
             "def peak():\n"
             "    for line in open('/proc/self/status'):\n"
             "        if line.startswith('VmHWM:'):\n"
             "            sys.stderr.write('\\nPEAK_RSS_KB ' + line.split()[1] + '\\n')\n"
             "atexit.register(peak)\n"
             "runpy.run_module('labeler', run_name='__main__', alter_sys=True)\n")


def timed(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """``labeler ARGS`` in a child process: its wall time, CPU time (its own and its children's) and
    its peak RSS (a parsing process it forks is not counted there)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _MEASURED, *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"labeler {' '.join(args)} failed: {done.stderr[-2000:]}")
    peak = [int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("PEAK_RSS_KB ")]
    return {"seconds": round(wall, 2), "cpu_seconds": round(after.ru_utime + after.ru_stime - before.ru_utime
                                                           - before.ru_stime, 2),
            "rss_peak_mb": round(peak[-1] / 1024, 1) if peak else None, "output": done.stdout}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=int, default=20_000)
    ap.add_argument("--docs", type=int, default=5)
    args = ap.parse_args()
    out: dict[str, Any] = {"benchmark": "phoenix_sync", "traces": args.traces, "docs_per_retrieval": args.docs}
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("PHOENIX_API_KEY", None)
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        (folder / "phoenix").mkdir()
        server, url = start_phoenix(folder / "phoenix")
        try:
            import phoenix

            out["phoenix"] = getattr(phoenix, "__version__", "?")
            out["send_s"] = round(send(url, args.traces, args.docs), 1)
            out["store_wait_s"] = round(wait_stored(url, args.traces), 1)
            export_path = folder / "export.json"
            t = time.perf_counter()
            out["exported_spans"] = export(url, export_path)
            out["export_s"] = round(time.perf_counter() - t, 1)
            out["export_mb"] = round(export_path.stat().st_size / 2**20, 1)
            file_db, sync_db = folder / "file.db", folder / "sync.db"
            ingest = timed(["--db", str(file_db), "ingest", "logs", str(export_path), "--json"], env)
            subprocess.run([sys.executable, "-m", "labeler", "--db", str(sync_db), "source", "add", "phoenix", "px",
                            "--url", url, "--project", PROJECT], env=env, check=True, capture_output=True, cwd=folder)
            sync = timed(["--db", str(sync_db), "sync", "px", "--json"], env)
        finally:
            server.terminate()
            server.wait(60)
        results = json.loads(sync.pop("output"))
        ingested = json.loads(ingest.pop("output"))
        spans = args.traces  # retrieval spans: the records each side stores
        out["file_ingest"] = {**ingest, "new": ingested.get("new"), "spans_per_s": round(spans / ingest["seconds"])}
        out["sync"] = {**sync, "new": sum(r["new"] for r in results), "ingests": sum(len(r["ingest_ids"]) for r in results),
                       "requests": sum(r["requests"] for r in results), "spans_per_s": round(spans / sync["seconds"])}
        out["ratio_sync_to_file"] = round(ingest["seconds"] / sync["seconds"], 3)  # > 1: the sync is faster
        out["cpu_ratio_sync_to_file"] = round(sync["cpu_seconds"] / ingest["cpu_seconds"], 3)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

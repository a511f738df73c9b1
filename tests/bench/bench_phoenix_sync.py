"""Benchmark: ``labeler sync`` from a real Arize Phoenix server against ``labeler ingest logs`` of the
same spans exported through Phoenix's REST API (the file a team would export by hand).

Starts ``phoenix serve`` on 127.0.0.1 and loads ``--traces`` traces into it (a CHAIN root with the
question and answer, a RETRIEVER child with ``--docs`` documents: two spans a trace), then, ``--runs``
times against that one Phoenix:

- exports every span of the project through the REST API (pages of 1,000) into a file, a span per
  line (the wall time and the Phoenix server's CPU for it are reported: what the file path costs
  before its ingest);
- times, each in a fresh database and in a child process (wall time, the child's CPU, its peak RSS;
  and, for the sync, the CPU the Phoenix server used meanwhile):
  ``labeler ingest logs`` of the exported file, and ``labeler source add phoenix`` + ``labeler sync``
  (the REST API read page by page, each batch ingested like a file), then that sync again, with
  nothing new in its window (what each later scheduled sync costs).

Loading. ``--loader otlp`` (the default) posts prebuilt OTLP protobuf requests of ``--batch`` spans
to Phoenix's ``/v1/traces``; ``--loader sdk`` traces them with the OpenTelemetry SDK and its
BatchSpanProcessor (as ``phoenix.otel`` sets it up). Either way Phoenix stores about 110 spans/s on
a 2-core machine: it inserts span by span (several SQL statements and a savepoint each, through
SQLAlchemy on aiosqlite), so what the sender does hardly matters; past its span queue (20,000) it
answers 503 and the otlp loader sends again a second later. 100k spans take about 15 minutes.

``--workdir DIR`` keeps Phoenix's working folder, so that a load is done once: the first run loads
it (and writes ``bench.json`` there), a later run with the same ``--traces`` and ``--docs`` finds
the spans stored and only measures (a folder holding something else stops the run). ``--runs 0``
loads only.
``--profile DIR`` runs one more sync under cProfile (``DIR/sync.prof``) while py-spy, when it is on
the PATH, samples the Phoenix server (``DIR/phoenix-pyspy.txt``).

Needs Phoenix, which is not a test dependency; run it where Phoenix is installed, e.g. in the venv
CI's Phoenix step makes::

    python3 -m venv --system-site-packages /tmp/pxvenv && /tmp/pxvenv/bin/pip install 'arize-phoenix>=20.26.1'
    PYTHONPATH=. /tmp/pxvenv/bin/python tests/bench/bench_phoenix_sync.py --traces 20000
    # 100k spans, loaded once, measured three times (again later with the same command):
    PYTHONPATH=. nice -n 10 /tmp/pxvenv/bin/python tests/bench/bench_phoenix_sync.py --traces 50000 \
        --workdir /work/px100k/phoenix --runs 3

Prints one JSON document: ``spans_per_s`` counts both spans of a trace, ``retrievals_per_s`` the
retrieval spans (one query each); ``ratio_sync_to_file`` is the file ingest's wall time over the
sync's (above 1: the sync is faster), ``cpu_ratio_sync_to_file`` the sync's CPU over the ingest's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
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
    log = open(work / "phoenix.log", "a")  # noqa: SIM115 - the server's, for its lifetime
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


def send(url: str, traces: int, docs: int, batch: int = 512) -> float:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # what phoenix.otel.register(batch=True) sets up, with a queue that holds every span: its default
    # queue (2,048) drops spans sent faster than Phoenix takes them
    provider = TracerProvider(resource=Resource({"openinference.project.name": PROJECT}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url + "/v1/traces"),
                                                   max_queue_size=4 * traces + 1000, max_export_batch_size=batch))
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


def _trace_spans(n: int, docs: int, t0: int, ids: Any) -> list[Any]:
    """Trace ``n`` as OTLP spans (the retriever, then its CHAIN root: the order the SDK exports them
    in), the attributes the SDK loader sets; ``t0`` is the first trace's start (ns since the epoch)."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

    def kv(key: str, value: str | float) -> KeyValue:
        return KeyValue(key=key, value=AnyValue(double_value=value) if isinstance(value, float)
                        else AnyValue(string_value=value))

    question = f"question {n} about plan {n % 97}?"
    trace_id, root_id, ret_id = ids(16), ids(8), ids(8)
    start = t0 + n * 10_000_000  # a trace every 10 ms: distinct start times, in the order sent
    attrs = [kv("openinference.span.kind", "RETRIEVER"), kv("input.value", question)]
    for i in range(docs):
        doc = (n * 7 + i) % 5000
        attrs += [kv(f"retrieval.documents.{i}.document.id", f"doc-{doc}"),
                  kv(f"retrieval.documents.{i}.document.content", f"chunk {doc} on plan {n % 97}: "
                     + "words of the page " * 8),
                  kv(f"retrieval.documents.{i}.document.score", 0.9 - i / 20)]
    ok = Status(code=Status.STATUS_CODE_OK)
    retriever = Span(trace_id=trace_id, span_id=ret_id, parent_span_id=root_id, name="VectorStoreRetriever",
                     kind=Span.SPAN_KIND_INTERNAL, start_time_unix_nano=start + 1_000_000,
                     end_time_unix_nano=start + 5_000_000, attributes=attrs, status=ok)
    root = Span(trace_id=trace_id, span_id=root_id, name="RunnableSequence", kind=Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=start, end_time_unix_nano=start + 8_000_000, status=ok,
                attributes=[kv("openinference.span.kind", "CHAIN"), kv("input.value", question),
                            kv("output.value", f"answer {n}")])
    return [retriever, root]


def send_otlp(url: str, traces: int, docs: int, batch: int) -> float:
    """The same traces as :func:`send`, built as OTLP protobuf requests of ``batch`` spans each and
    posted to Phoenix's ``/v1/traces`` (what an OTLP exporter sends, without the SDK's per-span work);
    a 503 (Phoenix's span queue is full) is sent again after a pause. The traces start
    ``traces`` x 10 ms before now, so that every span is in a sync's window."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

    resource = Resource(attributes=[KeyValue(key="openinference.project.name", value=AnyValue(string_value=PROJECT))])
    t0 = time.time_ns() - (traces * 10 + 60_000) * 1_000_000
    per_request = max(1, batch // 2)  # traces per request
    start = time.perf_counter()
    with httpx.Client(timeout=120) as client:
        for first in range(0, traces, per_request):
            spans = [s for n in range(first, min(traces, first + per_request))
                     for s in _trace_spans(n, docs, t0, os.urandom)]
            body = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
                resource=resource, scope_spans=[ScopeSpans(scope=InstrumentationScope(name="bench"), spans=spans)])]
            ).SerializeToString()
            for _ in range(600):
                answer = client.post(url + "/v1/traces", content=body,
                                     headers={"Content-Type": "application/x-protobuf"})
                if answer.status_code != 503:
                    answer.raise_for_status()
                    break
                time.sleep(1)  # Phoenix's queue is full: it takes the request again once it has room
            else:
                raise SystemExit("Phoenix answered 503 (at capacity) for 10 minutes")
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


def stored(url: str) -> int:
    """Spans Phoenix holds in the project (its GraphQL ``recordCount``; 0 before the project exists)."""
    answer = httpx.post(url + "/graphql", json={"query": "{ projects { edges { node { name recordCount } } } }"},
                        timeout=120).json()
    return next((e["node"]["recordCount"] for e in answer["data"]["projects"]["edges"]
                 if e["node"]["name"] == PROJECT), 0)


def wait_stored(url: str, spans: int, progress: list[tuple[float, int]]) -> float:
    """Seconds until Phoenix holds ``spans`` spans in the project (``progress`` gets (seconds, spans held)
    about every minute); fails after 5 minutes without progress."""
    start = time.perf_counter()
    last, moved = -1, start
    while (count := stored(url)) < spans:
        now = time.perf_counter()
        if count != last:
            last, moved = count, now
        elif now - moved > 300:
            raise SystemExit(f"Phoenix stored no span for 5 minutes ({count} of {spans})")
        if not progress or now - start - progress[-1][0] >= 60:
            progress.append((round(now - start), count))
        time.sleep(2)
    return time.perf_counter() - start


def server_cpu(server: subprocess.Popen) -> float:
    """CPU seconds the Phoenix server has used so far (user + system, every thread)."""
    fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def export(url: str, path: Path) -> int:
    """Every span of the project through the REST API (1,000 a page, the most Phoenix gives) into one
    file, a span object per line: the API's one ``{"data": [...]}`` document would be a single record,
    and 100k spans make one far over ingest's 16 MiB record limit."""
    count = 0
    with path.open("w", encoding="utf-8") as f:
        for page in _pages(url):
            for span in page:
                f.write(json.dumps(span) + "\n")
            count += len(page)
    return count


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


def load(url: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Send the traces unless Phoenix's folder ``work`` holds them already (a ``--workdir`` loaded by an
    earlier run, recorded in ``bench.json`` there); what loading took, or that it was skipped."""
    spans, marker = 2 * args.traces, work / "bench.json"
    wanted = {"traces": args.traces, "docs": args.docs}
    count = stored(url)
    if count:
        held = json.loads(marker.read_text()) if marker.exists() else None
        if count == spans and held == wanted:
            return {"loaded": "already", "spans_stored": count}
        raise SystemExit(f"{work} holds {count} spans in project {PROJECT!r} ({held}), not {spans} of {wanted}: "
                         "give another --workdir (or remove this one)")
    sender = send_otlp if args.loader == "otlp" else send
    send_s = sender(url, args.traces, args.docs, args.batch)
    progress: list[tuple[float, int]] = []
    wait_s = wait_stored(url, spans, progress)
    marker.write_text(json.dumps(wanted))
    return {"loaded": args.loader, "batch": args.batch, "send_s": round(send_s, 1),
            "store_wait_s": round(wait_s, 1), "stored_spans_per_s": round(spans / (send_s + wait_s), 1),
            "progress_s_spans": progress}


def measure(url: str, server: subprocess.Popen, folder: Path, env: dict[str, str], traces: int) -> dict[str, Any]:
    """One round in ``folder``: the REST export, the file's ingest, the sync, each in a fresh database."""
    out: dict[str, Any] = {}
    export_path = folder / "export.jsonl"
    cpu, t = server_cpu(server), time.perf_counter()
    out["exported_spans"] = export(url, export_path)
    out["export_s"] = round(time.perf_counter() - t, 1)
    out["export_phoenix_cpu_s"] = round(server_cpu(server) - cpu, 1)
    out["export_mb"] = round(export_path.stat().st_size / 2**20, 1)
    file_db, sync_db = folder / "file.db", folder / "sync.db"
    ingest = timed(["--db", str(file_db), "ingest", "logs", str(export_path), "--json"], env)
    subprocess.run([sys.executable, "-m", "labeler", "--db", str(sync_db), "source", "add", "phoenix", "px",
                    "--url", url, "--project", PROJECT], env=env, check=True, capture_output=True, cwd=folder)
    cpu = server_cpu(server)
    sync = timed(["--db", str(sync_db), "sync", "px", "--json"], env)
    sync["phoenix_cpu_seconds"] = round(server_cpu(server) - cpu, 1)
    results = json.loads(sync.pop("output"))
    # what each later scheduled sync costs when nothing is new: its window [high-water - overlap, now)
    cpu = server_cpu(server)
    again = timed(["--db", str(sync_db), "sync", "px", "--json"], env)
    again_results = json.loads(again.pop("output"))
    out["sync_again"] = {**again, "phoenix_cpu_seconds": round(server_cpu(server) - cpu, 1),
                         "spans": sum(r["spans"] for r in again_results),
                         "requests": sum(r["requests"] for r in again_results)}
    ingested = json.loads(ingest.pop("output"))
    spans = 2 * traces  # every span read or exported: the retrievals and their roots
    out["file_ingest"] = {**ingest, "new": ingested.get("new"), "retrievals_per_s": round(traces / ingest["seconds"]),
                          "spans_per_s": round(spans / ingest["seconds"])}
    out["sync"] = {**sync, "new": sum(r["new"] for r in results),
                   "ingests": sum(len(r["ingest_ids"]) for r in results),
                   "requests": sum(r["requests"] for r in results), "retrievals_per_s": round(traces / sync["seconds"]),
                   "spans_per_s": round(spans / sync["seconds"])}
    out["ratio_sync_to_file"] = round(ingest["seconds"] / sync["seconds"], 3)  # > 1: the sync is faster
    out["cpu_ratio_sync_to_file"] = round(sync["cpu_seconds"] / ingest["cpu_seconds"], 3)
    for path in (export_path, file_db, sync_db):
        path.unlink()
    return out


def profile(url: str, server: subprocess.Popen, folder: Path, env: dict[str, str], to: Path) -> dict[str, Any]:
    """One more sync into a fresh database, under cProfile (``to``/sync.prof) while py-spy, when it is on
    the PATH, samples the Phoenix server (``to``/phoenix-pyspy.txt, py-spy's raw format)."""
    to.mkdir(parents=True, exist_ok=True)
    db = folder / "profiled.db"
    subprocess.run([sys.executable, "-m", "labeler", "--db", str(db), "source", "add", "phoenix", "px",
                    "--url", url, "--project", PROJECT], env=env, check=True, capture_output=True, cwd=folder)
    spy = shutil.which("py-spy")
    sampler = subprocess.Popen([spy, "record", "-p", str(server.pid), "-r", "100", "-f", "raw", "--nonblocking",
                                "-o", str(to / "phoenix-pyspy.txt")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) if spy else None
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(to / "sync.prof"), "-m", "labeler", "--db", str(db),
                    "sync", "px", "--json"], env=env, check=True, capture_output=True)
    seconds = time.perf_counter() - t
    if sampler is not None:
        sampler.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
        sampler.wait(60)
    db.unlink()
    return {"profiled_sync_s": round(seconds, 1), "files": sorted(f.name for f in to.iterdir())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=int, default=20_000, help="traces to send (each a root and a retriever)")
    ap.add_argument("--docs", type=int, default=5, help="documents per retrieval")
    ap.add_argument("--workdir", type=Path, help="Phoenix's working folder, kept: loaded once, measured again "
                    "by each later run with the same --traces and --docs (default: a temporary one)")
    ap.add_argument("--loader", choices=("otlp", "sdk"), default="otlp",
                    help="otlp: prebuilt OTLP protobuf requests posted to /v1/traces; sdk: the OpenTelemetry "
                    "SDK's tracer and BatchSpanProcessor")
    ap.add_argument("--batch", type=int, default=1000, help="spans per OTLP request")
    ap.add_argument("--profile", type=Path, help="after the runs, profile one more sync into this folder")
    ap.add_argument("--runs", type=int, default=1, help="measurement rounds against the one loaded Phoenix "
                    "(0: load only)")
    args = ap.parse_args()
    out: dict[str, Any] = {"benchmark": "phoenix_sync", "traces": args.traces, "spans": 2 * args.traces,
                           "docs_per_retrieval": args.docs}
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("PHOENIX_API_KEY", None)
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        work = args.workdir.resolve() if args.workdir else folder / "phoenix"
        work.mkdir(parents=True, exist_ok=True)
        server, url = start_phoenix(work)
        try:
            import phoenix

            out["phoenix"] = getattr(phoenix, "__version__", "?")
            out["load"] = load(url, work, args)
            out["runs"] = [measure(url, server, folder, env, args.traces) for _ in range(args.runs)]
            if args.profile:
                out["profile"] = profile(url, server, folder, env, args.profile.resolve())
        finally:
            server.terminate()
            server.wait(60)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

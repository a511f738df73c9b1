"""Benchmark: spans stored live through ``labeler collect --otlp`` vs ``labeler ingest logs`` of
the same spans as an exported OTLP/JSON file.

N spans (default 100k) of traces of three spans each, in the order an app's exporter sends them
(each span as it ends: the retriever with 5 documents of ~150 characters from a pool of 20k, an
LLM span, then the root chain with the question and the answer), cut into requests of 512 spans
(the SDK's BatchSpanProcessor batch), so a trace's root often comes in a later request than its
retriever. The same requests are written as the exported file (OTLP/JSON, one request per line, hex
ids) and ingested by the real CLI in a subprocess; then a real ``labeler collect`` subprocess
receives them as protobuf POSTs over one keep-alive connection (one exporter, honouring 429 and
Retry-After) and is stopped with SIGTERM once every request is answered (it writes what it holds
and exits). Spans/s of each are spans over the wall time from start to the rows being stored
(collect: first POST to its exit), their ratio (collect over file), the peak RSS of each process
(``ru_maxrss``) and the collector's RSS before the first request; ``cpu_ratio_collect_to_file``: the
file ingest's CPU time over the collector's (its user and system time), steadier than wall time on a
busy machine. Both run with the defaults
(redaction on; collect: --flush-every 2s --batch 5000). The stored rows of the two databases are
compared. Prints one JSON document.

    python tests/bench/bench_collect.py [--spans 100000] [--batch 5000] [--flush-every 2s] [--max-buffer-mb 64]

Span ids are drawn so that none is 16 decimal digits: such an id passing the Luhn check is
redacted as a card number by the ingest (a bug of the ingest, both ways alike; see the report).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORDS = ("bike rental price deposit helmet battery route station return late fee insurance child seat "
         "lock app account refund weekend group tour repair").split()
REQUEST_SPANS = 512


def _id(rng: random.Random, bits: int) -> str:
    return "f" + f"{rng.getrandbits(bits - 4):0{bits // 4 - 1}x}"  # never all decimal digits


def make_spans(n_spans: int, seed: int = 1) -> list[dict]:
    """Spans as plain data, in export order."""
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(24))[:150] for _ in range(20_000)]
    spans: list[dict] = []
    t = 1_796_114_609_000_000_000
    i = 0
    while len(spans) < n_spans:
        trace, root_id, retriever_id, llm_id = _id(rng, 128), _id(rng, 64), _id(rng, 64), _id(rng, 64)
        question = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) + f" #{i}?"
        docs = rng.sample(range(len(texts)), 5)
        retriever_attrs = {"openinference.span.kind": "RETRIEVER", "input.value": question}
        for rank, d in enumerate(docs):
            retriever_attrs[f"retrieval.documents.{rank}.document.id"] = f"chunk-{d}"
            retriever_attrs[f"retrieval.documents.{rank}.document.content"] = texts[d]
            retriever_attrs[f"retrieval.documents.{rank}.document.score"] = round(0.9 - rank * 0.1, 2)
        spans.append({"trace": trace, "span": retriever_id, "parent": root_id, "name": "retrieve", "start": t + 1,
                      "attrs": retriever_attrs})
        spans.append({"trace": trace, "span": llm_id, "parent": root_id, "name": "llm", "start": t + 2,
                      "attrs": {"openinference.span.kind": "LLM", "llm.model_name": "m", "output.value": "ok"}})
        spans.append({"trace": trace, "span": root_id, "parent": "", "name": "rag", "start": t,
                      "attrs": {"openinference.span.kind": "CHAIN", "input.value": question,
                                "output.value": f"The answer to {question}"}})
        t += 1_000_000
        i += 1
    return spans[:n_spans]


def _json_value(v) -> dict:
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": v}


def json_request(batch: list[dict]) -> dict:
    return {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "app"}}]},
                               "scopeSpans": [{"scope": {"name": "bench"}, "spans": [
        {"traceId": s["trace"], "spanId": s["span"], "parentSpanId": s["parent"], "name": s["name"], "kind": 1,
         "startTimeUnixNano": str(s["start"]), "endTimeUnixNano": str(s["start"] + 500),
         "attributes": [{"key": k, "value": _json_value(v)} for k, v in s["attrs"].items()]}
        for s in batch]}]}]}


def protobuf_request(batch: list[dict]) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    resource.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value="app")))
    scope = resource.scope_spans.add()
    scope.scope.name = "bench"
    for s in batch:
        span = scope.spans.add(trace_id=bytes.fromhex(s["trace"]), span_id=bytes.fromhex(s["span"]),
                               parent_span_id=bytes.fromhex(s["parent"]), name=s["name"], kind=1,
                               start_time_unix_nano=s["start"], end_time_unix_nano=s["start"] + 500)
        for k, v in s["attrs"].items():
            value = AnyValue(double_value=v) if isinstance(v, float) else AnyValue(string_value=v)
            span.attributes.append(KeyValue(key=k, value=value))
    return request.SerializeToString()


def file_ingest(path: Path, db: Path, env: dict) -> dict:
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "labeler", "--db", str(db), "ingest", "logs", str(path),
                             "--format", "otlp", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    out = proc.stdout.read()
    if status != 0:
        raise SystemExit(f"ingest failed: {proc.stderr.read().decode()[-2000:]}")
    result = json.loads(out)
    return {"seconds": round(seconds, 2), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
            "rss_peak_mb": round(usage.ru_maxrss / 1024, 1), "new": result["new"]}


def vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def collect(requests: list[bytes], db: Path, env: dict, flush_every: str, batch: int, max_buffer_mb: float) -> dict:
    proc = subprocess.Popen([sys.executable, "-m", "labeler", "--db", str(db), "collect", "--otlp", "127.0.0.1:0",
                             "--flush-every", flush_every, "--batch", str(batch), "--max-buffer-mb", str(max_buffer_mb)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    first = proc.stderr.readline()
    if "collecting OTLP traces on http://" not in first:
        proc.kill()
        raise SystemExit(f"collect did not start: {first}{proc.stderr.read()[-2000:]}")
    port = int(first.split("127.0.0.1:")[1].split("/")[0])
    idle = vm_hwm_mb(proc.pid)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    refused = 0
    start = time.perf_counter()
    for body in requests:
        while True:
            conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"})
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                break
            if response.status not in (429, 503):
                raise SystemExit(f"collect answered {response.status} {response.reason}")
            refused += 1
            time.sleep(float(response.getheader("Retry-After") or 1))
    sent = time.perf_counter() - start
    conn.close()
    proc.send_signal(signal.SIGTERM)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    out = proc.stdout.read()
    if status != 0:
        raise SystemExit(f"collect failed ({status}): {proc.stderr.read()[-2000:]}")
    flushes = [line for line in out.splitlines() if " spans of " in line]
    return {"seconds": round(seconds, 2), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
            "seconds_to_accept_all": round(sent, 2), "refused_429": refused,
            "ingests": len(flushes), "rss_idle_mb": idle, "rss_peak_mb": round(usage.ru_maxrss / 1024, 1),
            "summary": out.strip().splitlines()[-1]}


def rows(db: Path) -> tuple[int, int, int, int]:
    """Counts and an order-free checksum of (query id, question, answer, rank, chunk id, score, text)."""
    conn = sqlite3.connect(db)
    q = conn.execute("SELECT count(*) FROM queries").fetchone()[0]
    r = conn.execute("SELECT count(*) FROM retrievals").fetchone()[0]
    d = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
    digest = 0
    for row in conn.execute("SELECT q.query_id, q.question, q.answer, r.rank, d.doc_id, r.score, d.text "
                            "FROM retrievals r JOIN queries q ON q.pk = r.query_pk JOIN documents d ON d.pk = r.doc_pk"):
        digest ^= hash(json.dumps(row))
    conn.close()
    return q, r, d, digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--flush-every", default="2s")
    parser.add_argument("--max-buffer-mb", type=float, default=64)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
    spans = make_spans(args.spans)
    batches = [spans[i:i + REQUEST_SPANS] for i in range(0, len(spans), REQUEST_SPANS)]
    with tempfile.TemporaryDirectory(prefix="bench-collect-") as tmp:
        folder = Path(tmp)
        exported = folder / "exported.jsonl"
        with open(exported, "w") as f:
            for batch in batches:
                f.write(json.dumps(json_request(batch), separators=(",", ":")) + "\n")
        requests = [protobuf_request(batch) for batch in batches]
        file_run = file_ingest(exported, folder / "file.db", env)
        collect_run = collect(requests, folder / "collect.db", env, args.flush_every, args.batch, args.max_buffer_mb)
        file_rows, collect_rows = rows(folder / "file.db"), rows(folder / "collect.db")
        n = len(spans)
        file_run["spans_per_s"] = round(n / file_run["seconds"])
        collect_run["spans_per_s"] = round(n / collect_run["seconds"])
        print(json.dumps({
            "spans": n, "traces": len({s["trace"] for s in spans}), "requests": len(batches),
            "exported_file_mb": round(exported.stat().st_size / 2**20, 1),
            "protobuf_mb": round(sum(map(len, requests)) / 2**20, 1),
            "file_ingest": file_run, "collect": collect_run,
            "ratio_collect_to_file": round(collect_run["spans_per_s"] / file_run["spans_per_s"], 3),
            # CPU time is steadier than wall time on a shared machine
            "cpu_ratio_collect_to_file": round(file_run["cpu_seconds"] / collect_run["cpu_seconds"], 3),
            "queries": {"file": file_rows[0], "collect": collect_rows[0]},
            "same_rows": file_rows == collect_rows,
        }, indent=2))


if __name__ == "__main__":
    main()

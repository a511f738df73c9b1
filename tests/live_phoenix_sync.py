"""Check ``labeler sync`` against a real Arize Phoenix server (not part of the suite: Phoenix is not
in the test extra, and pip cannot install it beside it; see tests/fixtures/tools/make_fixtures.py).

    python -m venv /tmp/pxenv && /tmp/pxenv/bin/pip install arize-phoenix==20.26.1 arize-phoenix-otel
    PYTHONPATH=. python tests/live_phoenix_sync.py /tmp/pxenv/bin/python

It starts ``phoenix serve`` on free loopback ports in a temporary folder, sends 12 traces (a CHAIN
root with the question and answer, a RETRIEVER child with two documents) over OTLP with
``phoenix.otel.register``, syncs them with a page limit of 3, compares what is stored with an
ingest of the REST export of every span of the project, sends 8 more traces, syncs again, and
exits 1 on any difference. Checked on 2026-12-05 with Phoenix 20.26.1: 12 then 8 new queries,
identical to the export, none twice.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import labeler
from labeler import sources
from tests.test_tool_logs import stored

SEND = r'''
import sys
from phoenix.otel import register
url, n0, n1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tp = register(project_name="rag", endpoint=url + "/v1/traces", batch=False, set_global_tracer_provider=False,
              verbose=False)
tracer = tp.get_tracer("live-check")
for n in range(n0, n1):
    with tracer.start_as_current_span("RunnableSequence") as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        root.set_attribute("input.value", f"question {n}?")
        with tracer.start_as_current_span("VectorStoreRetriever") as ret:
            ret.set_attribute("openinference.span.kind", "RETRIEVER")
            ret.set_attribute("input.value", f"question {n}?")
            for i in range(2):
                ret.set_attribute(f"retrieval.documents.{i}.document.id", f"doc-{n}-{i}")
                ret.set_attribute(f"retrieval.documents.{i}.document.content", f"text {i} of {n}")
                ret.set_attribute(f"retrieval.documents.{i}.document.score", 0.9 - i / 10)
        root.set_attribute("output.value", f"answer {n}")
tp.force_flush()
tp.shutdown()
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def export(url: str) -> dict:
    spans, cursor = [], None
    while True:
        page = json.load(urllib.request.urlopen(f"{url}/v1/projects/rag/spans?limit=100"
                                                + (f"&cursor={cursor}" if cursor else "")))
        spans += page["data"]
        cursor = page["next_cursor"]
        if not cursor:
            return {"data": spans, "next_cursor": None}


def main(phoenix_python: str) -> int:
    work = Path(tempfile.mkdtemp(prefix="live-phoenix-"))
    port = free_port()
    env = dict(os.environ, PHOENIX_WORKING_DIR=str(work), PHOENIX_PORT=str(port), PHOENIX_GRPC_PORT=str(free_port()),
               PHOENIX_HOST="127.0.0.1", PHOENIX_TELEMETRY_ENABLED="false")
    with open(work / "phoenix.log", "w") as log:
        server = subprocess.Popen([str(Path(phoenix_python).parent / "phoenix"), "serve"], env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                if urllib.request.urlopen(url + "/healthz", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        (work / "send.py").write_text(SEND)
        db = labeler.connect(work / "sync.db")
        sources.add_source(db, "phoenix", "px", url=url, project="rag", overlap_s=60)
        failures = 0
        for n0, n1 in ((0, 12), (12, 20)):
            subprocess.run([phoenix_python, str(work / "send.py"), url, str(n0), str(n1)], check=True)
            time.sleep(1)  # Phoenix inserts received spans in batches
            r = sources.sync_source(db, "px", limit=3)
            print(r.summary())
            failures += (not r.ok) + (r.new != n1 - n0)
        (work / "export.json").write_text(json.dumps(export(url)))
        other = labeler.connect(work / "file.db")
        labeler.ingest_logs(other, work / "export.json")
        same = stored(db) == stored(other)
        ids = [q for (q,) in db.execute("SELECT query_id FROM queries")]
        print(f"same as the REST export: {same}; {len(ids)} queries, {len(set(ids))} distinct")
        return 0 if same and failures == 0 and len(ids) == len(set(ids)) == 20 else 1
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""Live traffic: trace stores (Phoenix, Langfuse, LangSmith) synced incrementally, and the OTLP
receiver (``collector``, ``otlp_http``, ``otlp_proto``: ``labeler collect``), each writing through ingest/.

``collect_options`` holds what a collect is asked and reports. ``store`` keeps the ``sources`` table (kind, URL, project, interval, overlap, sample; the high-water
mark and a sync's window and cursor; last sync, error and counts; never a key); ``keys`` reads the
keys from the environment or ``.streamlit/secrets.toml``; ``http`` is the JSON client with retries
and backoff on 429 and 5xx; ``phoenix``, ``langfuse`` and ``langsmith`` page through each store's
API; ``sync`` reads each source's new retrieval spans and ingests them through ``labeler.ingest``
like a file of the tool's export; ``push`` sends the consolidated human grades of the synced queries
back to their source (``labeler push``).
"""

from .push import PushResult, push_source
from .store import KINDS, Source, add_source, get_source, list_sources, remove_source
from .sync import (
           SyncResult,
           parse_interval,
           parse_since,
           source_status,
           sync_every,
           sync_source,
           sync_sources,
)

__all__ = ["KINDS", "PushResult", "Source", "SyncResult", "add_source", "get_source", "list_sources", "parse_interval",
           "parse_since", "push_source", "remove_source", "source_status", "sync_every", "sync_source", "sync_sources"]

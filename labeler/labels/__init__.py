"""Human labels: annotators, the queue (next item, leases, overlap, re-queue), label writes with an
audit trail, what an annotator sees (the pool of every retriever's chunks, blind by default),
progress, and consolidation into golden grades with adjudication.

Keys: queries and chunks are addressed by their integer ``pk`` (``Item.query_pk``,
``Chunk.doc_pk``); the public ``query_id``/``doc_id`` are on the records for display. Every
function takes the database first; times can be passed as ``now=`` (datetime or ISO text) so that
tests and replays control the clock.
"""

from .annotators import Annotator, add_annotator, get_role, list_annotators
from .consolidate import ConflictItem, ConflictPair, adjudicate, conflicts, golden_labels
from .pool import PoolChunk, Source, pool, requeue_after_ingest, set_pool_settings
from .progress import AnnotatorProgress, Progress, annotator_counts, annotator_stats, labeling_now, progress
from .queue import ORDERS, QueueSync, next_item, queue_counts, release, renew_lease, sync_queue
from .reads import Chunk, HistoryEntry, Item, get_item, history, previous_item
from .streams import GradeEvent, StreamResult, apply_grade_events, stream_acks
from .writes import (
    JUDGMENTS,
    QUERY_FIELDS,
    add_seconds,
    clear_grade,
    set_grade,
    set_query_fields,
    set_rest_zero,
    set_status,
)

__all__ = [
    "JUDGMENTS",
    "ORDERS",
    "QUERY_FIELDS",
    "Annotator",
    "AnnotatorProgress",
    "Chunk",
    "ConflictItem",
    "ConflictPair",
    "GradeEvent",
    "HistoryEntry",
    "Item",
    "PoolChunk",
    "Progress",
    "QueueSync",
    "Source",
    "StreamResult",
    "add_annotator",
    "add_seconds",
    "adjudicate",
    "apply_grade_events",
    "annotator_counts",
    "annotator_stats",
    "clear_grade",
    "conflicts",
    "get_item",
    "get_role",
    "golden_labels",
    "history",
    "list_annotators",
    "next_item",
    "pool",
    "previous_item",
    "labeling_now",
    "progress",
    "queue_counts",
    "release",
    "requeue_after_ingest",
    "renew_lease",
    "set_grade",
    "set_pool_settings",
    "set_query_fields",
    "set_rest_zero",
    "set_status",
    "stream_acks",
    "sync_queue",
]

"""The batch runner: big runs through the OpenAI Batch API (``/v1/files`` + ``/v1/batches``).

``submit`` builds each request exactly as the direct runner does (``request_record`` ->
``batch_body``), leaves out requests already answered in ``llm_calls``, splits the rest into
files of at most 50,000 lines and 190 MB, uploads them (``purpose="batch"``) and creates the
batches, storing every step in ``llm_batches`` / ``llm_batch_items`` first: a line's ``custom_id``
is the request's cache hash. ``collect`` streams finished output and error files line by line,
validates each answer like a direct call and stores it in ``llm_calls`` under that hash (so a later
direct run pays nothing), chunk by chunk with the lines' state, so an interrupted download is
collected again without counting anything twice. A bad line (non-200, invalid output, missing) is
retried once directly (an invalid answer gets the repair request); the lines an expired batch never
ran are re-batched, or run directly with ``direct_rest``. When every batch of a run is collected,
the run's owner (``judge``, ``synth``) reads its results back from the cache. Collecting lives in
``collecting``; this package's face exports the public names of ``store``, ``submitting``,
``collecting`` and ``local``.

``local`` is the same path without the API, for judges on a team's own GPUs: ``write_requests``
writes the request lines to a file that ``vllm run-batch`` reads, ``collect_file`` stores its output
file's lines exactly as collected lines are stored.

A process killed between uploading a file and creating its batch leaves a row that names the file
(``<key>.jsonl``) and the batch (metadata ``labeler_key``): the next ``submit``/``collect`` finds
and reuses them, or deletes a partial upload, so nothing is billed twice.
"""

from .collecting import Collected, collect
from .local import collect_file, write_requests
from .store import (
    ENDPOINT,
    MAX_BYTES,
    MAX_LINES,
    TERMINAL,
    BatchInfo,
    BatchOwner,
    Submitted,
    ages,
    list_batches,
    register_owner,
    run_spend,
)
from .submitting import batch_body, batch_line, cancel, client_for, recover, refresh, submit, wait

__all__ = [
    "ENDPOINT", "MAX_BYTES", "MAX_LINES", "TERMINAL", "BatchInfo", "BatchOwner", "Collected", "Submitted", "ages",
    "batch_body", "batch_line", "cancel", "client_for", "collect", "list_batches", "recover", "refresh",
    "register_owner", "run_spend", "submit", "wait", "collect_file", "write_requests",
]

"""What an ingest's undo (or ``remove_queries``) removed: the result that ``undo`` returns and
``undo_steps`` fills in, kept apart so that neither module imports the other's."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class UndoResult:
    """What an undo (or ``remove_queries``) removed; ``dry_run`` results removed nothing yet."""

    ingest_id: int | None
    already_undone: bool = False
    dry_run: bool = False
    queries_removed: int = 0
    queries_kept: int = 0  # queries the ingest created that another ingest logged too
    retrievals_removed: int = 0
    log_lines_removed: int = 0
    documents_removed: int = 0
    documents_kept: int = 0  # documents the ingest created that something else still uses
    labels_removed: int = 0  # query statuses, grades and adjudications removed (force)
    labeled_queries: list[str] = field(default_factory=list)  # query ids with human labels
    removed_ids: list[str] = field(default_factory=list)  # query ids removed (first 1,000)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        if self.already_undone:
            return f"ingest {self.ingest_id} was already undone; nothing changed"
        what = "would remove" if self.dry_run else "removed"
        head = f"ingest {self.ingest_id}: " if self.ingest_id is not None else ""
        text = (f"{head}{what} {self.queries_removed} queries, {self.retrievals_removed} retrievals, "
                f"{self.log_lines_removed} log lines, {self.documents_removed} documents")
        if self.labels_removed:
            text += f" and {self.labels_removed} labels"
        kept = []
        if self.queries_kept:
            kept.append(f"{self.queries_kept} queries another ingest logged too")
        if self.documents_kept:
            kept.append(f"{self.documents_kept} documents still in use")
        return text + (f"; kept {' and '.join(kept)}" if kept else "")

"""Names shared by every part of labeler: the account roles, the statuses of a query label, and the
check of an annotator's name."""

from __future__ import annotations

from typing import Any

from ..errors import LabelError

ROLES = ("annotator", "lead")
STATUSES = ("submitted", "skipped", "flagged", "discarded")


def check_name(annotator: Any) -> str:
    """The annotator's name without surrounding spaces; a LabelError when it is empty or not text."""
    if not isinstance(annotator, str) or not annotator.strip():
        raise LabelError(f"annotator name {annotator!r} is empty; give a name such as 'alice'")
    return annotator.strip()

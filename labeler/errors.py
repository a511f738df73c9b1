"""The small family of errors that labeler raises for things a user can fix.

The CLI turns a ``LabelerError`` into one line on stderr and exit code 1; the app shows it with
``st.error``. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class LabelerError(Exception):
    """A problem with the user's input or setup; the message says how to fix it."""


class DatabaseError(LabelerError):
    """The database file cannot be opened or is not a labeler database."""


class DatabaseBusyError(DatabaseError):
    """Another process kept the database locked for longer than a write waits (``BUSY_WAIT_S``)."""


class IngestError(LabelerError):
    """A log or corpus file could not be ingested; ``problems`` lists every bad record."""

    def __init__(self, message: str, problems: list | None = None, total: int | None = None):
        super().__init__(message)
        self.problems = problems or []
        self.total = total if total is not None else len(self.problems)


class LLMError(LabelerError):
    """The language model endpoint cannot be used as configured (key, URL, model, settings)."""


class LabelError(LabelerError):
    """A label read or write got something invalid: unknown query or chunk, a grade off the scale."""


class ItemTakenError(LabelError):
    """The item already has all the annotators it needs (e.g. a lease expired and it went to another)."""


class RoleError(LabelError):
    """The annotator lacks the role for this action (only a lead may adjudicate or change roles)."""


class SynthError(LabelerError):
    """Synthetic question generation or review got invalid options or an unknown question."""


class JudgeError(LabelerError):
    """A judge, rubric, judge run or suggestion cannot be used as asked (unknown name, bad option)."""


class GateError(JudgeError):
    """A judge run may not pre-label unlabeled pairs: no calibration run of it passes the gate."""


class SourceError(LabelerError):
    """A live source (``labeler source``) cannot be added, found or read: unknown name, missing key,
    the trace store refusing or failing after retries (``status``: its last HTTP status, if any).
    The message never holds a key."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status

"""Libraries some tests read their files or answers with, installed by ``[test]`` in the main CI step
but not in every environment (the lowest-versions step leaves out the extras whose pins clash with the
lowest bounds). Without one a test skips, with the reason; ``LABELER_REQUIRE_CONSUMERS``
(comma-separated module names) makes a missing one a failure instead: CI sets it wherever they are
installed, so nothing skips there in silence."""

from __future__ import annotations

import os
from typing import Any

import pytest


def required(name: str, *, needed_by: str | None = None, reason: str | None = None) -> Any:
    """Import ``name``; skip without it (with ``reason``), unless ``LABELER_REQUIRE_CONSUMERS`` names
    it, or ``needed_by`` (a test module's main library, whose CI step requires what it needs too)."""
    if (needed_by or name) in os.environ.get("LABELER_REQUIRE_CONSUMERS", "").split(","):
        return __import__(name, fromlist=["_"])
    return pytest.importorskip(name, reason=reason)

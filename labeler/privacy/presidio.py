"""An optional adapter to Microsoft Presidio's analyzer: used when ``presidio_analyzer`` and a spaCy
model are installed (labeler never requires them), adding what the built-in detectors have no
rule for (names of people, places). Set ``LABELER_PRESIDIO=0`` to leave it out."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

# Presidio entity -> placeholder type (the built-in detectors already cover the rest)
ENTITIES = {"PERSON": "PERSON", "LOCATION": "LOCATION", "NRP": "NRP", "US_PASSPORT": "NATIONAL_ID",
            "US_DRIVER_LICENSE": "NATIONAL_ID", "UK_NHS": "NATIONAL_ID", "MEDICAL_LICENSE": "NATIONAL_ID"}
MIN_SCORE = 0.6


@functools.cache
def _engine():  # noqa: ANN202 - presidio's type, when installed
    try:
        from presidio_analyzer import AnalyzerEngine  # type: ignore[import-not-found]

        return AnalyzerEngine()
    except Exception:  # noqa: BLE001 - not installed, or installed without a language model
        return None


def analyzer() -> Callable[[str], list[tuple[int, int, str]]] | None:
    """``text -> [(start, end, type)]`` from Presidio, or None when it cannot be used."""
    if os.environ.get("LABELER_PRESIDIO", "1") == "0":
        return None
    engine = _engine()
    if engine is None:
        return None

    def find(text: str) -> list[tuple[int, int, str]]:
        results = engine.analyze(text=text, language="en", entities=list(ENTITIES))
        return [(r.start, r.end, ENTITIES[r.entity_type]) for r in results
                if r.score >= MIN_SCORE and r.entity_type in ENTITIES]

    return find

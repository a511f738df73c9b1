"""AppTest: every page renders on the demo database and its interactions work."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import labeler
from labeler.demo import build_demo

APP = str(Path(labeler.__file__).parent / "app" / "streamlit_app.py")


@pytest.fixture
def demo_db(tmp_path, monkeypatch):
    path = tmp_path / "demo.db"
    build_demo(path)
    monkeypatch.setenv("LABELER_DB", str(path))
    return path


def run_page(page: str | None = None, **state) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=30)
    for k, v in state.items():
        at.session_state[k] = v
    at.run()
    if page:
        at.switch_page(page)
        at.run()
    assert not at.exception, at.exception
    return at


def test_data_page_shows_stats(demo_db):
    at = run_page("views/data.py", annotator="alice")
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["Queries"] == "166"
    assert tiles["Documents"] == "104"

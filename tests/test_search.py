"""Corpus search: finds the chunk the retriever missed, tracks corpus changes, handles empty input."""

from __future__ import annotations

import json

import pytest

import labeler
from labeler.search import CorpusIndex, corpus_version, search


@pytest.fixture
def db(tmp_path):
    db = labeler.connect(tmp_path / "s.db")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps(r) for r in [
        {"id": "sso-okta", "title": "SSO with Okta", "text": "Configure SAML single sign-on with Okta."},
        {"id": "sso-azure", "title": "SSO with Entra ID", "text": "Configure SAML single sign-on with Microsoft Entra ID."},
        {"id": "refunds", "title": "Refunds", "text": "Refunds are possible within 14 days of payment."},
    ]) + "\n")
    labeler.ingest_corpus(db, corpus)
    return db


def test_search_ranks_the_matching_chunk_first(db):
    hits = search(db, "okta saml login", k=10)
    assert hits[0].doc_id == "sso-okta"
    assert [h.doc_id for h in hits] == ["sso-okta", "sso-azure"]  # refunds shares no term: dropped
    assert hits[0].score > hits[1].score > 0


def test_exclude_and_k(db):
    hits = search(db, "single sign-on", k=1, exclude={search(db, "okta")[0].doc_pk})
    assert [h.doc_id for h in hits] == ["sso-azure"]


def test_empty_query_and_empty_corpus(tmp_path, db):
    assert search(db, "   ") == []
    empty = labeler.connect(tmp_path / "empty.db")
    with pytest.raises(labeler.LabelerError, match="the corpus is empty"):
        search(empty, "anything")


def test_version_changes_when_documents_change(db, tmp_path):
    index = CorpusIndex(db)
    before = corpus_version(db)
    assert index.version == before and len(index) == 3
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "new", "text": "Webhooks retry five times."}) + "\n")
    labeler.ingest_corpus(db, more)
    assert corpus_version(db) != before
    assert search(db, "webhooks", index=index)[0].doc_id == "new"  # stale index is rebuilt

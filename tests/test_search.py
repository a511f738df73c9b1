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


# --- the FTS5 index (labeler.search.search_text) -----------------------------------------------

from click.testing import CliRunner  # noqa: E402

from labeler import llm  # noqa: E402
from labeler.cli import cli  # noqa: E402
from labeler.ingest import staging  # noqa: E402
from labeler.labels.writes import set_grade  # noqa: E402
from labeler.search import embed_documents, match_expression, search_missed, search_text, tokens  # noqa: E402
from tests.fake_openai import FakeOpenAI  # noqa: E402


def ids(found):
    return [h.doc_id for h in found]


def test_bm25_finds_by_title_and_text(db):
    assert ids(search_text(db, "okta saml login")) == ["sso-okta", "sso-azure"]
    assert ids(search_text(db, "Entra", k=5)) == ["sso-azure"]  # a title word
    found = search_text(db, "single sign-on", k=1, exclude={search_text(db, "okta")[0].doc_pk})
    assert ids(found) == ["sso-azure"]
    assert search_text(db, "   ") == [] and search_text(db, "zebra") == []


@pytest.mark.parametrize("text", ['"', '""okta', "okta*", "NEAR(okta saml)", "-okta", "title:okta", "okta:",
                                  "okta AND NOT saml", "^okta", "(okta", "okta OR", "{title}: okta", "'okta'"])
def test_free_text_never_becomes_fts_syntax(db, text):
    found = search_text(db, text)  # no sqlite3.OperationalError
    if "okta" in text.lower():
        assert "sso-okta" in ids(found)
    assert all(c.isalnum() or c in ' "OR' for c in match_expression(tokens(text)))


def test_only_punctuation_finds_nothing(db):
    for text in ['"', "*", "NEAR(", "-", ":", "()", '" OR "']:
        assert search_text(db, text) == [] or text == '" OR "'


def test_diacritics_and_case_are_folded(tmp_path):
    db = labeler.connect(tmp_path / "d.db")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "cafe", "text": "Le CAFÉ est fermé le lundi."}) + "\n")
    labeler.ingest_corpus(db, corpus)
    assert ids(search_text(db, "café")) == ids(search_text(db, "cafe")) == ids(search_text(db, "Ferme")) == ["cafe"]


def test_the_index_follows_a_corpus_ingest_that_changes_text(db, tmp_path):
    changed = tmp_path / "changed.jsonl"
    changed.write_text(json.dumps({"id": "refunds", "title": "Webhooks", "text": "Webhooks retry five times."}) + "\n")
    labeler.ingest_corpus(db, changed)
    assert search_text(db, "refunds payment") == []
    assert ids(search_text(db, "webhooks retry")) == ["refunds"]
    assert db.execute("INSERT INTO documents_fts (documents_fts) VALUES ('integrity-check')") is not None


def test_the_migration_indexes_documents_that_were_there_before(tmp_path, db):
    path = tmp_path / "s.db"
    for statement in ("DROP TRIGGER documents_fts_insert", "DROP TRIGGER documents_fts_update",
                      "DROP TRIGGER documents_fts_delete", "DROP TABLE documents_fts_vocab", "DROP TABLE documents_fts", "DROP TABLE embeddings",
                      "DELETE FROM _sqlite_migrations WHERE name = 'm012_search_fts'"):
        db.execute(statement)
    db.conn.commit()
    reopened = labeler.connect(path)
    assert ids(search_text(reopened, "okta")) == ["sso-okta"]


def test_rows_of_an_ingest_still_staging_are_not_found(db):
    claimed = staging.claim(db, "corpus", "late.jsonl", "jsonl")
    with claimed.write():
        db.execute("INSERT INTO documents (doc_id, text, created_at, ingest_id) VALUES "
                   "('late', 'Okta okta okta groups sync', '2026-01-01', ?)", [claimed.id])
    assert "late" not in ids(search_text(db, "okta groups", k=10))
    staging.publish(claimed, "x", {})
    assert ids(search_text(db, "okta groups", k=1)) == ["late"]


def test_an_empty_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(labeler.LabelerError, match="the corpus is empty"):
        search_text(labeler.connect(tmp_path / "e.db"), "anything")


# --- what the retrievers missed (labeler.search.search_missed) ---------------------------------

CORPUS = [
    {"id": "pw-reset", "text": "To reset your password open Settings, Security, then Reset password."},
    {"id": "pw-policy", "text": "Passwords need twelve characters; the admin can require rotation."},
    {"id": "sso-lockout", "text": "Locked out after SAML SSO changes: an admin disables enforcement under "
                                 "Identity provider, then you sign in with your email."},
    {"id": "idp-enforce", "text": "Identity provider enforcement: admins choose whether SAML SSO enforcement "
                                 "applies to every member, and which identity provider."},
    {"id": "refunds", "text": "Refunds are possible within 14 days of payment."},
    {"id": "invoices", "text": "Invoices are emailed on the first day of each month."},
]


@pytest.fixture
def labeled(tmp_path):
    db = labeler.connect(tmp_path / "m.db")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(r) for r in CORPUS) + "\n")
    labeler.ingest_corpus(db, corpus)
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"query_id": "q1", "question": "I cannot log in since we turned on SSO",
                               "retrieved": [{"id": "pw-reset", "score": 0.9}, {"id": "pw-policy", "score": 0.5}]})
                   + "\n")
    labeler.ingest_logs(db, log)
    return db


def pks(db, *doc_ids):
    return [db.execute("SELECT pk FROM documents WHERE doc_id = ?", [d]).fetchone()[0] for d in doc_ids]


def test_missed_excludes_the_pool_and_learns_from_relevant_chunks(labeled):
    db = labeled
    q = db.execute("SELECT pk FROM queries WHERE query_id = 'q1'").fetchone()[0]
    before = ids(search_missed(db, q, k=10))
    assert "pw-reset" not in before and "pw-policy" not in before
    assert before[0] == "sso-lockout"  # the question's words: sso
    pw_reset, pw_policy, lockout = pks(db, "pw-reset", "pw-policy", "sso-lockout")
    set_grade(db, q, pw_reset, "ann", 0)
    set_grade(db, q, pw_policy, "ann", 0)
    set_grade(db, q, lockout, "ann", 3)  # added from search: now in the pool
    after = search_missed(db, q, k=10)
    assert "sso-lockout" not in ids(after)
    assert ids(after)[0] == "idp-enforce"  # "more like these": identity provider enforcement admin
    assert after[0].score > 0 and all(a.score >= b.score for a, b in zip(after, after[1:], strict=False))
    assert set(ids(after)) <= {"idp-enforce", "refunds", "invoices"}


def test_embeddings_join_the_fusion_and_are_cached(labeled):
    db = labeled
    q = db.execute("SELECT pk FROM queries WHERE query_id = 'q1'").fetchone()[0]
    with FakeOpenAI() as server:
        config = llm.LLMConfig(base_url=server.url, api_key="k", embedding_model="fake-embed",
                               embedding_batch_size=4)
        assert embed_documents(db, config) == len(CORPUS)
        assert server.stats()["embedding_requests"] == 2  # 6 chunks in batches of 4
        assert embed_documents(db, config) == 0
        found = search_missed(db, q, k=10, config=config)
        calls = server.stats()["embedding_requests"]
        assert calls == 3 and server.embedded_texts[-1] == "I cannot log in since we turned on SSO"
        # every chunk outside the pool has a vector: the embedding list brings all of them in
        assert set(ids(found)) == {"sso-lockout", "idp-enforce", "refunds", "invoices"}
        assert search_missed(db, q, k=10, config=config) == found
        assert server.stats()["embedding_requests"] == calls  # the question's vector is cached too
    assert db.execute("SELECT count(*), min(dims) FROM embeddings WHERE model = 'fake-embed'").fetchone() == (7, 64)
    # the server is gone: cached texts still embed, from the database
    assert len(llm.embed(db, config, ["I cannot log in since we turned on SSO"])[0]) == 64


def test_embedding_errors_are_one_line(labeled):
    config = llm.LLMConfig(base_url="http://127.0.0.1:9/v1", api_key="k", embedding_model="m", max_retries=0,
                           timeout_s=2)
    with pytest.raises(labeler.LabelerError, match="embeddings request failed"):
        llm.embed(labeled, config, ["x"])
    with pytest.raises(labeler.LabelerError, match="no embeddings model"):
        embed_documents(labeled, llm.LLMConfig())


def test_embedding_model_from_secrets_or_environment(monkeypatch):
    monkeypatch.delenv("LABELER_EMBEDDING_MODEL", raising=False)
    assert llm.LLMConfig.from_env({}).embedding_model is None
    assert llm.LLMConfig.from_env({"llm": {"embedding_model": "e1"}}).embedding_model == "e1"
    monkeypatch.setenv("LABELER_EMBEDDING_MODEL", "e2")
    assert llm.LLMConfig.from_env({}).embedding_model == "e2"


# --- CLI ---------------------------------------------------------------------------------------

def test_cli_search_text_and_missed(labeled, tmp_path, monkeypatch):
    monkeypatch.delenv("LABELER_EMBEDDING_MODEL", raising=False)
    monkeypatch.chdir(tmp_path)
    path = str(tmp_path / "m.db")
    runner = CliRunner()
    out = runner.invoke(cli, ["--db", path, "search", "text", "saml identity", "--k", "2", "--json"])
    assert out.exit_code == 0, out.output
    found = json.loads(out.output)
    assert [f["doc_id"] for f in found] == ["idp-enforce", "sso-lockout"] and found[0]["score"] > 0
    out = runner.invoke(cli, ["--db", path, "search", "text", 'NEAR("saml'])
    assert out.exit_code == 0 and "sso-lockout" in out.output
    out = runner.invoke(cli, ["--db", path, "search", "missed", "--json"])
    assert out.exit_code == 0 and json.loads(out.output) == {}  # nothing graded yet
    out = runner.invoke(cli, ["--db", path, "search", "missed", "q1", "--k", "2", "--json"])
    result = json.loads(out.output)
    assert list(result) == ["q1"] and len(result["q1"]) == 2 and set(result["q1"][0]) == {"doc_id", "score"}
    db = labeler.connect(path)
    set_grade(db, 1, pks(db, "pw-reset")[0], "ann", 2)
    out = runner.invoke(cli, ["--db", path, "search", "missed", "--json"])
    assert list(json.loads(out.output)) == ["q1"]
    out = runner.invoke(cli, ["--db", path, "search", "missed", "nope"])
    assert out.exit_code == 1 and "no query 'nope'" in out.output
    for command in (["search"], ["search", "text"], ["search", "missed"], ["search", "embed"]):
        help_text = runner.invoke(cli, [*command, "-h"]).output
        assert "Example:" in help_text, command

"""Corpus search: finds the chunk the retriever missed, tracks corpus changes, handles empty input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import labeler
from labeler import db as store
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
        assert search_text(db, text) == []


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
    db.execute("INSERT INTO documents_fts (documents_fts, rank) VALUES ('integrity-check', 1)")  # raises if wrong
    assert db.execute("SELECT count(*) FROM documents_fts_pending").fetchone()[0] == 0


def test_a_discarded_ingest_leaves_the_index_right(db):
    claimed = staging.claim(db, "corpus", "late.jsonl", "jsonl")
    with claimed.write():
        db.execute("INSERT INTO documents (doc_id, text, created_at, ingest_id) VALUES "
                   "('late', 'Okta groups sync', '2026-01-01', ?)", [claimed.id])
    staging.index_search(db)  # as if another writer had indexed it meanwhile
    staging.release(claimed)
    staging.discard(db, claimed.id)
    assert ids(search_text(db, "okta groups")) == ["sso-okta"]
    db.execute("INSERT INTO documents_fts (documents_fts, rank) VALUES ('integrity-check', 1)")
    db.execute("UPDATE documents SET text = 'Okta groups' WHERE doc_id = 'refunds'")
    db.execute("DELETE FROM documents WHERE doc_id = 'sso-azure'")
    staging.index_search(db)
    db.execute("INSERT INTO documents_fts (documents_fts, rank) VALUES ('integrity-check', 1)")
    assert ids(search_text(db, "okta groups")) == ["refunds", "sso-okta"]


def test_the_migration_indexes_documents_that_were_there_before(tmp_path, db):
    path = tmp_path / "s.db"
    for statement in ("DROP TRIGGER documents_fts_insert", "DROP TRIGGER documents_fts_update",
                      "DROP TRIGGER documents_fts_delete", "DROP TABLE documents_fts_vocab", "DROP TABLE documents_fts_pending", "DROP TABLE documents_fts", "DROP TABLE embeddings",
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


def test_queries_keep_within_the_postings_bound_where_every_chunk_shares_the_words(tmp_path, monkeypatch):
    from labeler.search import fts

    db = labeler.connect(tmp_path / "narrow.db")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"c{i}", "text": ("plan seat invoice " if i % 10 else "") + f"note{i}"
                                          + (" zebra" if i < 2 else "")}) + "\n" for i in range(300)))
    labeler.ingest_corpus(db, corpus)
    question = "plan seat zebra"
    assert sorted(fts.query_terms(db, question)) == ["plan", "seat", "zebra"]  # 542 postings: within the bound
    feedback = fts.distinctive_terms(db, ["plan seat invoice zebra"], 20)
    assert sorted(feedback) == ["invoice", "plan", "seat", "zebra"]
    monkeypatch.setattr(fts, "MAX_POSTINGS", 500)
    # the rarest words first, while their posting lists add up to at most the bound (half for feedback)
    assert fts.query_terms(db, question) == ["zebra", "plan"]
    assert fts.distinctive_terms(db, ["plan seat invoice zebra"], 20) == ["zebra"]
    assert sorted(ids(search_text(db, question, k=2))) == ["c0", "c1"]


def test_possibly_missed_leaves_out_words_too_common_to_rank_by_in_a_big_corpus(tmp_path, monkeypatch):
    """A word in more than a tenth of the chunks weighs little in BM25 and cannot single out a
    missed chunk, and reading its posting list was most of a "Possibly missed" panel's time."""
    from labeler.search import fts

    db = labeler.connect(tmp_path / "narrow.db")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"c{i}", "text": ("plan seat invoice " if i % 10 else "") + f"note{i}"
                                          + (" zebra" if i < 2 else "") + (" otter" if i % 5 == 1 else "")}) + "\n"
                              for i in range(300)))
    labeler.ingest_corpus(db, corpus)
    question = "plan seat zebra"
    monkeypatch.setattr(fts, "COMMON_MIN_DOCS", 100)  # this corpus of 300 counts as big
    assert fts.distinctive_terms(db, ["plan seat invoice zebra"], 20) == ["zebra"]
    assert fts.distinctive_terms(db, ["plan otter zebra otter"], 20) == ["zebra"]  # otter: in 60 of 300
    assert fts.distinctive_terms(db, ["plan seat invoice"], 20) == []
    assert fts.query_terms(db, question, informative=True) == ["zebra"]
    assert sorted(fts.query_terms(db, question)) == ["plan", "seat", "zebra"]  # typed: the user's words stay
    assert sorted(ids(search_text(db, "plan seat", k=3))) != []
    monkeypatch.setattr(fts, "COMMON_MIN_DOCS", 10_000)  # a small corpus keeps them, within the bound
    assert sorted(fts.distinctive_terms(db, ["plan seat invoice zebra"], 20)) == ["invoice", "plan", "seat", "zebra"]


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


def test_missed_key_changes_with_grades_rankings_threshold_and_corpus(labeled, tmp_path):
    from labeler.search import missed_key

    db = labeled
    q = db.execute("SELECT pk FROM queries WHERE query_id = 'q1'").fetchone()[0]
    first = missed_key(db, q)
    assert missed_key(db, q) == first  # nothing changed: the Label page reuses the panel
    set_grade(db, q, pks(db, "pw-reset")[0], "ann", 0)
    graded = missed_key(db, q)
    assert graded != first
    labeler.set_setting(db, "threshold", 3)
    assert missed_key(db, q) != graded
    raised = missed_key(db, q)
    corpus = tmp_path / "more.jsonl"
    corpus.write_text(json.dumps({"id": "sso-faq", "text": "SSO questions and answers."}) + "\n")
    labeler.ingest_corpus(db, corpus)
    assert missed_key(db, q) != raised  # the index changed
    indexed = missed_key(db, q)
    log = tmp_path / "again.jsonl"
    log.write_text(json.dumps({"query_id": "q1", "question": "I cannot log in since we turned on SSO",
                               "retriever": "bm25", "retrieved": [{"id": "sso-faq", "score": 1.0}]}) + "\n")
    labeler.ingest_logs(db, log)
    assert missed_key(db, q) != indexed  # another retriever's chunk joined the pool


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


def test_a_changed_chunk_loses_its_old_vector_and_is_embedded_again(labeled, tmp_path):
    db = labeled
    with FakeOpenAI() as server:
        config = llm.LLMConfig(base_url=server.url, api_key="k", embedding_model="fake-embed")
        assert embed_documents(db, config) == len(CORPUS)
        refunds = pks(db, "refunds")[0]
        changed = tmp_path / "changed.jsonl"
        changed.write_text(json.dumps({"id": "refunds", "text": "Refunds take 30 days now."}) + "\n")
        labeler.ingest_corpus(db, changed)
        assert db.execute("SELECT count(*) FROM embeddings WHERE doc_pk = ?", [refunds]).fetchone()[0] == 0
        assert embed_documents(db, config) == 1  # only the changed chunk costs a request
        assert server.embedded_texts[-1] == "Refunds take 30 days now."
        assert db.execute("SELECT count(*) FROM embeddings WHERE doc_pk = ?", [refunds]).fetchone()[0] == 1


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


# --- blind labeling: "possibly missed" reads the viewer's own grades and the retrievers' chunks ---

def _steer(db, q: int) -> None:
    """What a teammate on the same query does (on purpose or not) that must not reach alice's
    panel: grades relevant the chunk the question finds first (added from search, so it would leave
    her pool), a logged chunk relevant and another irrelevant (feedback), and a lead adjudicates."""
    labeler.set_setting(db, "overlap_fraction", 1.0)
    lockout, enforce, policy, invoices = pks(db, "sso-lockout", "idp-enforce", "pw-policy", "invoices")
    set_grade(db, q, lockout, "bob", 3)
    set_grade(db, q, policy, "bob", 3)
    set_grade(db, q, enforce, "bob", 0)
    from labeler.accounts import set_role
    from labeler.labels.consolidate import adjudicate

    set_role(db, "bob", "lead")
    adjudicate(db, q, invoices, 3, "bob")


def _alice_grades(db, q: int) -> None:
    labeler.set_setting(db, "overlap_fraction", 1.0)
    reset, policy = pks(db, "pw-reset", "pw-policy")
    set_grade(db, q, reset, "alice", 0)
    set_grade(db, q, policy, "alice", 1)


def test_possibly_missed_for_a_viewer_never_reads_another_annotators_grades(labeled):
    from labeler.search import missed_key

    db = labeled
    q = db.execute("SELECT pk FROM queries WHERE query_id = 'q1'").fetchone()[0]
    _alice_grades(db, q)
    key = missed_key(db, q, "alice")
    alone = [(h.doc_id, h.score) for h in search_missed(db, q, k=10, annotator="alice")]
    assert "sso-lockout" in [d for d, _ in alone]  # the chunk bob is about to take into his pool
    everyone_before = ids(search_missed(db, q, k=10))
    _steer(db, q)
    assert [(h.doc_id, h.score) for h in search_missed(db, q, k=10, annotator="alice")] == alone
    assert missed_key(db, q, "alice") == key  # a cache keyed by it keeps alice's panel as it was
    # the same grades do change bob's panel and the lead's view: the attack had something to leak
    assert ids(search_missed(db, q, k=10, annotator="bob")) != [d for d, _ in alone]
    assert ids(search_missed(db, q, k=10)) != everyone_before
    assert missed_key(db, q, "bob") != key  # and two viewers never share a key


def test_cli_search_missed_for_an_annotator_is_blind(labeled, tmp_path, monkeypatch):
    monkeypatch.delenv("LABELER_EMBEDDING_MODEL", raising=False)
    monkeypatch.chdir(tmp_path)
    path = str(tmp_path / "m.db")
    db = labeled
    q = db.execute("SELECT pk FROM queries WHERE query_id = 'q1'").fetchone()[0]
    _alice_grades(db, q)

    def missed(*more: str) -> dict:
        out = CliRunner().invoke(cli, ["--db", path, "search", "missed", *more, "--json"])
        assert out.exit_code == 0, out.output
        return json.loads(out.output)

    before, everyone = missed("--annotator", "alice"), missed()
    _steer(db, q)
    assert missed("--annotator", "alice") == before
    assert missed() != everyone  # without --annotator: the lead's view, every grade counts
    assert list(missed("--annotator", "carol")) == []  # carol graded nothing: no query of hers


def test_label_page_panel_is_the_same_whatever_a_teammate_grades(labeled, tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from labeler.app import state

    monkeypatch.delenv("LABELER_EMBEDDING_MODEL", raising=False)
    monkeypatch.setenv("LABELER_DB", str(tmp_path / "m.db"))
    db = labeled
    q = db.execute("SELECT pk FROM queries WHERE query_id = 'q1'").fetchone()[0]
    _alice_grades(db, q)

    def panel() -> list[str]:
        at = AppTest.from_file(str(Path(labeler.__file__).parent / "app" / "streamlit_app.py"), default_timeout=30)
        at.session_state[state.ANNOTATOR] = "alice"
        at.run()
        assert not at.exception, at.exception
        prefix = f"add_missed_{q}_"
        return [b.key for b in at.button if b.key and b.key.startswith(prefix) and b.key.endswith("_0")]

    before = panel()
    assert before
    _steer(db, q)
    assert panel() == before


# --- CISI: how many of the relevant chunks every retriever missed does each method find? ---------

def missed_shares(tmp_path) -> dict[str, float | int]:
    """Log the TF-IDF top 10 of every CISI query, grade each pool from the qrels (relevant 2, else
    0), then for every relevant document outside the pool check whether a method has it in its top
    10: (a) TF-IDF on the question with the pool excluded (the former Label-page search), (b) BM25
    on the question, (c) ``search_missed`` (BM25 question + relevance feedback, fused)."""
    from labeler.search import CorpusIndex, pool, query_pk
    from tests import cisi

    db = labeler.connect(tmp_path / "cisi.db")
    labeler.ingest_corpus(db, cisi.write_corpus(tmp_path / "corpus.jsonl"))
    labeler.ingest_logs(db, cisi.write_logs(tmp_path / "logs.jsonl"))
    doc_pk = dict(db.execute("SELECT doc_id, pk FROM documents").fetchall())
    doc_id = {pk: d for d, pk in doc_pk.items()}
    index = CorpusIndex(db)
    found = {"tfidf": 0, "bm25": 0, "fusion": 0, "fusion_with_feedback": 0}
    missed = missed_with_feedback = room = room_with_feedback = 0
    for q, relevant in sorted(cisi.qrels().items(), key=lambda kv: int(kv[0])):
        qpk = query_pk(db, f"cisi-{q}")
        question = cisi.queries()[q]
        for d, _ in cisi.tfidf_run(10)[q]:
            set_grade(db, qpk, doc_pk[d], "cisi", 2 if d in relevant else 0)
        shown = pool(db, qpk)
        outside = {d for d in relevant if doc_pk[d] not in shown}
        if not outside:
            continue
        has_feedback = any(doc_id[pk] in relevant for pk in shown)
        missed += len(outside)
        room += min(10, len(outside))  # what a top 10 can hold
        missed_with_feedback += len(outside) if has_feedback else 0
        room_with_feedback += min(10, len(outside)) if has_feedback else 0
        top = {
            "tfidf": {h.doc_id for h in index.search(question, 10, exclude=shown)},
            "bm25": {h.doc_id for h in search_text(db, question, 10, exclude=shown)},
            "fusion": {h.doc_id for h in search_missed(db, qpk, 10)},
        }
        for method, ids_ in top.items():
            found[method] += len(outside & ids_)
        if has_feedback:
            found["fusion_with_feedback"] += len(outside & top["fusion"])
    shares: dict[str, float | int] = {m: round(found[m] / missed, 3) for m in ("tfidf", "bm25", "fusion")}
    shares |= {f"{m}_of_top10_room": round(found[m] / room, 3) for m in ("tfidf", "bm25", "fusion")}
    shares["fusion_where_a_pool_chunk_is_relevant"] = round(found["fusion_with_feedback"] / missed_with_feedback, 3)
    shares["fusion_where_a_pool_chunk_is_relevant_of_top10_room"] = round(
        found["fusion_with_feedback"] / room_with_feedback, 3)
    shares |= {f"{m}_found": found[m] for m in ("tfidf", "bm25", "fusion")}
    return shares | {"relevant_outside_pool": missed, "top10_room": room}


def test_cisi_missed_chunks_found(tmp_path):
    from tests import cisi

    cisi.require_cisi()
    shares = missed_shares(tmp_path)
    print("\nCISI missed-chunk shares:", json.dumps(shares))
    # measured: TF-IDF 3.3%, BM25 5.6%, fusion 10.3% of the relevant documents outside the pools
    # (13.8%, 23.0%, 42.4% of what a top 10 can hold): the fusion finds 3.1x. Words -> Porter stems
    # took BM25 from 4.2% to 5.5% and the fusion from 8.0% to 8.4%; title words counting twice and
    # the Rocchio re-ranking took it to 9.3%, the latent semantic list to 10.3%.
    assert shares["bm25_found"] > 1.5 * shares["tfidf_found"], shares
    assert shares["fusion_found"] >= 3 * shares["tfidf_found"], shares


# --- the Label page's "Possibly missed" panel (AppTest) ----------------------------------------

def test_label_page_fills_possibly_missed_once_the_pool_is_graded(tmp_path, monkeypatch):
    import labeler.labels as labels
    from tests.test_app_label import app, click, current, grades, make_db

    records = [{"query_id": "w1", "question": "How do I rotate the webhook signing secret?",
                "retrieved": [{"id": "hooks", "text": "Webhooks: retries and signing.", "score": 0.9},
                              {"id": "keys", "text": "API keys can be rotated by admins.", "score": 0.5}]}]
    corpus = [{"id": "rotate-secret", "text": "Rotate the webhook signing secret under Settings, Developers."},
              {"id": "invoices", "text": "Invoices are emailed monthly."}]
    path = make_db(tmp_path, records, corpus)
    monkeypatch.setenv("LABELER_DB", str(path))
    monkeypatch.delenv("LABELER_EMBEDDING_MODEL", raising=False)
    at = app()
    pk = current(at)
    assert any("Fills itself once every chunk has a grade" in c.value for c in at.caption)
    db = labeler.connect(path)
    for doc_id, grade in (("hooks", 2), ("keys", 0)):
        labels.set_grade(db, pk, pks(db, doc_id)[0], "alice", grade)
    at.run()
    assert not at.exception, at.exception
    target = pks(db, "rotate-secret")[0]
    click(at, f"add_missed_{pk}_{target}_3")
    assert grades(path, "alice", pk)["rotate-secret"] == 3
    assert not [b for b in at.button if b.key and b.key.startswith(f"add_missed_{pk}_{target}_")]  # now in the pool


def test_a_new_database_never_reads_another_ones_kept_vocabulary(tmp_path):
    """Small indexes keep their vocabulary per connection. Two in-memory databases made one after
    the other have the same index structure record, and the second connection may even take the
    first one's id() once that one is closed: the second must still find its own words."""
    for i, word in enumerate(["alpha", "walrus", "okapi"]):
        db = labeler.connect(":memory:")
        corpus = tmp_path / f"c{i}.jsonl"
        corpus.write_text(json.dumps({"id": f"d{i}", "text": f"{word} manual page"}) + "\n")
        labeler.ingest_corpus(db, corpus)
        assert ids(search_text(db, word)) == [f"d{i}"], word
        db.conn.close()


# --- the latent semantic list: other words for the same thing --------------------------------------

def _topic_corpus(path, topics=40, per_topic=10, seed=5, prefix=""):
    """``per_topic`` chunks on each of ``topics`` topics, each chunk 6 random words of its topic's 15:
    chunks of a topic share few words, but those words keep company across the topic."""
    import random

    rng = random.Random(seed)
    vocab = {f"{prefix}t{n}x": [f"{prefix}t{n}x{i}" for i in range(15)] for n in range(topics)}
    rows = [{"id": f"{name}-{j}", "text": " ".join(rng.sample(words, 6))}
            for name, words in vocab.items() for j in range(per_topic)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return vocab


def test_latent_list_finds_a_chunk_that_shares_no_word_with_the_question(tmp_path):
    from labeler.search import latent, search_text

    db = labeler.connect(tmp_path / "l.db")
    topics = _topic_corpus(tmp_path / "c.jsonl")
    labeler.ingest_corpus(db, tmp_path / "c.jsonl")
    (tmp_path / "t.jsonl").write_text(json.dumps({"id": "target", "text": " ".join(topics["t7x"][:5])}) + "\n")
    labeler.ingest_corpus(db, tmp_path / "t.jsonl")
    target_pk = pks(db, "target")[0]
    question = " ".join(topics["t7x"][10:])  # words of the target's topic, none of them in the target
    assert target_pk not in {h.doc_pk for h in search_text(db, question, 50)}  # no word in common
    top = latent.similar(db, question, [], set(), 401)
    topic = dict(db.execute("SELECT pk, substr(doc_id, 1, 3) FROM documents"))
    # the ten chunks of the question's topic and the target come first: nearness is by topic
    assert [topic[pk] for pk in top[:11]].count("t7x") == 10 and target_pk in top[:11]
    assert target_pk not in latent.similar(db, question, [], {target_pk}, 401)  # excluded means excluded
    # a relevant chunk pulls its topic in: with one of topic 3's chunks graded relevant, topic 3 comes first
    t3 = pks(db, "t3x-0")[0]
    assert {topic[pk] for pk in latent.similar(db, question, [t3], {t3}, 9)} == {"t3x"}


def test_latent_space_folds_in_new_changed_and_removed_chunks_and_refits_past_a_share(tmp_path):
    from labeler.search import latent

    db = labeler.connect(tmp_path / "l.db")
    topics = _topic_corpus(tmp_path / "c.jsonl")
    labeler.ingest_corpus(db, tmp_path / "c.jsonl")
    question = " ".join(topics["t2x"][:5])
    assert latent.warm(db)  # what the app does at start, in the background
    space = latent._spaces[str(tmp_path / "l.db")]
    latent.similar(db, question, [], set(), 10)
    assert latent._spaces[str(tmp_path / "l.db")] is space
    assert space.fitted == 400
    # a chunk ingested later is projected into the kept space and found
    (tmp_path / "n.jsonl").write_text(json.dumps({"id": "new", "text": question}) + "\n")
    labeler.ingest_corpus(db, tmp_path / "n.jsonl")
    new_pk = pks(db, "new")[0]
    assert latent.similar(db, question, [], set(), 1) == [new_pk]
    assert latent._spaces[str(tmp_path / "l.db")] is space and space.folded == 1
    # another connection to the file (the app has one per script thread) shares the space
    other_db = labeler.connect(tmp_path / "l.db")
    assert latent.similar(other_db, question, [], set(), 1) == [new_pk]
    assert latent._spaces[str(tmp_path / "l.db")] is space and space.folded == 1
    # its text changes to another topic's words: projected again, no longer near
    other = " ".join(topics["t9x"][:5])
    (tmp_path / "n.jsonl").write_text(json.dumps({"id": "new", "text": other}) + "\n")
    labeler.ingest_corpus(db, tmp_path / "n.jsonl")  # the same id again: its text is replaced
    assert new_pk not in latent.similar(db, question, [], set(), 30)
    assert latent.similar(db, other, [], set(), 1) == [new_pk]
    # removed: never returned
    db.execute("DELETE FROM documents WHERE pk = ?", [new_pk])
    store.index_pending(db.conn)  # as `ingest undo` and `queries remove` do
    assert new_pk not in latent.similar(db, other, [], set(), 400)
    # more than a fifth of the corpus new: fitted again on everything
    _topic_corpus(tmp_path / "more.jsonl", topics=10, prefix="m")
    labeler.ingest_corpus(db, tmp_path / "more.jsonl")
    latent.similar(db, question, [], set(), 10)
    assert latent._spaces[str(tmp_path / "l.db")].fitted == 500


def test_latent_space_of_a_database_made_anew_at_the_same_path_is_its_own(tmp_path):
    from labeler.search import latent

    path = tmp_path / "again.db"
    db = labeler.connect(path)
    topics = _topic_corpus(tmp_path / "c.jsonl")
    labeler.ingest_corpus(db, tmp_path / "c.jsonl")
    question = " ".join(topics["t4x"][:5])
    assert {pk for pk in latent.similar(db, question, [], set(), 10)} == set(pks(db, *[f"t4x-{j}" for j in range(10)]))
    db.conn.close()
    path.unlink()
    db = labeler.connect(path)  # the same file name, the same number of chunks, other words
    _topic_corpus(tmp_path / "c2.jsonl", prefix="z")
    labeler.ingest_corpus(db, tmp_path / "c2.jsonl")
    assert latent.similar(db, question, [], set(), 10) == []  # no word of the question is in it
    z4 = " ".join(f"zt4x{i}" for i in range(5))
    assert set(latent.similar(db, z4, [], set(), 10)) == set(pks(db, *[f"zt4x-{j}" for j in range(10)]))


def test_latent_range_counts_chunks_with_text_not_document_keys(tmp_path):
    from labeler.search import latent

    db = labeler.connect(tmp_path / "ids.db")
    now = store.now()
    with store.transaction(db):  # 21,000 chunk ids that logs named without text: keys, not chunks
        db.conn.executemany("INSERT INTO documents (doc_id, created_at) VALUES (?, ?)",
                            [(f"logged-{i}", now) for i in range(21_000)])
    topics = _topic_corpus(tmp_path / "c.jsonl")
    labeler.ingest_corpus(db, tmp_path / "c.jsonl")
    assert db.execute("SELECT max(pk) FROM documents").fetchone()[0] > latent.LSA_MAX_DOCS
    top = latent.similar(db, " ".join(topics["t5x"][:5]), [], set(), 10)
    assert set(top) == set(pks(db, *[f"t5x-{j}" for j in range(10)]))


def test_latent_list_stays_out_of_small_corpora(db):
    from labeler.search import latent

    assert not latent.warm(db)
    assert latent.similar(db, "single sign-on", [], set(), 10) == []


def test_the_index_is_brought_up_to_date_in_steps_sized_to_a_short_lock_hold(tmp_path):
    """Short chunks are indexed thousands at a time (each step is a segment FTS5 merges later),
    each step holding the lock about INDEX_TARGET_S, never long; every document is found after."""
    import contextlib
    import time

    db = labeler.connect(tmp_path / "fts.db")
    with store.transaction(db):
        db.conn.executemany("INSERT INTO documents (doc_id, text, created_at) VALUES (?, ?, '2026-01-01')",
                            [(f"d{i}", f"the webhook retries {i} times on port {i % 97}", ) for i in range(30_000)])
    holds: list[float] = []
    sizes: list[int] = []

    @contextlib.contextmanager
    def write():
        before = db.execute("SELECT count(*) FROM documents_fts_pending").fetchone()[0]
        start = time.perf_counter()
        with store.transaction(db):
            yield
        holds.append(time.perf_counter() - start)
        sizes.append(before - db.execute("SELECT count(*) FROM documents_fts_pending").fetchone()[0])

    staging.index_search(db, write)
    assert sum(sizes) == 30_000 and sizes[0] == store.INDEX_CHUNK
    assert max(sizes) > 2 * store.INDEX_CHUNK and len(sizes) < 30, sizes  # steps grew past the first
    assert max(holds) < 0.25, holds
    assert db.execute("SELECT count(*) FROM documents_fts WHERE documents_fts MATCH 'webhook'").fetchone()[0] == 30_000
    db.execute("INSERT INTO documents_fts (documents_fts, rank) VALUES ('integrity-check', 1)")

"""The demo data set that ``labeler demo`` loads: a fictional help center, "Tallyhive".

``corpus.jsonl`` (the chunks), ``questions.jsonl`` (logged questions with the project's grades),
and what ``data/make_logs.py`` in a checkout derives from them: ``logs.jsonl`` (the questions with
the top 8 chunks of a TF-IDF retriever) and ``golden.jsonl`` (50 labeled questions). The files are
package data, so the wheel carries them; read them with ``importlib.resources``.
"""

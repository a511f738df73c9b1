"""``labeler items``: the Items page's list of every query with its annotators' statuses."""

from __future__ import annotations

import click

from .common import CONTEXT_SETTINGS, open_db
from .group import cli
from .output import Output, output_options

COLUMNS = ["query_id", "origin", "relevant", "conflict", "discarded", "adjudication_requested", "question",
           "statuses"]


@cli.command("items", context_settings=CONTEXT_SETTINGS)
@click.option("--status", type=click.Choice(["unlabeled", "in_progress", "submitted", "skipped", "flagged",
                                             "discarded"]),
              help="Items where an annotator (or --annotator) has this status; unlabeled = no one opened it.")
@click.option("--annotator", help="Items this annotator opened.")
@click.option("--origin", type=click.Choice(["log", "synthetic", "import"]), help="Only this origin.")
@click.option("--retriever", help="Items this retriever logged a ranking for.")
@click.option("--flagged", is_flag=True, help="Only items someone flagged (the reason is in the statuses).")
@click.option("--conflict", is_flag=True, help="Only items whose submitted grades conflict.")
@click.option("--search", "text", help="Text that appears in the question (case-insensitive).")
@click.option("--since", help="First seen at or after this time (ISO 8601).")
@click.option("--until", help="First seen before this time (ISO 8601).")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Items per page.")
@click.option("--page", type=click.IntRange(min=1), default=1, show_default=True, help="Which page.")
@output_options(nl=True)
@click.pass_context
def items_cmd(ctx: click.Context, status: str | None, annotator: str | None, origin: str | None,
              retriever: str | None, flagged: bool, conflict: bool, text: str | None, since: str | None,
              until: str | None, limit: int, page: int, output_format: str) -> Output:
    """Every item (query) with its annotators' statuses and when, the consolidated relevant count,
    conflict and judge agreement, a page at a time (query order); the same list as the app's Items
    page. With --json: {"total", "page", "pages", "items": [...]}.

    Example:

        labeler items --flagged --json
    """
    from ..labels import list_items

    found = list_items(open_db(ctx), status=status, annotator=annotator, origin=origin, retriever=retriever,
                       flagged=True if flagged else None, conflict=True if conflict else None, search=text,
                       since=since, until=until, page=page, page_size=limit)
    document = found.to_dict()
    return Output(document, COLUMNS, document["items"],
                  before=[f"{found.total} item(s); page {found.page} of {found.pages}"],
                  after=[f"{r.query_id}: flag by {a.annotator}: {a.reason}" for r in found.rows for a in r.annotators
                         if a.status == "flagged" and a.reason])

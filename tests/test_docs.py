"""The docs stay true: the generated pages (CLI reference, metrics table, home page) match what
docs/generate.py writes from the code, and the README's quickstart and links hold."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from labeler.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _generate():
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _generate()


@pytest.mark.parametrize("page", ["cli.md", "metrics.md", "index.md"])
def test_generated_page_is_up_to_date(page):
    path = DOCS / page
    expected = generate.expected()[path]
    assert path.read_text() == expected, (
        f"docs/{page} is stale (a command's help, a metric or the README changed): "
        f"regenerate it with `python docs/generate.py` and commit the result")


def test_cli_reference_is_what_each_command_prints_for_h():
    """The reference is the real `-h` output, byte for byte, for every command (groups too)."""
    import click

    page = (DOCS / "cli.md").read_text()
    root = click.Context(cli, info_name="labeler", **cli.context_settings)
    paths = [[]] + [ctx.command_path.split()[1:] for _, ctx in generate.commands(cli, root)]
    assert len(paths) > 40
    for path in paths:
        result = CliRunner().invoke(cli, [*path, "-h"], prog_name="labeler", terminal_width=generate.WIDTH)
        assert result.exit_code == 0, result.output
        heading = f"## `{' '.join(['labeler', *path])}`\n\n```text\n{result.output.rstrip()}\n```\n"
        assert heading in page, f"labeler {' '.join(path)} -h differs from docs/cli.md: run python docs/generate.py"


def test_metrics_table_has_one_row_per_registered_metric():
    from labeler.metrics import METRICS

    page = (DOCS / "metrics.md").read_text()
    table = page[page.index(generate.METRICS_BEGIN):page.index(generate.METRICS_END)]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) == len(METRICS)
    for name in METRICS:
        assert any(row.startswith((f"| `{name}`", f"| `{name}@k`")) for row in rows), name


def test_readme_quickstart_is_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert "```bash\npip install -e . && labeler demo\n```" in readme
    assert "```bash\npip install -e '.[test]' && python -m pytest\n```" in readme


def test_readme_links_and_pictures_exist():
    """mkdocs checks the links between pages; the README is not a page, so its links are checked here."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert any(t.endswith(".png") for t in local), "the README shows a picture of the Label page"
    for target in local:
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def test_every_page_is_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text()
    for page in DOCS.glob("*.md"):
        assert f": {page.name}" in config, f"docs/{page.name} is missing from mkdocs.yml's nav"

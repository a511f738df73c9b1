"""Which labeler is installed: the distribution is ``rag-labeler`` on PyPI (``labeler`` there is an
unrelated project); the import package and the command are ``labeler``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version

DISTRIBUTION = "rag-labeler"


def version() -> str:
    """The installed version of rag-labeler, or ``"0"`` when running from a checkout that was never
    installed (never the version of another project that happens to be called ``labeler``)."""
    try:
        return _installed_version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0"

"""Where the page's templates/ and static/ are: inside the installed package, or beside app/."""

from __future__ import annotations

from pathlib import Path
from typing import Final

_PACKAGE: Final = Path(__file__).resolve().parent


def _shipped(name: str) -> Path:
    """``name`` inside the package (an installed wheel), else at the repository root.

    A wheel carries templates/ and static/ as ``attnviz/templates`` and
    ``attnviz/static``; the repository (and its editable install) keeps them beside
    ``app/``.
    """
    inside = _PACKAGE / name
    return inside if inside.is_dir() else _PACKAGE.parent / name


TEMPLATES_DIR: Final = _shipped("templates")
"""The Jinja2 templates of the page (index.html, models.html)."""
STATIC_DIR: Final = _shipped("static")
"""The page's CSS and JavaScript, served under /static."""

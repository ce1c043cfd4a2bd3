"""The documentation: the settings where the docs say they are, and the README as a front page."""

import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from attnviz.server.settings import Settings

from tests import REPO_ROOT

README_PATH = REPO_ROOT / "README.md"
README = README_PATH.read_text()
# The settings table lives on the deployment page of the documentation site (docs/).
SETTINGS_PAGE = (REPO_ROOT / "docs" / "deploy.md").read_text()
ENV_EXAMPLE = (REPO_ROOT / ".env.example").read_text()

README_MAX_BYTES = 16_000
# Inline links and images, [text](target) and ![alt](target), with an optional "title".
MARKDOWN_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"  # [text], [alt] or [a [nested] text]
    r"\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)"  # (target "title")
)
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//|#)", re.IGNORECASE)


def without_fences(markdown: str) -> str:
    """``markdown`` without its fenced code blocks (where ``#`` is a comment, not a heading)."""
    return re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)


def without_code(markdown: str) -> str:
    """``markdown`` without fenced code blocks and code spans, where brackets are not links."""
    return re.sub(r"`[^`\n]*`", "", without_fences(markdown))


def relative_links(markdown: str) -> list[str]:
    """The targets of ``markdown``'s links that point into the repository (no URL, no anchor)."""
    targets = MARKDOWN_LINK.findall(without_code(markdown))
    return [target for target in targets if not EXTERNAL.match(target)]


def heading_anchors(markdown: str) -> set[str]:
    """The anchors of ``markdown``'s headings as GitHub (and MkDocs' toc) write them."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", without_fences(markdown), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def missing_targets(markdown: str, base: Path) -> list[str]:
    """The relative link targets of ``markdown`` (read from ``base``) that name no file, or
    name a Markdown file without the heading their anchor points at."""
    missing = []
    for target in relative_links(markdown):
        file, _, anchor = unquote(target).partition("#")
        path = (base / file).resolve()
        exists = path.is_relative_to(REPO_ROOT) and path.is_file()
        markdown_page = exists and path.suffix == ".md"
        if not exists or (
            anchor and markdown_page and anchor not in heading_anchors(path.read_text())
        ):
            missing.append(target)
    return missing


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_is_in_the_docs_settings_table_and_the_env_example(name: str) -> None:
    variable = f"ATTNVIZ_{name.upper()}"
    assert f"| `{variable}` |" in SETTINGS_PAGE
    assert variable in ENV_EXAMPLE


def test_the_readme_is_a_front_page_of_at_most_16000_bytes() -> None:
    size = len(README_PATH.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes, over {README_MAX_BYTES}"


def test_every_relative_link_of_the_readme_names_a_file_in_the_repository() -> None:
    links = relative_links(README)
    assert any(link.startswith("docs/") for link in links), "the README links no docs page"
    assert missing_targets(README, REPO_ROOT) == []


def test_the_link_check_finds_a_broken_link() -> None:
    page = (
        "[ok](docs/index.md#two-commands) ![picture](docs/screenshot.png) [web](https://x.org)\n"
        "[gone](docs/no-such-page.md) [outside](../README.md) `[code](not/a/link.md)`\n"
        "[anchor](docs/deploy.md#settings) [lost anchor](docs/deploy.md#no-such-heading)\n"
    )
    assert missing_targets(page, REPO_ROOT) == [
        "docs/no-such-page.md",
        "../README.md",
        "docs/deploy.md#no-such-heading",
    ]

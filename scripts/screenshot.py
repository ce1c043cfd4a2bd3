"""Regenerate docs/screenshot.png, docs/models.png and docs/notebook.png in Debian's Chromium.

docs/screenshot.png: the page with the default preset. docs/models.png: the
pretrained-model page (/models) with its default sentence (needs the pretrained extra).
docs/notebook.png: docs/attnviz.ipynb executed by an IPython kernel (nbclient) and
converted to HTML (nbconvert), its top as a reader sees it.

Usage: .venv/bin/python scripts/screenshot.py [OUTPUT_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

from attnviz.devtools import CHROMIUM_ARGS, chromium_path, live_server
from playwright.sync_api import sync_playwright

REPO_ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    directory = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT / "docs"
    directory.mkdir(parents=True, exist_ok=True)
    executable = chromium_path()
    if executable is None:
        sys.exit("chromium is not installed; run `make browser` first")
    with live_server() as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 620})
        page.goto(url + "/")
        page.wait_for_function("document.getElementById('heads').dataset.drawnHeads === '2'")
        page.wait_for_timeout(300)
        page.screenshot(path=str(directory / "screenshot.png"))
        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto(url + "/models")
        page.wait_for_selector("#view-model[data-drawn='true']", timeout=30_000)
        page.wait_for_timeout(300)
        page.screenshot(path=str(directory / "models.png"))
        page.goto(notebook_html(directory).as_uri())
        page.wait_for_function(
            "() => [...document.querySelectorAll('.attnviz-view')].every((v) => v.data)"
        )
        page.wait_for_timeout(300)
        page.screenshot(path=str(directory / "notebook.png"))
        browser.close()
    print(f"wrote {directory / 'screenshot.png'}, {directory / 'models.png'} and notebook.png")


def notebook_html(directory: Path) -> Path:
    """docs/attnviz.ipynb executed in a temporary folder and converted to HTML there."""
    import tempfile

    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    folder = Path(tempfile.mkdtemp())
    notebook = nbformat.read(REPO_ROOT / "docs" / "attnviz.ipynb", as_version=4)
    NotebookClient(notebook, timeout=600, resources={"metadata": {"path": folder}}).execute()
    html, _ = HTMLExporter().from_notebook_node(notebook)
    path = folder / "attnviz.html"
    path.write_text(html, encoding="utf-8")
    return path


if __name__ == "__main__":
    main()

"""Regenerate docs/screenshot.png and docs/models.png in Debian's Chromium.

docs/screenshot.png: the page with the default preset. docs/models.png: the
pretrained-model page (/models) with its default sentence (needs the pretrained extra).

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
        browser.close()
    print(f"wrote {directory / 'screenshot.png'} and {directory / 'models.png'}")


if __name__ == "__main__":
    main()

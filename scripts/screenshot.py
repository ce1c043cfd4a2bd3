"""Regenerate docs/screenshot.png: the page with the default preset, in Debian's Chromium.

Usage: .venv/bin/python scripts/screenshot.py [OUTPUT.png]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playwright.sync_api import sync_playwright

from tests.browser.support import CHROMIUM_ARGS, chromium_path
from tests.live_server import REPO_ROOT, live_server


def main() -> None:
    output = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT / "docs" / "screenshot.png"
    executable = chromium_path()
    if executable is None:
        sys.exit("chromium is not installed; run `make browser` first")
    with live_server() as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 620})
        page.goto(url + "/")
        page.wait_for_function("document.getElementById('heads').dataset.drawnHeads === '2'")
        page.wait_for_timeout(300)
        output.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(output))
        browser.close()
    print(f"wrote {output}")


if __name__ == "__main__":
    main()

"""Regenerate docs/screenshot.png, models.png, notebook.png, speech.png, vision.png, vlm.png.

docs/screenshot.png: the page with the default preset. docs/models.png: the
pretrained-model page (/models) with its default sentence (needs the pretrained extra).
docs/notebook.png: docs/attnviz.ipynb executed by an IPython kernel (nbclient) and
converted to HTML (nbconvert), its top as a reader sees it. docs/speech.png: /models with
Whisper tiny.en on the sample sentence. docs/vision.png: /models with the demo ViT
(scripts/demo_vit.py, trained here, about a minute) on its example picture. docs/vlm.png:
/models with a tiny random LLaVA 1.5 (tests/pretrained/tiny_vlm.py) on the sample picture:
the page's image input and the overlay (random weights: the look, not a finding).

Usage: .venv/bin/python scripts/screenshot.py [OUTPUT_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

from attnviz.devtools import CHROMIUM_ARGS, chromium_path, live_process, live_server
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
        page = browser.new_context(
            viewport={"width": 1280, "height": 620}, bypass_csp=True
        ).new_page()
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
    media_pictures(directory, executable)
    vision_language_picture(directory, executable)
    print(f"wrote screenshot, models, notebook, speech, vision and vlm .png in {directory}")


def media_pictures(directory: Path, executable: str) -> None:
    """docs/speech.png and docs/vision.png, from a server offering Whisper and the demo ViT."""
    import json
    import subprocess
    import tempfile

    folder = Path(tempfile.mkdtemp()) / "demo-vit"
    script = REPO_ROOT / "scripts" / "demo_vit.py"
    subprocess.run([sys.executable, str(script), str(folder)], check=True)
    env = {
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(folder)]),
        "ATTNVIZ_PACKAGED_MODELS": '["whisper-tiny.en"]',
    }
    with live_process(timeout_s=120, env=env) as (url, _), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        page = browser.new_context(
            viewport={"width": 1280, "height": 900}, bypass_csp=True
        ).new_page()
        page.goto(url + "/models")
        for name in ("whisper-tiny.en", "demo-vit"):
            page.wait_for_selector(
                f'#model option[value="{name}"][data-state="ready"]', state="attached"
            )
        page.select_option("#model", "whisper-tiny.en")
        page.click("#sample-audio")
        page.wait_for_selector(".speech-cross .main-svg", timeout=120_000)
        page.wait_for_timeout(500)
        page.screenshot(path=str(directory / "speech.png"))
        page.select_option("#model", "demo-vit")
        page.set_input_files("#image-file", str(folder / "shapes.png"))
        page.wait_for_selector(".overlay .main-svg", timeout=60_000)
        page.wait_for_timeout(500)
        page.screenshot(path=str(directory / "vision.png"))
        browser.close()


def vision_language_picture(directory: Path, executable: str) -> None:
    """docs/vlm.png: a tiny random LLaVA with the sample picture and 4 generated tokens."""
    import json
    import tempfile

    sys.path.insert(0, str(REPO_ROOT))
    from tests.pretrained.tiny_vlm import llava

    folder = llava(Path(tempfile.mkdtemp()) / "tiny-llava")
    env = {"ATTNVIZ_MODEL_DIRS": json.dumps([str(folder)]), "ATTNVIZ_PACKAGED_MODELS": "false"}
    drawn = "document.getElementById('image-attention').dataset.drawn === 'true'"
    with live_process(timeout_s=120, env=env) as (url, _), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        page = browser.new_context(
            viewport={"width": 1280, "height": 1000}, bypass_csp=True
        ).new_page()
        page.goto(url + "/models")
        page.wait_for_function(drawn, timeout=120_000)
        page.fill("#texts", "what is in this picture")
        page.fill("#max-new-tokens", "4")
        page.click("#compute")
        page.wait_for_function("window.attnvizImage.res.tokens[0].length > 30", timeout=120_000)
        page.wait_for_function(drawn, timeout=120_000)
        page.wait_for_timeout(500)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(directory / "vlm.png"))
        browser.close()


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

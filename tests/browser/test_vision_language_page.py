"""/models with a vision-language model: an image with the prompt, generation, and one
token's attention drawn on the picture, equal to the API's maps.

Tiny random LLaVA and Qwen2-VL folders (:mod:`tests.pretrained.tiny_vlm`) served as a
user's ``ATTNVIZ_MODEL_DIRS``, in Debian's Chromium.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import numpy as np
import pytest
from attnviz.devtools import live_process

from tests.browser.test_media_page import open_model
from tests.pretrained import tiny_vlm
from tests.pretrained.support import require_transformers
from tests.support.browser import HANG_MS, evaluate_json

OVERLAY = "document.querySelector('#image-attention .image-overlay')"


@pytest.fixture(scope="module")
def vlm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_transformers()
    root = tmp_path_factory.mktemp("vlm-page")
    folders = [
        tiny_vlm.llava(root / "tiny-llava"),
        tiny_vlm.qwen_vl(root / "tiny-qwen2_vl"),
        tiny_vlm.idefics3(root / "tiny-idefics3"),
    ]
    env = {
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(f) for f in folders]),
        "ATTNVIZ_PACKAGED_MODELS": "false",
        "ATTNVIZ_ACCESS_LOG": "false",
    }
    with live_process(timeout_s=300, env=env) as (url, _):
        yield url


@pytest.fixture
def picture(tmp_path: Path) -> Path:
    path = tmp_path / "coordinates.png"
    tiny_vlm.coordinate_image(47, 61).save(path)
    return path


def compute_with(page, url: str, name: str, picture: Path, new_tokens: int) -> None:  # type: ignore[no-untyped-def]
    """/models with ``name``, ``picture`` uploaded in place of the sample (shown first),
    the question typed and computed with ``new_tokens`` generated; once the upload's
    overlay is drawn (choosing the model drew the sample's first)."""
    open_model(page, url, name)
    assert page.is_visible("#prompt-image-control")
    page.wait_for_function(
        "document.getElementById('prompt-image-preview').src.startsWith('data:')"
    )
    page.set_input_files("#prompt-image", str(picture))
    page.wait_for_function(
        "document.getElementById('prompt-image-status').textContent.startsWith('coordinates.png')"
    )
    page.fill("#texts", "what is in this picture")
    page.fill("#max-new-tokens", str(new_tokens))
    page.click("#compute")
    page.wait_for_function(
        "window.attnvizImage.res && window.attnvizImage.res.images[0].width === 47",
        timeout=HANG_MS,
    )


def drawn_overlay(page, query: int | None = None) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """The overlay once drawn (of ``query`` when given): its heatmap and what it is of."""
    wait = "document.getElementById('image-attention').dataset.drawn === 'true'"
    if query is not None:
        wait += f" && window.attnvizImage.query === {query}"
    page.wait_for_function(wait, timeout=HANG_MS)
    return evaluate_json(
        page,
        f"""() => {{
            const trace = {OVERLAY}.data.find((d) => d.type === 'heatmap');
            const image = {OVERLAY}.layout.images[0];
            return {{
                z: trace.z, x: trace.x, y: trace.y, query: window.attnvizImage.query,
                opacity: trace.opacity,
                image: [image.x, image.y, image.sizex, image.sizey],
                res: window.attnvizImage.res,
            }};
        }}""",
    )


def api_rows(url: str, body: dict, query: int) -> np.ndarray:  # type: ignore[type-arg]
    """(N, H, L_k) the API's rows of ``query`` for the page's request."""
    request = {**body, "sequence_index": 0, "query_index": query, "display_size": 8}
    response = httpx.post(url + "/api/v1/models/attention", json=request, timeout=120)
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["query_attentions"])


@pytest.mark.parametrize("name", ["tiny-llava", "tiny-qwen2_vl"])
def test_an_uploaded_image_is_drawn_under_the_attention_of_a_chosen_token(
    page, vlm_url: str, picture: Path, name: str
) -> None:  # type: ignore[no-untyped-def]
    compute_with(page, vlm_url, name, picture, 3)
    shown = drawn_overlay(page)
    res = shown["res"]
    (placed,) = res["images"]
    assert (placed["width"], placed["height"]) == (47, 61)
    assert shown["image"] == [0, 0, 47, 61]  # the picture in its own pixels
    prompt_length = res["generation"]["prompt_length"]
    assert shown["query"] == prompt_length - 1  # the prompt's last token first
    assert len(res["tokens"][0]) == prompt_length + 3
    # The page's request, as sent, and the API's answer to it: the overlay is its rows
    # over the image tokens, mean of layers and heads, on the tokens' grid.
    image = base64.b64encode(picture.read_bytes()).decode()
    body = {
        "model": name, "texts": ["what is in this picture"], "device": "auto", "chat": False,
        "max_new_tokens": 3, "temperature": 0, "seed": 0, "images": [image],
    }  # fmt: skip
    rows = api_rows(vlm_url, body, shown["query"])
    rows_page = np.asarray(res["query_attentions"])
    np.testing.assert_allclose(rows_page, rows, atol=1e-7)
    (grid,) = placed["grids"]
    grid_rows, cols = grid["rows"], grid["cols"]
    at = np.asarray(placed["positions"])[grid["tokens"]].reshape(grid_rows, cols)
    np.testing.assert_allclose(shown["z"], rows.mean(axis=(0, 1))[at], rtol=1e-6, atol=1e-9)
    rects = np.asarray(placed["rectangles"])[grid["tokens"]].reshape(grid_rows, cols, 4)
    np.testing.assert_allclose(shown["x"], [*rects[0, :, 0], rects[0, -1, 2]], atol=1e-4)
    np.testing.assert_allclose(shown["y"], [*rects[:, 0, 1], rects[-1, 0, 3]], atol=1e-4)
    # One layer and head, another token, the opacity.
    page.select_option("#image-layer", "1")
    page.select_option("#image-head", "0")
    page.select_option("#image-query", str(prompt_length + 1))  # the second generated token
    shown = drawn_overlay(page, prompt_length + 1)
    rows = api_rows(vlm_url, body, prompt_length + 1)
    np.testing.assert_allclose(shown["z"], rows[1, 0][at], rtol=1e-6, atol=1e-9)
    page.fill("#image-opacity", "0.3")
    page.dispatch_event("#image-opacity", "input")
    page.wait_for_function(f"{OVERLAY}.data[0].opacity === 0.3")
    # Play steps through the answer's tokens to its last.
    page.click("#image-play")
    page.wait_for_function(
        f"window.attnvizImage.query === {prompt_length + 2} && !window.attnvizImage.timer",
        timeout=HANG_MS,
    )
    assert page.errors == [] and page.inner_text("#error") == ""


def test_an_image_cut_into_tiles_is_drawn_as_its_tiles_and_its_global_view(
    page, vlm_url: str, picture: Path
) -> None:  # type: ignore[no-untyped-def]
    """Idefics3 reads the picture as 2 x 2 tiles and a global view: one figure each, each
    cell the API's weight on that view's token."""
    compute_with(page, vlm_url, "tiny-idefics3", picture, 0)
    page.wait_for_function("document.getElementById('image-attention').dataset.drawn === 'true'")
    res = page.evaluate("window.attnvizImage.res")
    (placed,) = res["images"]
    assert [g["name"] for g in placed["grids"]] == ["tiles", "global"]
    figures = page.evaluate(
        """() => [...document.querySelectorAll('#image-attention .image-overlay')].map(
            (div) => div.data.find((d) => d.type === 'heatmap').z)"""
    )
    assert len(figures) == 2
    image = base64.b64encode(picture.read_bytes()).decode()
    body = {"model": "tiny-idefics3", "texts": ["what is in this picture"], "images": [image]}
    rows = api_rows(vlm_url, body, page.evaluate("window.attnvizImage.query")).mean(axis=(0, 1))
    for z, grid in zip(figures, placed["grids"], strict=True):
        at = np.asarray(placed["positions"])[grid["tokens"]].reshape(grid["rows"], grid["cols"])
        np.testing.assert_allclose(z, rows[at], rtol=1e-6, atol=1e-9)
    assert page.errors == [] and page.inner_text("#error") == ""

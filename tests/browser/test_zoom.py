"""The enlarged head's zoom on /models, in a real Chromium against a real server (issue 52).

A tiny Llama of 2,048 positions served from a folder (one token per word); an input of
1,100 tokens draws its enlarged head pooled (1,024 per side at most), and under it the zoom:
level 0 is the whole map, + (and the wheel) zooms in to one token a cell, where the axes are
the tokens; the arrow keys move a tile over. Every tile drawn equals the API's tile of the
same kept pass (POST /api/v1/models/attention/tiles), which the API tests check against
eager attention; and the page never holds the L x L map.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import numpy as np
import pytest
from attnviz.devtools import live_process

from tests.pretrained import tiny
from tests.pretrained.support import require_transformers
from tests.support.api import decode, wait_model_ready
from tests.support.browser import evaluate_json, wait_model_option

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MODEL = "zoom-llama"
LENGTH = 1100
WAIT_MS = 120_000


@pytest.fixture(scope="module")
def zoom_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_transformers()
    folder: Path = tiny.save_tiny(
        "llama", tmp_path_factory.mktemp("zoom") / MODEL, max_position_embeddings=2048
    )
    env = {"ATTNVIZ_MODEL_DIRS": json.dumps([str(folder)]), "ATTNVIZ_PACKAGED_MODELS": "false"}
    with live_process(env=env, timeout_s=300) as (url, _):
        wait_model_ready(url, MODEL)
        yield url


def text() -> str:
    return " ".join(tiny.WORDS[(i * 7) % len(tiny.WORDS)] for i in range(LENGTH))


def drawn_tile(page) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Wait for the zoom's tile; its z, x, y and factor."""
    page.wait_for_selector("#view-model .zoom[data-drawn=true]", timeout=WAIT_MS)
    found = page.evaluate(
        "(() => { const d = document.querySelector('#view-model .zoom').dataset;"
        " return {z: +d.z, x: +d.x, y: +d.y, factor: +d.factor}; })()"
    )
    return found  # type: ignore[no-any-return]


def api_tile(url: str, pass_key: str, head: tuple[int, int], at: dict[str, int]) -> np.ndarray:
    body = {
        "pass_key": pass_key, "layer_index": head[0], "head_index": head[1],
        "z": at["z"], "x": at["x"], "y": at["y"], "encoding": "base64_float32",
    }  # fmt: skip
    answer = httpx.post(f"{url}/api/v1/models/attention/tiles", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    return decode(answer.json()["weights"], "f4")


def step(page, press) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Press something that moves the zoom; the new tile once drawn."""
    page.evaluate("document.querySelector('#view-model .zoom').dataset.drawn = 'stale'")
    press()
    return drawn_tile(page)


def test_the_enlarged_head_zooms_to_single_tokens_with_the_api_s_exact_tiles(  # type: ignore[no-untyped-def]
    page, zoom_server
) -> None:
    page.goto(zoom_server + "/models")
    wait_model_option(page, MODEL, WAIT_MS)
    page.select_option("#model", MODEL)
    page.fill("#max-new-tokens", "0")
    # One colour scale for every map: the plots then hold the weights themselves (with
    # "auto", a long input's maps are drawn scaled to each row's maximum).
    page.select_option("#colour-scale", "shared")
    page.fill("#texts", text())
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.click("#compute")
    page.wait_for_function(
        "document.getElementById('view-model').dataset.drawn === 'true'", timeout=WAIT_MS
    )
    pass_key = page.evaluate("window.attnvizModels.lastResponse.pass_key")
    assert isinstance(pass_key, str) and len(pass_key) == 32
    enlarged = page.locator("#view-model .enlarged")
    head = (int(enlarged.get_attribute("data-layer")), int(enlarged.get_attribute("data-head")))
    at = drawn_tile(page)
    assert (at["z"], at["factor"]) == (0, 8)  # 1,100 tokens: 256 cells of 8 tokens each
    tile = page.locator("#view-model .zoom-tile")
    z = np.array(evaluate_json(tile, "d => d.data[0].z"), dtype=np.float32)
    np.testing.assert_allclose(z, api_tile(zoom_server, pass_key, head, at), atol=1e-6)
    zoom = page.locator("#view-model .zoom")
    for level in (1, 2, 3):
        at = step(page, lambda: zoom.locator("button[aria-label='Zoom in']").click())
        assert (at["z"], at["factor"]) == (level, 2 ** (3 - level))
    z = np.array(evaluate_json(tile, "d => d.data[0].z"), dtype=np.float32)
    assert z.shape == (256, 256)
    np.testing.assert_allclose(z, api_tile(zoom_server, pass_key, head, at), atol=1e-6)
    # one token a cell: the axes are the tokens of the tile's rows and columns
    labels = tile.evaluate("d => d.data[0].customdata.slice(0, 3)")
    first_row = at["y"] * 256
    words = [tiny.WORDS[(i * 7) % len(tiny.WORDS)] for i in range(LENGTH)]
    assert all(words[first_row + k] in str(labels[k]) for k in range(3)), labels
    assert "one token a cell" in zoom.locator(".zoom-note").text_content()
    zoom.focus()
    moved = step(page, lambda: page.keyboard.press("ArrowLeft" if at["x"] else "ArrowRight"))
    assert moved["z"] == 3 and abs(moved["x"] - at["x"]) == 1 and moved["y"] == at["y"]
    z = np.array(evaluate_json(tile, "d => d.data[0].z"), dtype=np.float32)
    np.testing.assert_allclose(z, api_tile(zoom_server, pass_key, head, moved), atol=1e-6)
    out = step(page, lambda: page.keyboard.press("-"))
    assert (out["z"], out["factor"]) == (2, 2)
    page.screenshot(path=str(Path("/tmp") / "attnviz-zoom.png"), full_page=False)
    assert page.errors == []


LONG_MODEL = "zoom-llama-32k"
LONG_LENGTH = 32_768
LONG_WAIT_MS = 600_000


@pytest.fixture(scope="module")
def long_zoom_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    require_transformers()
    folder: Path = tiny.save_tiny(
        "llama",
        tmp_path_factory.mktemp("zoom-32k") / LONG_MODEL,
        max_position_embeddings=LONG_LENGTH,
    )
    env = {
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(folder)]),
        "ATTNVIZ_PACKAGED_MODELS": "false",
        "ATTNVIZ_COMPUTE_TIMEOUT_S": "300",  # the wait for a layer, on a busy machine
    }
    with live_process(env=env, timeout_s=300) as (url, _):
        wait_model_ready(url, LONG_MODEL)
        yield url, folder


def long_words() -> list[str]:
    return [tiny.WORDS[(i * 7) % len(tiny.WORDS)] for i in range(LONG_LENGTH)]


def test_a_32768_token_input_is_drawn_and_zoomed_to_single_tokens_on_the_cpu(  # type: ignore[no-untyped-def]
    page, long_zoom_server
) -> None:
    """A random Llama admitting 32,768 positions, from a folder: the page draws the grid of
    a 32,768-token input, the enlarged head zooms from 128 tokens a cell to one, and the
    last tile drawn is the API's, whose rows equal the model's own eager attention for
    those rows (its eager_attention_forward, one query row at a time). The page holds
    neither L x L numbers nor a DOM node per token."""
    from attnviz.pretrained.loading import load_model_dir

    url, folder = long_zoom_server
    page.goto(url + "/models")
    wait_model_option(page, LONG_MODEL, WAIT_MS)
    page.select_option("#model", LONG_MODEL)
    page.fill("#max-new-tokens", "0")
    page.select_option("#colour-scale", "shared")
    page.fill("#texts", " ".join(long_words()))
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.click("#compute")
    page.wait_for_function(
        "document.getElementById('view-model').dataset.drawn === 'true' || "
        "!document.getElementById('error').hidden",
        timeout=LONG_WAIT_MS,
    )
    assert page.locator("#error").is_hidden(), page.locator("#error").text_content()
    pass_key = page.evaluate("window.attnvizModels.lastResponse.pass_key")
    assert isinstance(pass_key, str) and len(pass_key) == 32
    enlarged = page.locator("#view-model .enlarged")
    head = (int(enlarged.get_attribute("data-layer")), int(enlarged.get_attribute("data-head")))
    at = drawn_tile(page)
    assert (at["z"], at["factor"]) == (0, 128)  # 32,768 tokens: 256 cells of 128 each
    zoom = page.locator("#view-model .zoom")
    for level in range(1, 8):
        at = step(page, lambda: zoom.locator("button[aria-label='Zoom in']").click())
        assert (at["z"], at["factor"]) == (level, 2 ** (7 - level))
    tile = page.locator("#view-model .zoom-tile")
    z = np.array(evaluate_json(tile, "d => d.data[0].z"), dtype=np.float32)
    assert z.shape == (256, 256)
    exact = api_tile(url, pass_key, head, at)
    np.testing.assert_allclose(z, exact, atol=1e-6)
    labels = tile.evaluate("d => d.data[0].customdata.slice(0, 3)")
    first_row, first_col = at["y"] * 256, at["x"] * 256
    words = long_words()
    assert all(words[first_row + k] in str(labels[k]) for k in range(3)), labels
    # The page: no L x L numbers, no node per token (the tokens of 32,768 would be more):
    # the token strip shows a page of 1,024 at a time, and moves to later ones.
    nodes = page.evaluate("document.getElementsByTagName('*').length")
    busiest = page.evaluate(
        "(() => { const c = {}; for (const e of document.getElementsByTagName('*')) {"
        " const p = e.parentElement; const k = (p && (p.id || p.className)) + ' > ' + e.tagName;"
        " c[k] = (c[k] || 0) + 1; } return Object.entries(c).sort((a, b) => b[1] - a[1])"
        ".slice(0, 3); })()"
    )
    assert nodes < LONG_LENGTH // 4, (nodes, busiest)
    chips = page.locator("#query-strip .token")
    assert chips.count() == 1024
    page.click("#query-strip button[aria-label='Later tokens']")
    assert chips.first.get_attribute("data-position") == "1024"
    assert "tokens 1024–2047 of 32,768" in page.locator("#query-strip .strip-range").inner_text()
    page.fill("#query-strip input[type=number]", "30000")
    page.press("#query-strip input[type=number]", "Enter")
    assert chips.first.get_attribute("data-position") == "29696"
    chips.nth(304).click()  # token 30,000: selected, its page kept
    page.wait_for_function("document.getElementById('query-strip').dataset.selected === '30000'")
    assert chips.first.get_attribute("data-position") == "29696"
    page.locator("#token-box").screenshot(path=str(Path("/tmp") / "attnviz-32k-strip.png"))
    assert page.errors == []
    # The reference: the model's own eager attention for rows of this tile, each computed
    # alone from a recorded pass of the same input (one query row x every key).
    model = load_model_dir(LONG_MODEL, folder)
    batch = model.tokenize([" ".join(words)])
    assert batch.input_ids.shape == (1, LONG_LENGTH)
    recorded = model.run(batch, device="cpu")
    calls = recorded.recording
    group = calls.calls[head[0]].group_size
    for row in (0, 131, 255):
        weights = calls.group_weights(head[0], head[1] // group, query=first_row + row)
        want = weights[0, head[1] % group, 0, first_col : first_col + 256].numpy()
        np.testing.assert_allclose(exact[row], want, atol=1e-5)

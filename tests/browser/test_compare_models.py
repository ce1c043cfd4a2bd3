"""/models' Compare tab with one input through two models that share a tokenizer.

Two tiny BERTs (tests/pretrained/tiny.py: the same word-level tokenizer, random weights
from different seeds) are served from local directories; the page's maps A and B are
checked against the API's own answers for each model, and A − B against their difference.
"""

import json
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import numpy as np
import pytest
from attnviz.devtools import live_process

from tests.pretrained.tiny import save_tiny
from tests.support.api import wait_model_ready
from tests.support.browser import HANG_MS, evaluate_json

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

TEXT = "the cat sat on the mat because it was tired"
PLOTS = "#view-compare .head-plot"


@pytest.fixture(scope="module")
def two_berts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server offering tiny-bert-a, tiny-bert-b (same tokenizer) and tiny-gpt2."""
    root: Path = tmp_path_factory.mktemp("compare")
    folders = [
        save_tiny("bert", root / "tiny-bert-a", seed=0),
        save_tiny("bert", root / "tiny-bert-b", seed=1),
        save_tiny("gpt2", root / "tiny-gpt2"),
    ]
    env = {
        "ATTNVIZ_PACKAGED_MODELS": "false",
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(f) for f in folders]),
    }
    with live_process(env=env, timeout_s=300) as (url, _):
        for folder in folders:  # loaded in the background: the page offers the ready ones
            wait_model_ready(url, folder.name)
        yield url


def api_maps(url: str, model: str, layer: int) -> dict[str, list[list[float]]]:
    """The API's layer ``layer`` of ``model`` for TEXT: its head mean and head 1."""
    body = {"model": model, "texts": [TEXT], "sequence_index": 0, "layer_index": layer}
    data = httpx.post(url + "/api/v1/models/attention", json=body, timeout=60).json()
    return {"mean": data["head_mean"][0][0], "head": data["attentions"][0][0][1]}


def drawn(page) -> list[list[list[float]]]:  # type: ignore[no-untyped-def]
    return evaluate_json(  # type: ignore[no-any-return]
        page, f"() => [...document.querySelectorAll('{PLOTS}')].map((d) => d.data[0].z)"
    )


def redraw(page, action) -> None:  # type: ignore[no-untyped-def]
    page.evaluate("document.getElementById('view-compare').dataset.drawn = 'stale'")
    action()
    page.wait_for_function(
        "document.getElementById('view-compare').dataset.drawn === 'true'", timeout=HANG_MS
    )


def test_one_input_through_two_models_and_their_difference(page, two_berts: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(two_berts + "/models")
    page.wait_for_selector("#view-model[data-drawn='true']", timeout=HANG_MS)
    page.select_option("#model", "tiny-bert-a")
    page.fill("#texts", TEXT)
    page.click("#compute")
    page.wait_for_selector("#view-model[data-drawn='true']", timeout=HANG_MS)
    redraw(page, lambda: page.click(".tabs button[data-view=compare]"))
    # Only the other encoder is offered: the decoder's requests take other fields.
    offered = page.eval_on_selector_all("#compare-model option", "o => o.map((x) => x.value)")
    assert offered == ["", "tiny-bert-b"]
    redraw(page, lambda: page.select_option("#layer-index", "1"))
    redraw(page, lambda: page.select_option("#compare-model", "tiny-bert-b"))
    assert page.locator("#compare-sentence").is_disabled()
    a, b = api_maps(two_berts, "tiny-bert-a", 1), api_maps(two_berts, "tiny-bert-b", 1)
    maps = drawn(page)
    assert len(maps) == 3
    # The JSON answer gives float32 values in their shortest form; the page decodes them
    # exactly: equal to float32's precision.
    np.testing.assert_allclose(maps[0], a["mean"], rtol=1e-6)
    np.testing.assert_allclose(maps[1], b["mean"], rtol=1e-6)
    # The seeds differ, so the difference map is not all zeros: it can fail.
    difference = np.array(a["mean"]) - np.array(b["mean"])
    assert np.abs(difference).max() > 1e-4
    np.testing.assert_allclose(maps[2], np.array(maps[0]) - np.array(maps[1]), atol=1e-12)
    np.testing.assert_allclose(maps[2], difference, atol=1e-6)
    titles = page.locator("#view-compare .gtitle").all_text_contents()
    assert titles[0].startswith("A: tiny-bert-a, layer 1") and titles[1].startswith(
        "B: tiny-bert-b, layer 1"
    )

    # One head of each.
    redraw(page, lambda: page.select_option("#compare-head", "1"))
    maps = drawn(page)
    np.testing.assert_allclose(maps[0], a["head"], rtol=1e-6)
    np.testing.assert_allclose(maps[1], b["head"], rtol=1e-6)

    # Back to this model: two sentences of it again, the sentence picker enabled.
    redraw(page, lambda: page.select_option("#compare-model", ""))
    assert page.locator("#compare-sentence").is_enabled()
    assert page.errors == []

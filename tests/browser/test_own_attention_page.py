"""/models with a family whose attention bypasses transformers' attention interface.

A tiny GPT-Neo (local and global layers) is drawn from its own eager output_attentions: the
page says that the fused path is not available for this family, and the model view's
maps equal the API's (which tests/pretrained/test_own_attention.py checks against
transformers' own output_attentions).
"""

import json
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import numpy as np
import pytest
from attnviz.devtools import live_process

from tests.pretrained.tiny import save_tiny
from tests.support.browser import HANG_MS

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

TEXT = "the cat sat on the mat because it was tired"


@pytest.fixture(scope="module")
def neo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("own-attention-page")
    folders = [save_tiny("gpt_neo", root / "tiny-gpt-neo"), save_tiny("gpt2", root / "tiny-gpt2")]
    env = {
        "ATTNVIZ_PACKAGED_MODELS": "false",
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(f) for f in folders]),
    }
    with live_process(env=env, timeout_s=300) as (url, _):
        yield url


def test_the_page_says_the_fused_path_is_not_available_and_draws_the_maps(page, neo: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(neo + "/models?model=tiny-gpt-neo")
    page.wait_for_selector("#view-model[data-drawn='true']", timeout=HANG_MS)
    note = page.locator("#path-note")
    assert note.is_visible()
    assert "fused path is not available for this family" in note.inner_text()
    assert "output_attentions" in page.locator("#summary").inner_text()
    page.fill("#texts", TEXT)
    page.click("#compute")
    page.wait_for_function(
        "() => document.getElementById('summary').textContent.includes('output_attentions')"
        " && document.getElementById('view-model').dataset.drawn === 'true'",
        timeout=HANG_MS,
    )
    page.screenshot(path="/tmp/shots/own-attention.png", full_page=False)
    body = {"model": "tiny-gpt-neo", "texts": [TEXT], "sequence_index": 0, "layer_index": 1}
    data = httpx.post(neo + "/api/v1/models/attention", json=body, timeout=60).json()
    page.click(".tabs button[data-view=layer]")
    page.wait_for_selector("#view-layer[data-drawn='true']", timeout=HANG_MS)
    # switching to the fused model hides the note
    page.select_option("#model", "tiny-gpt2")
    page.wait_for_function("() => document.getElementById('path-note').hidden", timeout=HANG_MS)
    assert data["attention_path"] == "output_attentions"
    assert np.asarray(data["attentions"]).shape[-1] == len(data["tokens"][0])

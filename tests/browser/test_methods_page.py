"""/models' Method picker in a real Chromium: every view draws the API's norm-based maps."""

import httpx2 as httpx
import numpy as np
import pytest

from tests.support.browser import GRID, HANG_MS, evaluate_json

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]


def redraw(page, view: str, action) -> None:  # type: ignore[no-untyped-def]
    page.evaluate(f"document.getElementById('view-{view}').dataset.drawn = 'stale'")
    action()
    page.wait_for_function(
        f"document.getElementById('view-{view}').dataset.drawn === 'true'", timeout=HANG_MS
    )


def api(server_url: str, text: str, **fields: object) -> dict:  # type: ignore[type-arg]
    body = {"texts": [text], "sequence_index": 0, **fields}
    response = httpx.post(server_url + "/api/v1/models/attention", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_the_method_picker_switches_every_view_to_norm_based_attention(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    page.wait_for_function(
        "document.getElementById('view-model').dataset.drawn === 'true'", timeout=HANG_MS
    )
    text = page.input_value("#texts").splitlines()[0]
    assert page.locator("#method-note").is_hidden()
    redraw(page, "model", lambda: page.select_option("#method", "norm"))
    norm = api(server_url, text, method="norm")
    # The model view's grid: tile (2, 3) is the API's norm map of layer 2, head 3.
    tile = page.evaluate(f"() => {GRID}.cell(2, 3)")
    np.testing.assert_allclose(tile, norm["attentions"][2][0][3], rtol=1e-6)
    title = page.evaluate(f"() => {GRID}.data[0].colorbar.title.text")
    assert "‖α f(x)‖" in title
    note = page.locator("#method-note")
    assert note.is_visible() and "Kobayashi" in note.text_content()
    assert page.locator("#hide-special").is_disabled()
    assert page.locator("#merge-words").is_disabled()
    assert "method=norm" in page.url

    redraw(page, "layer", lambda: page.click(".tabs button[data-view=layer]"))
    heads = page.evaluate("() => document.getElementById('layer-grid').data.map((t) => t.z)")
    np.testing.assert_allclose(heads, norm["attentions"][0][0], rtol=1e-6)
    # Not the weights: the weights' rows sum to 1, these do not.
    assert abs(sum(heads[0][1]) - 1) > 1e-3

    redraw(page, "averages", lambda: page.click(".tabs button[data-view=averages]"))
    assert page.locator("#view-averages [data-map=rollout]").count() == 0
    assert "switch Method back" in page.locator("#view-averages").text_content()
    mean = page.evaluate(
        "() => document.querySelector('#view-averages [data-map=head-mean]').data[0].z"
    )
    np.testing.assert_allclose(mean, norm["head_mean"][0][0], rtol=1e-6)

    # The neuron view stays the weights' step (the API's neuron is of the weights).
    redraw(page, "neuron", lambda: page.click(".tabs button[data-view=neuron]"))
    assert page.locator("#error").is_hidden()

    # Back to the weights.
    redraw(page, "averages", lambda: page.click(".tabs button[data-view=averages]"))
    redraw(page, "averages", lambda: page.select_option("#method", "attention"))
    weights = api(server_url, text)
    mean = page.evaluate(
        "() => document.querySelector('#view-averages [data-map=head-mean]').data[0].z"
    )
    np.testing.assert_allclose(mean, weights["head_mean"][0][0], rtol=1e-6)
    assert page.locator("#view-averages [data-map=rollout]").count() == 1
    assert page.locator("#hide-special").is_enabled()
    assert "method=" not in page.url

    # Attention flow: the weights stay, and the Averages view adds the flow map.
    redraw(page, "averages", lambda: page.select_option("#method", "flow"))
    flow = api(server_url, text, method="flow")
    drawn = page.evaluate(
        "() => document.querySelector('#view-averages [data-map=flow]').data[0].z"
    )
    np.testing.assert_allclose(drawn, flow["method_map"][0], rtol=1e-6)
    np.testing.assert_allclose([sum(row) for row in drawn], 1.0, rtol=1e-5)
    assert page.locator("#view-averages [data-map=rollout]").count() == 1
    assert "Abnar" in page.locator("#method-note").text_content()

    # Over flow's bound (35 tokens through MiniLM's 6 layers): the flow of the last 35
    # tokens, said in its title and a note; the other maps stay the whole input's.
    long_text = " ".join(["the cat sat on the mat"] * 8)  # 50 tokens with [CLS] and [SEP]
    page.fill("#texts", long_text)
    redraw(page, "averages", lambda: page.click("#compute"))
    flow = api(server_url, long_text, method="flow")
    start, stop = flow["method_window"]
    assert (start, stop) == (50 - 35, 50)
    div = page.locator("#view-averages [data-map=flow]")
    assert div.get_attribute("data-first") == str(start)
    drawn = page.evaluate(
        "() => document.querySelector('#view-averages [data-map=flow]').data[0].z"
    )
    np.testing.assert_allclose(drawn, flow["method_map"][0], rtol=1e-6)
    assert f"tokens {start}–{stop - 1}: the last 35" in div.locator(".gtitle").text_content()
    assert (
        "runs on the last 35 of the 50 tokens" in page.locator(".method-window-note").text_content()
    )
    assert page.locator("#error").is_hidden()
    assert (
        len(
            page.evaluate(
                "() => document.querySelector('#view-averages [data-map=head-mean]').data[0].z"
            )
        )
        == 50
    )
    assert page.errors == []


def test_heads_switched_off_show_the_ablated_model_and_restore_with_one_click(
    page, server_url
) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    page.wait_for_function(
        "document.getElementById('view-model').dataset.drawn === 'true'", timeout=HANG_MS
    )
    text = page.input_value("#texts").splitlines()[0]
    intact = api(server_url, text)
    page.fill("#ablate", "0.3, L2.H5")
    redraw(page, "model", lambda: page.dispatch_event("#ablate", "change"))
    ablated = api(server_url, text, ablate=[[0, 3], [2, 5]])
    # Layer 4's maps are the ablated model's, not the intact one's.
    tile = page.evaluate(f"() => {GRID}.cell(4, 0)")
    np.testing.assert_allclose(tile, ablated["attentions"][4][0][0], rtol=1e-6)
    assert np.abs(np.array(tile) - np.array(intact["attentions"][4][0][0])).max() > 1e-4
    note = page.locator("#ablation-note")
    assert note.is_visible()
    assert "Heads off: L0.H3, L2.H5" in note.text_content()
    assert "last hidden state moves" in note.text_content()
    assert "ablate=0.3,2.5" in page.url
    assert page.locator("#hide-special").is_disabled()

    redraw(page, "model", lambda: page.click("#restore-heads"))
    tile = page.evaluate(f"() => {GRID}.cell(4, 0)")
    np.testing.assert_allclose(tile, intact["attentions"][4][0][0], rtol=1e-6)
    assert note.is_hidden() and page.locator("#restore-heads").is_hidden()
    assert page.input_value("#ablate") == ""
    assert "ablate=" not in page.url
    assert page.locator("#hide-special").is_enabled()
    assert page.errors == []


def test_gradient_methods_draw_the_apis_rollout_and_head_importance(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    page.wait_for_function(
        "document.getElementById('view-model').dataset.drawn === 'true'", timeout=HANG_MS
    )
    text = page.input_value("#texts").splitlines()[0]
    assert page.locator("#target-control").is_hidden()

    # Head importance: the layers x heads grid under the model view's thumbnails.
    redraw(page, "model", lambda: page.select_option("#method", "head_importance"))
    assert page.locator("#target-control").is_visible()
    important = api(server_url, text, method="head_importance")
    plot = "document.querySelector('#view-model [data-map=head-importance]')"
    grid = evaluate_json(page, f"() => {plot}.data[0].z")
    np.testing.assert_allclose(grid, important["head_importance"], rtol=1e-6)
    assert np.array(grid).shape == (important["num_layers"], important["num_heads"])
    hint = page.locator("#view-model .importance").text_content()
    assert "Target: the output at “[CLS]” (0)" in hint
    assert "Michel" in page.locator("#method-note").text_content()
    # The thumbnails stay the weights.
    weights = api(server_url, text)
    np.testing.assert_allclose(
        page.evaluate(f"() => {GRID}.cell(1, 2)"), weights["attentions"][1][0][2], rtol=1e-6
    )
    # A click on a cell enlarges that head.
    cells = page.locator("#view-model [data-map=head-importance] .nsewdrag").first
    cells.scroll_into_view_if_needed()
    box = cells.bounding_box()
    layers, heads = np.array(grid).shape
    page.mouse.click(
        box["x"] + box["width"] * (4 + 0.5) / heads, box["y"] + box["height"] * (2 + 0.5) / layers
    )
    page.wait_for_function(
        "document.querySelector('#view-model .enlarged').dataset.head === '4'", timeout=HANG_MS
    )
    # Layer 0 is the top row, as in the thumbnails above.
    assert page.evaluate("document.querySelector('#view-model .enlarged').dataset.layer") == "2"

    # Another target: the fourth token's output.
    redraw(page, "model", lambda: page.select_option("#target-index", "3"))
    moved = api(server_url, text, method="head_importance", target_index=3)
    np.testing.assert_allclose(
        evaluate_json(page, f"() => {plot}.data[0].z"), moved["head_importance"], rtol=1e-6
    )
    assert "target=3" in page.url

    # Gradient-weighted rollout: R - I in the Averages view, beside rollout.
    redraw(page, "averages", lambda: page.click(".tabs button[data-view=averages]"))
    redraw(page, "averages", lambda: page.select_option("#method", "grad_rollout"))
    rolled = api(server_url, text, method="grad_rollout", target_index=3)
    drawn = np.array(
        page.evaluate(
            "() => document.querySelector('#view-averages [data-map=grad-rollout]').data[0].z"
        )
    )
    expected = np.array(rolled["method_map"][0]) - np.eye(len(drawn))
    np.testing.assert_allclose(drawn, expected, rtol=1e-5, atol=1e-7)
    assert page.locator("#view-averages [data-map=rollout]").count() == 1
    assert "Chefer" in page.locator("#method-note").text_content()
    assert "(3)" in page.locator("#view-averages .target-note").text_content()
    bar = "document.querySelector('#view-averages [data-map=grad-rollout]').data[0].colorbar"
    assert "relevance" in page.evaluate(f"() => {bar}.title.text")

    # The token explorer adds the chosen token's row of it under the token's rows.
    redraw(page, "generation", lambda: page.click(".tabs button[data-view=generation]"))
    q = int(page.evaluate("document.getElementById('query-rows').dataset.query"))
    strip = page.evaluate(
        "() => document.querySelector('#view-generation [data-map=grad-rollout-row]').data[0].z"
    )
    expected_row = np.array(rolled["method_map"][0][q])
    expected_row[q] -= 1
    np.testing.assert_allclose(strip[0], expected_row, rtol=1e-5, atol=1e-7)
    assert page.errors == []


def test_value_zeroing_is_drawn_beside_the_layers_head_average(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models#view=averages")
    page.wait_for_function(
        "document.getElementById('view-averages').dataset.drawn === 'true'", timeout=HANG_MS
    )
    text = page.input_value("#texts").splitlines()[0]
    redraw(page, "averages", lambda: page.select_option("#method", "value_zeroing"))
    redraw(page, "averages", lambda: page.select_option("#layer-index", "3"))
    zeroed = api(server_url, text, method="value_zeroing")
    drawn = page.evaluate(
        "() => document.querySelector('#view-averages [data-map=value-zeroing]').data[0].z"
    )
    np.testing.assert_allclose(drawn, zeroed["method_map"][3], rtol=1e-6)
    np.testing.assert_allclose([sum(row) for row in drawn], 1.0, rtol=1e-5)
    assert "Mohebbi" in page.locator("#method-note").text_content()
    assert page.locator("#view-averages [data-map=rollout]").count() == 1
    assert page.errors == []

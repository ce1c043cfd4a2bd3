import json
from pathlib import Path

import pytest
from attnviz.attention.tutorials import TUTORIAL_BATCH

from tests.support.browser import (
    HANG_MS,
    HEADS,
    another_page,
    close_page,
    compute_heads,
    evaluate_json,
    new_page,
    open_view,
    wait_for_heads,
)

pytestmark = pytest.mark.browser


def test_default_preset_draws_one_heatmap_per_head_with_masked_keys_at_zero(
    page, server_url
) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    assert page.locator(HEADS).count() == 2
    titles = page.locator(f"{HEADS} .gtitle").all_text_contents()
    assert titles == ["Head 0", "Head 1"]
    assert "(5, 2, 10, 10)" in page.locator("#summary").text_content()

    # What Plotly drew for sequence 0 (8 real tokens, 2 padding): the weights trace
    # has a value exactly where the mask attends, the masked trace everywhere else.
    drawn = page.evaluate(
        """() => [...document.querySelectorAll('#heads .head-plot')].map(
               (div) => ({weights: div.data[0].z, masked: div.data[1].z,
                          x: div.layout.xaxis.ticktext, y: div.layout.yaxis.ticktext}))"""
    )
    response = evaluate_json(page, "() => window.attnviz.lastResponse")
    length = len(TUTORIAL_BATCH[0])
    for h, head in enumerate(drawn):
        assert head["x"] == [str(t) for t in TUTORIAL_BATCH[0]] + ["&lt;pad&gt;"] * 2
        for i in range(10):
            for j in range(10):
                attend = j <= i and j < length
                assert (head["weights"][i][j] is not None) == attend
                assert (head["masked"][i][j] == 1) == (not attend)
                # The API's number for masked (padded or future) keys is exactly 0.
                if not attend:
                    assert response["weights"][0][h][i][j] == 0.0
                else:
                    assert head["weights"][i][j] == response["weights"][0][h][i][j]
    # Cell annotations are printed when L <= 16.
    assert page.locator(f"{HEADS} .heatmaplayer text").count() > 0
    # Labels are shown as text: the padding ticks read "<pad>".
    assert "<pad>" in page.locator(f"{HEADS} .xtick").all_text_contents()
    assert page.errors == []


def test_sequence_selector_redraws_another_sequence(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.select_option("#sequence-index", "3")
    page.wait_for_function("document.getElementById('heads').dataset.drawnSequence === '3'")
    ticks = page.evaluate("() => document.querySelector('#heads .head-plot').layout.xaxis.ticktext")
    assert ticks[:4] == ["66", "88", "98", "47"]
    assert page.errors == []


def test_api_error_shows_next_to_the_form_and_keeps_the_input(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.fill("#sequences", "the cat sat\non the mat")
    page.fill("#num_heads", "3")
    page.click("#compute")
    error = page.locator("#error")
    error.wait_for(state="visible")
    assert "num_heads" in error.text_content()
    assert "must divide" in error.text_content()
    assert page.input_value("#sequences") == "the cat sat\non the mat"
    assert page.input_value("#num_heads") == "3"
    # Fixing the field computes the words batch.
    page.fill("#num_heads", "4")
    compute_heads(page, 4)
    assert error.is_hidden()
    labels = page.evaluate("() => window.attnviz.lastResponse.key_labels[1]")
    assert labels == ["on", "the", "mat"]


def test_cross_attention_preset(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.select_option("#preset", "tutorial-encoder-decoder")
    page.wait_for_function("window.attnviz.lastResponse.attention === 'cross'")
    wait_for_heads(page, 2)
    shape = page.evaluate("() => window.attnviz.lastResponse.shape")
    assert shape == [5, 2, 12, 10]
    rows = page.evaluate("() => document.querySelector('#heads .head-plot').data[0].z.length")
    assert rows == 12
    assert page.errors == []


def test_verify_badge_shows_the_pytorch_agreement(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    badge = page.locator("#verify-badge")
    badge.wait_for(state="visible")
    text = badge.text_content()
    assert text.startswith("✓ matches PyTorch (max |Δ| = ")
    verification = page.evaluate("() => window.attnviz.lastResponse.verification")
    largest = max(
        verification["mha_weights_max_abs_diff"],
        verification["mha_output_max_abs_diff"],
        verification["sdpa_output_max_abs_diff"],
    )
    assert largest < 1e-6
    assert f"{largest:.1e}".replace("e-0", "e-") in text
    assert "scaled_dot_product_attention" in badge.get_attribute("title")
    # Unchecking verify hides the badge.
    page.uncheck("#verify")
    page.click("#compute")
    page.wait_for_function("window.attnviz.lastResponse.verification === null")
    assert badge.is_hidden()


def test_mask_fill_switches_fully_masked_rows_from_zero_to_uniform(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.select_option("#preset", "fully-masked-rows")
    page.wait_for_function("window.attnviz.lastResponse.fully_masked[0][0] === true")
    wait_for_heads(page, 2)
    first_row = "() => document.querySelector('#heads .head-plot').data[0].z[0]"
    assert page.evaluate(first_row) == [None] * 6  # drawn as masked: weight 0
    assert "weights set to 0" in page.locator("#summary").text_content()
    page.select_option("#mask_fill", "-1e9")
    page.click("#compute")
    page.wait_for_function("window.attnviz.lastResponse.mask_fill === -1e9")
    wait_for_heads(page, 2)
    row = page.evaluate(first_row)
    assert row == [pytest.approx(1 / 6)] * 6  # the tutorials' finite fill: uniform
    assert "uniform weights" in page.locator("#summary").text_content()
    assert page.locator("#verify-badge").text_content().startswith("✓ matches PyTorch")
    assert page.errors == []


def test_large_input_is_block_pooled_and_one_head_zooms_to_full_resolution(
    page, server_url
) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    default_timings = page.evaluate("window.attnviz.timings")
    page.fill("#sequences", " ".join(str(1 + i % 99) for i in range(512)))
    page.fill("#d_model", "512")
    page.fill("#num_heads", "8")
    page.uncheck("#verify")
    page.evaluate("window.attnviz.timings = undefined")
    page.click("#compute")
    page.wait_for_function("window.attnviz.timings !== undefined", timeout=HANG_MS)
    wait_for_heads(page, 8)
    response = evaluate_json(page, "() => window.attnviz.lastResponse")
    assert response["full_shape"] == [1, 8, 512, 512]
    assert response["shape"] == [1, 8, 128, 128]
    assert "blocks of 4 × 4 (block max)" in page.locator("#summary").text_content()
    z = page.evaluate("() => document.querySelector('#heads .head-plot').data[0].z.length")
    assert z == 128
    # Tick labels are thinned: at most 32 per axis.
    ticks = page.evaluate("() => document.querySelector('#heads .head-plot').layout.xaxis.ticktext")
    assert 0 < len(ticks) <= 32
    large_timings = page.evaluate("window.attnviz.timings")
    # A click on head 5 draws it at full resolution below the grid.
    page.evaluate(
        "() => document.querySelectorAll('#heads .head-plot')[5].emit('plotly_click', {points: []})"
    )
    page.wait_for_function("document.getElementById('head-zoom').dataset.head === '5'")
    rows = page.evaluate("() => document.querySelector('#head-zoom .plot').data[0].z.length")
    assert rows == 512
    title = page.locator("#head-zoom .gtitle").text_content()
    assert title == "Head 5, sequence 0: full resolution 512 × 512"
    # The draw times the page measured (ms): printed for the record (pytest -s), not
    # asserted against a budget; scripts/benchmark.py reports them.
    for name, timings in (("default preset", default_timings), ("L=512, H=8", large_timings)):
        assert timings["drawMs"] > 0 and timings["responseMs"] > 0
        print(f"page timings, {name}: " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
    assert page.errors == []


def test_page_works_under_its_content_security_policy(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1400, "height": 950})  # CSP enforced
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    response = page.goto(server_url + "/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    # Selector waits only: they need no eval, which the policy forbids.
    page.locator("#heads .head-plot .main-svg").nth(1).wait_for(timeout=HANG_MS)
    assert page.locator("#heads .head-plot").count() == 2
    page.locator("#verify-badge").wait_for(state="visible")
    page.click(".tabs button[data-view=step]")
    page.locator("#view-step .stage-plot .main-svg").nth(7).wait_for(timeout=HANG_MS)
    assert errors == []
    assert not [m for m in console if "Content Security Policy" in m], console
    context.close()


def test_the_url_reproduces_the_view_and_downloads_work(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.fill("#sequences", "the cat sat\non the mat")
    page.fill("#num_heads", "4")
    page.uncheck("#mask-causal")
    compute_heads(page, 4)
    page.click(".tabs button[data-view=summary]")
    page.wait_for_function("document.getElementById('view-summary').dataset.drawn === 'true'")
    shared = page.url
    assert "request=" in shared and shared.endswith("#view=summary")
    # A fresh page from the link computes the same request and opens the same tab.
    other = another_page(page)
    other.goto(shared)
    other.wait_for_function("document.getElementById('view-summary').dataset.drawn === 'true'")
    assert other.input_value("#sequences") == "the cat sat\non the mat"
    assert other.input_value("#num_heads") == "4"
    assert not other.is_checked("#mask-causal")
    first = evaluate_json(page, "() => window.attnviz.lastResponse.weights")
    assert evaluate_json(other, "() => window.attnviz.lastResponse.weights") == first
    other.close()
    # Downloads: the response as JSON, the figure as PNG (Plotly's toImage).
    with page.expect_download() as info:
        page.click("#download-json")
    body = json.loads(Path(info.value.path()).read_text(encoding="utf-8"))
    assert body["response"]["shape"] == [2, 4, 3, 3]
    with page.expect_download() as info:
        page.click("#download-png")
    assert info.value.suggested_filename == "attnviz-summary.png"
    assert Path(info.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert page.errors == []


def test_progress_indicator_shows_for_slow_requests(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    # Hold the next API response for 1 s: the indicator must appear, then go away.
    page.route(
        "**/api/v1/attention", lambda route: (page.wait_for_timeout(1000), route.continue_())
    )
    page.fill("#seed", "5")
    page.click("#compute")
    page.locator("#progress").wait_for(state="visible", timeout=HANG_MS)
    page.locator("#progress").wait_for(state="hidden", timeout=HANG_MS)
    assert page.evaluate("() => window.attnviz.lastResponse.seed") == 5


def test_dark_theme_follows_the_system_setting(page, server_url) -> None:  # type: ignore[no-untyped-def]
    for scheme, dark in (("light", False), ("dark", True)):
        page.emulate_media(color_scheme=scheme)
        page.goto(server_url + "/")
        wait_for_heads(page, 2)
        background = page.evaluate(
            "() => getComputedStyle(document.documentElement).backgroundColor"
        )
        font = page.evaluate(
            "() => document.querySelector('#heads .head-plot')._fullLayout.font.color"
        )
        red = int(background.split("(")[1].split(",")[0])
        assert (red < 60) == dark, background
        assert (font.lower() in ("#e4e7eb",)) == dark, font
    assert page.errors == []


def test_the_form_works_from_the_keyboard(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.focus("#sequences")
    page.keyboard.press("Control+A")
    page.keyboard.type("keyboard only input")
    page.keyboard.press("Tab")  # to the targets
    page.keyboard.press("Tab")  # to d_model
    page.keyboard.press("Control+A")
    page.keyboard.type("16")
    page.keyboard.press("Enter")  # submits the form
    page.wait_for_function("window.attnviz.lastResponse.d_model === 16")
    assert page.evaluate("() => window.attnviz.lastResponse.key_labels[0]") == [
        "keyboard",
        "only",
        "input",
    ]
    # The tabs are buttons: reachable and pressed with the keyboard.
    page.focus(".tabs button[data-view=parameters]")
    page.keyboard.press("Enter")
    page.wait_for_function("document.getElementById('view-parameters').dataset.drawn === 'true'")


# Found wrong by a user on the page (issue 12): a refused request, a changed form and the
# preset picker; errors beside their field, in plain words, in view.


def test_a_refused_request_leaves_no_earlier_results_and_no_badge(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    open_view(page, "step")
    page.locator("#verify-badge").wait_for(state="visible")
    assert page.locator("#view-step .js-plotly-plot").count() == 8
    page.fill("#num_heads", "3")
    page.click("#compute")
    page.locator("#error").wait_for(state="visible")
    # Nothing of the earlier request stays: not the open tab's plots, not the badge.
    assert page.locator("#view-step .js-plotly-plot").count() == 0
    assert page.locator("#verify-badge").is_hidden()
    assert "request was refused" in page.locator("#summary").text_content()
    # Nor the heads, nor another tab.
    page.click(".tabs button[data-view=heads]")
    assert page.get_attribute("#view-heads", "hidden") is None
    assert page.locator(f"{HEADS} .main-svg").count() == 0
    page.click(".tabs button[data-view=summary]")
    assert page.get_attribute("#view-summary", "hidden") is None
    assert page.locator("#view-summary .js-plotly-plot").count() == 0
    # Fixing the field draws again.
    page.click(".tabs button[data-view=heads]")
    page.fill("#num_heads", "2")
    compute_heads(page, 2)
    assert page.locator("#verify-badge").is_visible()
    assert page.locator("#error").is_hidden()
    assert page.errors == []


def test_results_are_stale_while_the_form_differs_and_the_preset_says_custom(
    page, server_url
) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    preset = page.input_value("#preset")
    assert preset != "custom"
    assert page.locator("#stale-note").is_hidden()
    page.fill("#seed", "7")
    # The drawn results are for seed 0: marked stale, and the preset is no longer the preset.
    assert page.locator("#stale-note").is_visible()
    assert page.get_attribute(".results", "data-stale") == "true"
    assert page.input_value("#preset") == "custom"
    assert page.locator("#preset option:checked").text_content() == "Custom"
    # Back to the preset's value: neither stale nor custom.
    page.fill("#seed", "0")
    assert page.locator("#stale-note").is_hidden()
    assert page.input_value("#preset") == preset
    # Compute clears the stale mark; the picker still says Custom for an edited input.
    page.fill("#seed", "7")
    page.click("#compute")
    page.wait_for_function("window.attnviz.lastResponse.seed === 7")
    wait_for_heads(page, 2)
    assert page.locator("#stale-note").is_hidden()
    assert page.get_attribute(".results", "data-stale") == "false"
    assert page.input_value("#preset") == "custom"
    # Unchecking verify changes what Compute would show (the badge): stale again.
    page.uncheck("#verify")
    assert page.locator("#stale-note").is_visible()
    assert page.errors == []


def test_a_refused_field_is_marked_beside_it_and_the_message_is_in_view(
    browser, server_url
) -> None:  # type: ignore[no-untyped-def]
    page = new_page(browser, 1366, 768)
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.fill("#d_model", "10")
    page.fill("#num_heads", "3")
    page.click("#compute")
    error = page.locator("#error")
    error.wait_for(state="visible")
    assert "must divide d_model (10)" in error.text_content()
    # In the viewport, without scrolling.
    box = error.bounding_box()
    assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 768, box
    # The field: aria-invalid, outlined, with its message beside it.
    field = page.locator("#num_heads")
    assert field.get_attribute("aria-invalid") == "true"
    note = page.locator("#num_heads-error")
    assert field.get_attribute("aria-describedby") == "num_heads-error"
    assert "try 1, 2, 5 or 10" in note.text_content()
    outline = page.evaluate("getComputedStyle(document.getElementById('num_heads')).outlineStyle")
    assert outline == "solid"
    field_box, note_box = field.bounding_box(), note.bounding_box()
    assert 0 <= note_box["y"] - (field_box["y"] + field_box["height"]) < 20
    assert page.locator("#d_model").get_attribute("aria-invalid") is None
    # Pydantic's wording said plainly, beside d_model.
    page.fill("#d_model", "0")
    page.fill("#num_heads", "1")
    page.click("#compute")
    page.locator("#d_model-error").wait_for()
    assert page.locator("#d_model-error").text_content() == "must be at least 1"
    assert page.locator("#num_heads").get_attribute("aria-invalid") is None
    # A bad line of the sequences names the line.
    page.fill("#d_model", "8")
    page.fill("#num_heads", "2")
    page.fill("#sequences", "1 2 3\n4 5 300")
    page.click("#compute")
    page.locator("#sequences-error").wait_for()
    assert page.locator("#sequences-error").text_content().startswith("line 2: token id 300")
    # Editing the field takes its mark away; a good request clears the box.
    page.fill("#sequences", "1 2 3\n4 5 6")
    assert page.locator("#sequences").get_attribute("aria-invalid") is None
    assert page.locator("#sequences-error").count() == 0
    compute_heads(page, 2)
    assert error.is_hidden()
    assert page.errors == []
    close_page(page)


def test_a_refused_view_control_is_marked_beside_it(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    open_view(page, "layers")
    page.evaluate("document.getElementById('view-layers').dataset.drawn = 'stale'")
    page.fill("#num-layers", "40")
    page.dispatch_event("#num-layers", "change")
    page.locator("#num-layers-error").wait_for()
    assert page.locator("#num-layers-error").text_content() == "must be at most 12"
    assert page.locator("#num-layers").get_attribute("aria-invalid") == "true"
    assert page.errors == []


def test_a_text_of_more_words_than_vocab_size_grows_it_and_says_so(page, server_url) -> None:  # type: ignore[no-untyped-def]
    """300 typed words met a vocab_size error first (issue 53): Compute grows vocab_size to
    the distinct words plus the pad token, says so under the field, and draws; token ids
    and a vocab_size that fits are left as they are."""
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    words = [f"w{i}" for i in range(300)]
    page.fill("#sequences", " ".join(words) + "\n" + " ".join(words[:10]))
    page.fill("#targets", "")
    page.fill("#vocab_size", "100")
    compute_heads(page, 2)
    assert page.input_value("#vocab_size") == "301"
    note = page.locator("#vocab-note")
    assert note.is_visible()
    assert note.text_content() == (
        "vocab_size grew from 100 to 301 to fit the text: 300 distinct words, one id each, "
        "and the pad token."
    )
    assert page.locator("#error").is_hidden()
    shape = json.loads(page.evaluate("JSON.stringify(window.attnviz.lastResponse.shape)"))
    assert shape[0] == 2  # both sequences computed (300 tokens pooled for display)
    # a vocab_size that fits: nothing changes and the note goes
    page.fill("#sequences", "the cat sat")
    compute_heads(page, 2)
    assert page.input_value("#vocab_size") == "301" and note.is_hidden()
    # token ids are ids: an id past vocab_size is still the API's error, naming its field
    page.fill("#sequences", "1 2 3\n4 5 400")
    page.click("#compute")
    page.wait_for_function("!document.getElementById('error').hidden")
    assert page.input_value("#vocab_size") == "301" and note.is_hidden()
    assert "sequences line 2: token id 400 is outside" in page.locator("#error").text_content()
    assert page.errors == []

"""Each lesson view, opened from the page in a real Chromium, is drawn."""

import math

import pytest

from tests.support.browser import (
    close_page,
    compute_heads,
    evaluate_json,
    open_view,
    wait_for_heads,
)

pytestmark = pytest.mark.browser

WORDS = "the cat sat on the mat"

# view -> (CSS selector of its plots, the least number drawn for the default preset)
VIEWS = {
    "step": (".stage-plot", 8),
    "scaling": (".scaling-plot", 6),
    "decoding": (".decoding-plot", 4),
    "summary": (".summary-plot", 3),
    "dropout": (".dropout-plot", 2),
    "layers": (".grid-plot", 1),
}


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_each_plot_view_is_drawn_on_the_default_preset(page, server_url, view: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    open_view(page, view)
    selector, least = VIEWS[view]
    plots = page.locator(f"#view-{view} {selector}")
    assert plots.count() >= least
    assert page.locator(f"#view-{view} {selector} .main-svg").count() >= least
    assert page.locator("#error").is_hidden()
    assert page.locator("#view-heads").is_hidden()
    assert page.errors == []


def test_step_through_titles_follow_the_stages(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    open_view(page, "step")
    page.evaluate("document.getElementById('view-step').dataset.drawn = 'stale'")
    page.select_option("#head-index", "1")
    page.wait_for_function("document.getElementById('view-step').dataset.drawn === 'true'")
    assert "Head 1 of sequence 0" in page.locator("#view-step .view-note").text_content()
    titles = page.locator("#view-step .gtitle").all_text_contents()
    assert titles[3:] == [
        "1. scores Q Kᵀ",
        "2. scaled Q Kᵀ / √4",
        "3. masked (padding_causal)",
        "4. softmax weights",
        "5. head output = weights · V",
    ]
    # Masked scores are drawn as masked: null in the trace, not -inf.
    masked = page.evaluate(
        "() => document.querySelectorAll('#view-step .stage-plot')[5].data[0].z[0]"
    )
    assert masked[0] is not None and all(v is None for v in masked[1:])


def test_decoding_view_reports_zero_difference_with_the_mask(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    open_view(page, "decoding")
    note = page.locator("#view-decoding .view-note")
    assert float(note.get_attribute("data-masked-diff")) < 1e-6
    assert "Without the mask" in note.text_content()


def test_a_sequence_over_the_decoding_limit_is_a_note_in_that_lesson(page, server_url) -> None:  # type: ignore[no-untyped-def]
    """300 tokens compute on every other view; the decoding lesson (one pass per prefix, up
    to 128 tokens) says so in itself, and the form's field is not marked invalid."""
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.fill("#sequences", " ".join(f"w{i % 40}" for i in range(300)))
    compute_heads(page, 2)
    open_view(page, "decoding")
    note = page.locator("#view-decoding .lesson-limit-note")
    assert "has 300 tokens" in note.text_content() and "up to 128" in note.text_content()
    assert page.locator("#view-decoding .decoding-plot").count() == 0
    assert page.get_attribute("#sequences", "aria-invalid") != "true"
    assert page.locator("#error").is_hidden()
    assert page.errors == []


def test_compare_with_one_sequence_asks_for_a_second(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.fill("#sequences", "the cat sat on the mat")
    compute_heads(page, 2)
    open_view(page, "compare")
    assert page.locator("#view-compare .compare-plot").count() == 0
    assert "needs a second sequence" in page.locator("#view-compare .compare-ask").text_content()
    page.click("#view-compare .compare-ask button")
    assert page.input_value("#sequences").endswith("\n")
    assert page.evaluate("document.activeElement.id") == "sequences"
    assert page.errors == []


def test_decoding_cells_hold_numbers_only_where_they_fit(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    """Plotly shrinks cell numbers until they overlap ("1.00.000.00"): on a phone's width
    each map is measured once drawn, and a cell under 30 px drops its numbers."""
    from tests.support.browser import new_page

    for width, numbered in ((390, False), (1300, True)):
        page = new_page(browser, width, 900)
        page.goto(server_url + "/")
        wait_for_heads(page, 2)
        open_view(page, "decoding")
        cells = page.evaluate(
            """() => [...document.querySelectorAll('#view-decoding .decoding-plot')].slice(0, 3)
                .map((d) => [d._fullLayout.xaxis._length / d.data[0].z[0].length,
                             d.data[0].texttemplate])"""
        )
        for px, template in cells:
            assert (template != "") == numbered == (px >= 30), (width, px, template)
        assert page.errors == []
        close_page(page)


def test_parameters_view_shows_the_same_total_for_every_num_heads(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    open_view(page, "parameters")
    totals = page.locator("#view-parameters table.by-heads tbody tr td:nth-child(3)")
    assert set(totals.all_text_contents()) == {"288"}
    assert page.locator("#view-parameters table.by-heads tr.current td").first.text_content() == "2"


def test_dropout_view_follows_its_controls(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    open_view(page, "dropout")
    page.evaluate("document.getElementById('view-dropout').dataset.drawn = 'stale'")
    page.fill("#dropout-p", "0.5")
    page.dispatch_event("#dropout-p", "change")
    page.wait_for_function("document.getElementById('view-dropout').dataset.drawn === 'true'")
    assert "p = 0.5" in page.locator("#view-dropout .view-note").text_content()
    assert "after dropout (p = 0.5)" in page.locator("#view-dropout .gtitle").all_text_contents()


def test_layers_view_grid_and_click_to_enlarge(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.select_option("#preset", "tutorial-encoder-decoder")
    page.wait_for_function("window.attnviz.lastResponse.attention === 'cross'")
    open_view(page, "layers")
    page.evaluate("document.getElementById('view-layers').dataset.drawn = 'stale'")
    page.fill("#num-layers", "3")
    page.dispatch_event("#num-layers", "change")
    page.wait_for_function("document.getElementById('view-layers').dataset.drawn === 'true'")
    blocks = page.locator("#view-layers .grid-plot")
    assert blocks.count() == 3  # encoder self, decoder self, cross
    traces = page.evaluate(
        "() => [...document.querySelectorAll('#view-layers .grid-plot')].map(d => d.data.length)"
    )
    assert traces == [6, 6, 6]  # 3 layers x 2 heads, one figure each
    enlarged = page.locator("#view-layers .enlarged")
    assert enlarged.get_attribute("data-layer") == "0"
    # Click the thumbnail of layer 2, head 1 of the cross-attention block.
    page.evaluate(
        """() => {
            const div = document.querySelectorAll('#view-layers .grid-plot')[2];
            div.emit('plotly_click', {points: [{data: div.data[5]}]});
        }"""
    )
    page.wait_for_function("document.querySelector('#view-layers .enlarged').dataset.layer === '2'")
    assert enlarged.get_attribute("data-head") == "1"
    title = page.locator("#view-layers .enlarged .gtitle").text_content()
    assert title == "decoder cross attention: layer 2, head 1"
    assert page.errors == []


def test_views_follow_the_users_own_input(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.fill("#sequences", "the cat sat on the mat")
    page.fill("#d_model", "16")
    page.fill("#num_heads", "4")
    compute_heads(page, 4)
    open_view(page, "decoding")
    ticks = page.evaluate(
        "() => document.querySelector('#view-decoding .decoding-plot').layout.xaxis.ticktext"
    )
    assert ticks == ["the", "cat", "sat", "on", "the", "mat"]
    open_view(page, "summary")
    bars = page.evaluate(
        "() => document.querySelectorAll('#view-summary .summary-plot')[1].data[0].x"
    )
    assert bars == ["Head 0", "Head 1", "Head 2", "Head 3"]
    assert page.errors == []


# Found wrong by a user on the page (issue 12): the head summary charts, and the Layers
# tab's mask checkboxes. Every number is read back from what Plotly drew (div.data,
# div._fullLayout, the SVG) and compared with the API's own JSON.


def compute_words(page, text: str = WORDS, d_model: int = 16, num_heads: int = 4) -> None:  # type: ignore[no-untyped-def]
    page.fill("#sequences", text)
    page.fill("#d_model", str(d_model))
    page.fill("#num_heads", str(num_heads))
    compute_heads(page, num_heads)


def test_head_summary_bars_are_the_api_numbers_on_a_numeric_axis(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    compute_words(page)
    open_view(page, "summary")
    response = evaluate_json(page, "() => window.attnviz.lastResponse")
    api = {
        1: response["head_summary"]["entropy_bits"][0],
        2: response["head_summary"]["mean_row_max"][0],
    }
    sharpest = min(range(4), key=lambda h: api[1][h])
    assert (
        f"the sharpest head is {sharpest} "
        in page.locator("#view-summary .view-note").text_content()
    )
    for index, values in api.items():
        selector = f"#view-summary .summary-plot >> nth={index}"
        drawn = page.evaluate(
            f"""() => {{
                const div = document.querySelectorAll('#view-summary .summary-plot')[{index}];
                const y = div._fullLayout.yaxis;
                return {{x: div.data[0].x, y: div.data[0].y, type: y.type, range: y.range,
                         ticks: [...div.querySelectorAll('.ytick text')].map((t) => t.textContent),
                         heights: [...div.querySelectorAll('.bars .point path')].map(
                             (p) => p.getBoundingClientRect().height)}};
            }}"""
        )
        assert drawn["x"] == ["Head 0", "Head 1", "Head 2", "Head 3"]
        assert drawn["y"] == pytest.approx(values, abs=1e-6)
        # A numeric axis from 0 that holds every bar.
        assert drawn["type"] == "linear"
        assert drawn["range"][0] == 0 and drawn["range"][1] >= max(values)
        # Every head is drawn, its bar's height proportional to its value.
        heights = drawn["heights"]
        assert len(heights) == 4
        scale = heights[0] / values[0]
        for height, value in zip(heights, values, strict=True):
            assert height > 1
            assert math.isclose(height, scale * value, abs_tol=1.5), (heights, values)
        # Readable ticks: short numbers with at most 2 decimals, inside the figure.
        assert len(drawn["ticks"]) >= 3
        for tick in drawn["ticks"]:
            number = float(tick)
            assert number >= 0 and len(tick.split(".")[-1] if "." in tick else "") <= 2, tick
        plot_box = page.locator(selector).bounding_box()
        for box in [t.bounding_box() for t in page.locator(selector).locator(".ytick text").all()]:
            assert box["x"] >= plot_box["x"], (box, plot_box)
    assert page.errors == []


def test_layers_tab_disables_the_mask_checkboxes_and_says_why(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    assert page.is_enabled("#mask-causal") and page.is_enabled("#mask-padding")
    assert page.locator("#mask-note").is_hidden()
    open_view(page, "layers")
    assert page.is_disabled("#mask-causal") and page.is_disabled("#mask-padding")
    note = page.locator("#mask-note")
    assert note.is_visible()
    assert "never causal" in note.text_content()
    assert "never causal" in page.locator("#view-layers .layers-masks").text_content()
    # What the tab draws: the encoder masks the padded keys only, never future keys.
    z = page.evaluate(
        "() => document.querySelector('#view-layers .grid-plot').data[0].z"
    )  # layer 0, head 0 of sequence 0: 8 tokens and 2 <pad>
    assert all(z[0][j] is not None for j in range(8))
    assert all(z[i][j] is None for i in range(10) for j in (8, 9))
    open_view(page, "heads")
    assert page.is_enabled("#mask-causal") and page.locator("#mask-note").is_hidden()
    assert page.errors == []

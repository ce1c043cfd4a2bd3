"""Issue 12: what a user found wrong on the page, checked in a real Chromium.

Every number is read back from what Plotly drew (div.data, div._fullLayout, the SVG)
and compared with the API's own JSON (window.attnviz.lastResponse).
"""

import math

import pytest

from tests.browser.test_models_page import grid_point
from tests.browser.test_page import HEADS, wait_for_heads
from tests.browser.test_views import open_view
from tests.pretrained.support import require_pretrained_extra

pytestmark = pytest.mark.browser

WORDS = "the cat sat on the mat"


def new_page(browser, width: int, height: int):  # type: ignore[no-untyped-def]
    """A page at another viewport, made like the `page` fixture (CSP bypassed for eval)."""
    context = browser.new_context(viewport={"width": width, "height": height}, bypass_csp=True)
    context.set_default_timeout(10_000)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    return page


def compute_words(page, text: str = WORDS, d_model: int = 16, num_heads: int = 4) -> None:  # type: ignore[no-untyped-def]
    page.fill("#sequences", text)
    page.fill("#d_model", str(d_model))
    page.fill("#num_heads", str(num_heads))
    page.click("#compute")
    wait_for_heads(page, num_heads)


# The page position of cell (row, col) of subplot `subplot` of the index-th plot matching
# `selector`, from Plotly's own axes (rows and columns are the indices 0, 1, ...).
CELL_CENTRE = """([selector, index, row, col, subplot]) => {
    const div = document.querySelectorAll(selector)[index];
    const suffix = subplot > 1 ? String(subplot) : "";
    const xa = div._fullLayout["xaxis" + suffix];
    const ya = div._fullLayout["yaxis" + suffix];
    const box = div.querySelector(".main-svg").getBoundingClientRect();
    // Whole pixels: the mouse events Chromium sends carry integer coordinates, and on a
    // map of cells under 2 px a fractional centre could be read in the next cell.
    return [Math.round(box.left + xa._offset + xa.l2p(col)),
            Math.round(box.top + ya._offset + ya.l2p(row))];
}"""


def hover_lines(page, selector: str, row: int, col: int, index: int = 0, subplot: int = 1):  # type: ignore[no-untyped-def]
    """The lines of the hover label the mouse gets over a cell (a real mouse move)."""
    plot = page.locator(selector).nth(index)
    plot.scroll_into_view_if_needed()
    page.mouse.move(0, 0)
    plot.locator(".hoverlayer .hovertext").wait_for(state="detached")
    x, y = page.evaluate(CELL_CENTRE, [selector, index, row, col, subplot])
    page.mouse.move(x, y)
    label = plot.locator(".hoverlayer .hovertext")
    label.wait_for()
    return label.locator("text tspan.line").all_text_contents()


# 1. The head summary charts.


def test_head_summary_bars_are_the_api_numbers_on_a_numeric_axis(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    compute_words(page)
    open_view(page, "summary")
    response = page.evaluate("() => window.attnviz.lastResponse")
    api = {
        1: response["head_summary"]["entropy_bits"][0],
        2: response["head_summary"]["max_weight"][0],
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


# 2. A refused request, a changed form, and the preset picker.


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
    page.click("#compute")
    wait_for_heads(page, 2)
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


# 3. Hover: the token and its position on every map.


def test_hover_names_the_token_and_its_position_on_every_map(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    response = page.evaluate("() => window.attnviz.lastResponse")
    # Sequence 0 of the tutorials' batch: 62 13 47 39 78 33 56 13 <pad> <pad>.
    lines = hover_lines(page, HEADS, 4, 2, index=1)
    weight = response["weights"][0][1][4][2]
    assert lines == ["Query token 4: 78", "Key token 2: 47", f"weight {weight:.4f}"]
    lines = hover_lines(page, HEADS, 9, 8)  # a padded key: masked
    assert lines[:2] == ["Query token 9: <pad>", "Key token 8: <pad>"]

    page.select_option("#sequence-index", "3")
    page.wait_for_function("document.getElementById('heads').dataset.drawnSequence === '3'")
    assert hover_lines(page, HEADS, 1, 0)[:2] == ["Query token 1: 88", "Key token 0: 66"]
    page.select_option("#sequence-index", "0")
    page.wait_for_function("document.getElementById('heads').dataset.drawnSequence === '0'")

    open_view(page, "step")
    q_map = "#view-step .stage-plot"
    assert hover_lines(page, q_map, 4, 1)[:2] == ["Query token 4: 78", "d_k dimension 1"]
    assert hover_lines(page, q_map, 3, 2, index=3)[:2] == ["Query token 3: 39", "Key token 2: 47"]

    open_view(page, "summary")
    lines = hover_lines(page, "#view-summary .summary-plot", 5, 3)
    assert lines[:2] == ["Query token 5: 33", "Key token 3: 39"]

    open_view(page, "dropout")
    lines = hover_lines(page, "#view-dropout .dropout-plot", 6, 0, index=1)
    assert lines[:2] == ["Query token 6: 56", "Key token 0: 62"]

    open_view(page, "decoding")
    lines = hover_lines(page, "#view-decoding .decoding-plot", 2, 1)
    assert lines[:2] == ["Query token 2: 47", "Key token 1: 13"]

    open_view(page, "layers")
    # The thumbnails of layer 1 (row), head 0 (column): subplot 3 of 2 x 2.
    lines = hover_lines(page, "#view-layers .grid-plot", 7, 4, subplot=3)
    assert lines == [
        "layer 1, head 0",
        "Query token 7: 13",
        "Key token 4: 78",
        lines[3],
    ]
    assert lines[3].startswith("weight ")
    lines = hover_lines(page, "#view-layers .enlarged .plot", 1, 0)
    assert lines[:2] == ["Query token 1: 13", "Key token 0: 62"]
    assert page.errors == []


def test_hover_on_pooled_maps_says_which_tokens_a_block_covers(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    words = [f"w{i}" for i in range(300)]  # 300 tokens: blocks of 3 for display_size 128
    page.fill("#sequences", " ".join(words))
    page.fill("#vocab_size", "1000")
    page.uncheck("#verify")
    page.click("#compute")
    page.wait_for_function("window.attnviz.lastResponse.full_shape[2] === 300", timeout=30_000)
    wait_for_heads(page, 2)
    response = page.evaluate("() => window.attnviz.lastResponse")
    assert response["downsample"]["factor_q"] == 3 and response["shape"][2] == 100
    lines = hover_lines(page, HEADS, 98, 10)
    assert lines[0] == "Query tokens 294–296: w294…w296"
    assert lines[1] == "Key tokens 30–32: w30…w32"
    assert lines[2] == f"weight {response['weights'][0][0][98][10]:.4f}"
    # The head average of the summary is pooled the same way.
    open_view(page, "summary")
    lines = hover_lines(page, "#view-summary .summary-plot", 7, 5)
    assert lines[:2] == ["Query tokens 21–23: w21…w23", "Key tokens 15–17: w15…w17"]
    # A click on a head fetches it at full resolution: one token per cell again.
    open_view(page, "heads")
    page.evaluate(
        "() => document.querySelectorAll('#heads .head-plot')[1].emit('plotly_click', {points: []})"
    )
    page.wait_for_function("document.getElementById('head-zoom').dataset.head === '1'")
    lines = hover_lines(page, "#head-zoom .plot", 250, 17)
    assert lines[:2] == ["Query token 250: w250", "Key token 17: w17"]
    assert page.errors == []


def test_models_page_hover_names_the_tokens_of_thumbnails_and_pooled_blocks(
    browser, server_url
) -> None:  # type: ignore[no-untyped-def]
    require_pretrained_extra()
    # Wide, so that a thumbnail cell of the pooled 50 x 50 maps is about 3 px.
    page = new_page(browser, 2200, 1200)
    page.goto(server_url + "/models")
    page.wait_for_function(
        "document.getElementById('view-model').dataset.drawn === 'true'", timeout=20_000
    )
    tokens = page.evaluate("() => window.attnvizModels.lastResponse.tokens[0]")
    # Query 2, key 1 of layer 0, head 1: a cell of the grid's one tiled heatmap.
    lines = hover_lines(page, "#model-grid", *grid_point(page, 0, 1, 2, 1))
    assert lines[:3] == [
        "layer 0, head 1",
        f"Query token 2: {tokens[2]}",
        f"Key token 1: {tokens[1]}",
    ]
    lines = hover_lines(page, "#view-model .enlarged .plot", 3, 0)
    assert lines[:2] == [f"Query token 3: {tokens[3]}", f"Key token 0: {tokens[0]}"]
    # 200 tokens: the thumbnails are pooled to blocks of 4.
    page.fill("#texts", " ".join(["attention"] * 198))
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.click("#compute")
    page.wait_for_function(
        "document.getElementById('view-model').dataset.drawn === 'true'", timeout=30_000
    )
    response = page.evaluate("() => window.attnvizModels.lastResponse")
    assert response["downsample"]["factor"] == 4
    tokens = response["tokens"][0]
    assert len(tokens) == 200

    def block(k: int) -> str:
        first, last = 4 * k, min(4 * k + 4, 200) - 1
        return f"tokens {first}–{last}: {tokens[first]}…{tokens[last]}"

    # Layer 1, head 0: the cells are small, so the expected text is that of the cell
    # Plotly reports under the mouse, aimed at (1, 47).
    first_row, first_col = grid_point(page, 1, 0, 0, 0)
    lines = hover_lines(page, "#model-grid", first_row + 1, first_col + 47)
    row, col = page.evaluate(
        "() => document.getElementById('model-grid')._hoverdata[0].pointNumber"
    )
    row, col = row - first_row, col - first_col
    assert 0 <= row <= 2 and 46 <= col <= 48
    assert lines[:3] == ["layer 1, head 0", f"Query {block(row)}", f"Key {block(col)}"]
    # The blocks at the ends hold [CLS] and [SEP]: the hover text every cell of the
    # first and last row and column carries.
    first_and_last = page.evaluate(
        """([y, x]) => {
            const t = document.getElementById('model-grid').data[0];
            return [t.hovertext[y][x], t.hovertext[y + 49][x], t.text[y][x], t.text[y][x + 49]];
        }""",
        [first_row, first_col],
    )
    query = "layer 1, head 0<br>Query "
    assert first_and_last == [query + block(0), query + block(49), block(0), block(49)]
    assert block(0) == "tokens 0–3: [CLS]…attention"
    assert block(49) == "tokens 196–199: attention…[SEP]"
    assert page.errors == []
    page.context.close()


# 4. Errors beside the field, in plain words, in view.


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
    page.click("#compute")
    wait_for_heads(page, 2)
    assert error.is_hidden()
    assert page.errors == []
    page.context.close()


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


# 5. The Layers tab and the mask checkboxes.


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


# 6. A phone, 390 px wide.

VIEWS = ["heads", "step", "scaling", "decoding", "parameters", "summary", "dropout", "layers"]


def test_phone_width_has_no_horizontal_scroll_on_any_tab(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    page = new_page(browser, 390, 844)
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    for view in VIEWS:
        if view != "heads":
            open_view(page, view)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, (view, width)
    assert page.errors == []
    page.context.close()


def test_phone_opening_a_shared_link_does_not_jump_the_page(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    page = new_page(browser, 390, 844)
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    assert page.evaluate("window.scrollY") == 0
    open_view(page, "summary")
    link = page.url
    # The fragment names the view and no element of the page.
    fragment = link.split("#", 1)[1]
    assert fragment == "view=summary"
    assert page.evaluate(f"document.getElementById({fragment!r})") is None
    other = page.context.new_page()
    other.goto(link)
    other.wait_for_function(
        "document.getElementById('view-summary').dataset.drawn === 'true'", timeout=15_000
    )
    other.wait_for_timeout(300)
    assert other.evaluate("window.scrollY") == 0
    # Drawing the default view does not jump a page scrolled by its user either.
    page.click(".tabs button[data-view=heads]")
    wait_for_heads(page, 2)
    page.evaluate("window.scrollTo(0, 400)")
    page.evaluate(
        """() => {
            const select = document.getElementById('sequence-index');
            select.value = '2';
            select.dispatchEvent(new Event('change'));
        }"""
    )
    page.wait_for_function("document.getElementById('heads').dataset.drawnSequence === '2'")
    assert page.evaluate("window.scrollY") == 400
    page.context.close()


def test_old_links_with_a_bare_view_still_open_that_tab(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/#parameters")
    page.wait_for_function(
        "document.getElementById('view-parameters').dataset.drawn === 'true'", timeout=15_000
    )
    assert page.url.endswith("#view=parameters")
    assert page.errors == []


def test_phone_modebar_does_not_cover_the_titles(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    page = new_page(browser, 390, 844)
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    overlaps = """() => [...document.querySelectorAll('.view:not([hidden]) .js-plotly-plot')]
        .map((div) => {
            const bar = div.querySelector('.modebar').getBoundingClientRect();
            const title = div.querySelector('.gtitle');
            if (!title) return null;
            const t = title.getBoundingClientRect();
            const overlap = bar.left < t.right && t.left < bar.right
                && bar.top < t.bottom && t.top < bar.bottom;
            return {title: title.textContent, overlap, bar: bar.width * bar.height};
        }).filter((x) => x !== null)"""
    for view in VIEWS:
        if view == "parameters":
            continue  # tables only
        if view != "heads":
            open_view(page, view)
        drawn = page.evaluate(overlaps)
        assert drawn, view
        for plot in drawn:
            assert plot["bar"] > 0, plot  # the modebar is there
            assert not plot["overlap"], (view, plot)
    assert page.errors == []
    page.context.close()

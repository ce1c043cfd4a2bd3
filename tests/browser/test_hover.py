"""Hover text on every map, checked in a real Chromium: the token and its position on
each map of the attention page (/), pooled blocks named by the tokens they cover, and the
thumbnails of /models.

Found wrong by a user on the page (issue 12). Every label is the one Plotly drew, read
back under a real mouse move, and compared with the API's own JSON
(window.attnviz.lastResponse).
"""

import pytest

from tests.pretrained.support import require_pretrained_extra
from tests.support.browser import (
    CELL_CENTRE,
    HANG_MS,
    HEADS,
    close_page,
    evaluate_json,
    grid_point,
    new_page,
    open_view,
    wait_for_heads,
)

pytestmark = pytest.mark.browser


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


def test_hover_names_the_token_and_its_position_on_every_map(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    response = evaluate_json(page, "() => window.attnviz.lastResponse")
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
    page.wait_for_function("window.attnviz.lastResponse.full_shape[2] === 300", timeout=HANG_MS)
    wait_for_heads(page, 2)
    response = evaluate_json(page, "() => window.attnviz.lastResponse")
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
        "document.getElementById('view-model').dataset.drawn === 'true'", timeout=HANG_MS
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
        "document.getElementById('view-model').dataset.drawn === 'true'", timeout=HANG_MS
    )
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
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
    close_page(page)

"""The saved interactive views in Chromium, offline: what a click draws is the tensor given.

Each page is opened from disk with every other request aborted and recorded (nothing may
be fetched); the reference for every line, chip and cell is the input array, indexed here
with numpy.
"""

from pathlib import Path

import attnviz
import numpy as np
import pytest

from tests.support.browser import CELL_CENTRE, HANG_MS, close_page, evaluate_json, open_offline

pytestmark = pytest.mark.browser

TOKENS = ["The", "Ġcat", "<sat>", "on", "&mat", "."]
LINES = """() => [...document.querySelectorAll('.line-view line')].map((l) => [
    Number(l.dataset.head), Number(l.dataset.query), Number(l.dataset.key),
    Number(l.dataset.weight), l.classList.contains('faded')])"""
MODEL = "(key) => document.querySelector('.attnviz-widget-host').attnvizModel.get(key)"
OLD_PLOTLY_PAGE_BYTES = 1_200_000
"""A saved view before: Plotly.js (1.2 MB) and the figure's JSON."""


def attention(shape: tuple[int, ...]) -> np.ndarray:
    """Rows of positive weights that sum to 1, float32."""
    weights = np.random.default_rng(7).random(shape).astype(np.float32) + 0.05
    return weights / weights.sum(axis=-1, keepdims=True)


def drawn(page, selector: str = ".attnviz-widget[data-drawn='true']") -> None:  # type: ignore[no-untyped-def]
    page.wait_for_selector(selector, timeout=HANG_MS)


def lines(page) -> list[list[float]]:  # type: ignore[no-untyped-def]
    page.mouse.move(1, 1)  # off the view: hovering a token or a head changes the lines
    return page.evaluate(LINES)  # type: ignore[no-any-return]


def assert_lines_of(
    found: list[list[float]], weights: np.ndarray, heads: list[int], query: int
) -> None:
    """One line per (head shown, key) from ``query``, with the weight of the input."""
    assert sorted((h, q, k) for h, q, k, _, _ in found) == [
        (h, query, k) for h in heads for k in range(weights.shape[-1])
    ]
    for h, _, k, weight, _ in found:
        assert np.float32(weight) == weights[int(h), query, int(k)]


def test_a_saved_head_view_draws_a_clicked_tokens_lines_and_filters_heads(  # type: ignore[no-untyped-def]
    browser, tmp_path: Path
) -> None:
    weights = attention((3, 1, 4, 6, 6))  # (N, B, H, L, L)
    path = attnviz.head_view(weights, TOKENS, layer=1).save(tmp_path / "head.html")
    assert path.stat().st_size < OLD_PLOTLY_PAGE_BYTES / 4  # no Plotly.js: the lines are SVG
    page, outside, errors = open_offline(browser, path)
    drawn(page)
    assert page.evaluate("document.querySelector('.attnviz-widget').dataset.view") == "head"
    # The tokens as the page shows them (displayToken): Ġ is a space, markup stays text.
    labels = page.locator(".line-tokens.queries .line-token").all_text_contents()
    assert labels == ["The", "␣cat", "<sat>", "on", "&mat", "."]

    # 1) A click on query 2 draws its lines to every key, in every head.
    page.click(".line-tokens.queries .line-token-row[data-position='2']")
    assert page.evaluate(MODEL, "selected") == [2]
    assert_lines_of(lines(page), weights[1, 0], [0, 1, 2, 3], 2)

    # 2) Hovering head 1's colour: its lines on top, the others' faded.
    page.hover(".head-toggle[data-head='1']")
    hovered = page.evaluate(LINES)
    assert {h for h, *_, faded in hovered if not faded} == {1}
    assert {h for h, *_, faded in hovered if faded} == {0, 2, 3}
    assert page.evaluate(MODEL, "heads") == [0, 1, 2, 3]  # a hover changes nothing

    # 3) A double-click keeps head 1 alone; another one brings every head back.
    page.dblclick(".head-toggle[data-head='1']")
    assert page.evaluate(MODEL, "heads") == [1]
    assert_lines_of(lines(page), weights[1, 0], [1], 2)
    checked = page.locator(".head-toggle input:checked").evaluate_all(
        "(inputs) => inputs.map((i) => Number(i.dataset.head))"
    )
    assert checked == [1]
    page.dblclick(".head-toggle[data-head='1']")
    assert page.evaluate(MODEL, "heads") == [0, 1, 2, 3]

    # 4) A click on head 0's box hides it.
    page.click(".head-toggle[data-head='0'] input")
    assert page.evaluate(MODEL, "heads") == [1, 2, 3]
    assert_lines_of(lines(page), weights[1, 0], [1, 2, 3], 2)

    # 5) Another layer: the same query's lines in that layer.
    page.select_option(".aw-layer select", "2")
    drawn(page)
    assert page.evaluate(MODEL, "layer") == 2
    assert_lines_of(lines(page), weights[2, 0], [1, 2, 3], 2)

    # 6) The token view: each token shaded by the mean weight of the heads shown.
    page.click(".aw-tab[data-view='token']")
    drawn(page, ".attnviz-widget[data-view='token'][data-drawn='true']")
    shades = page.locator(".token-strip .token").evaluate_all(
        "(chips) => chips.map((c) => Number(c.dataset.weight))"
    )
    expected = weights[2, 0, [1, 2, 3], 2].astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(shades, expected, rtol=1e-12)
    assert outside == [] and errors == []
    close_page(page)


def test_a_saved_model_view_enlarges_a_thumbnail_and_outlines_the_selection(  # type: ignore[no-untyped-def]
    browser, tmp_path: Path
) -> None:
    weights = attention((2, 1, 3, 6, 6))
    path = attnviz.model_view(weights, TOKENS).save(tmp_path / "model.html")
    page, outside, errors = open_offline(browser, path)
    drawn(page)
    grid = ".aw-grid .js-plotly-plot"
    for r in range(2):
        for c in range(3):
            cell = page.evaluate(f"document.querySelector('{grid}').cell({r}, {c})")
            np.testing.assert_array_equal(np.array(cell, dtype=np.float32), weights[r, 0, c])
    # A click on thumbnail (1, 2) enlarges it.
    tiles = page.evaluate(f"document.querySelector('{grid}').tiles")
    x, y = page.evaluate(CELL_CENTRE, [grid, 0, tiles["y"][1] + 2, tiles["x"][2] + 2, 1])
    page.mouse.click(x, y)
    page.wait_for_selector(".aw-enlarged-plot[data-layer='1'][data-head='2'] .main-svg")
    z = evaluate_json(page, "() => document.querySelector('.aw-enlarged-plot').data[0].z")
    np.testing.assert_array_equal(np.array(z, dtype=np.float32), weights[1, 0, 2])
    # A click on token 3 outlines its row in every thumbnail, its row and column enlarged.
    page.click(".token-strip .token[data-position='3']")
    assert page.evaluate(MODEL, "selected") == [3]
    page.wait_for_function(
        f"document.querySelector('{grid}').layout.shapes.some((s) => s.name === 'selected-row')"
    )
    rows = page.evaluate(
        f"document.querySelector('{grid}').layout.shapes"
        ".filter((s) => s.name === 'selected-row').map((s) => (s.y0 + s.y1) / 2)"
    )
    assert sorted(rows) == sorted(tiles["y"][r] + 3 for r in range(2) for _ in range(3))
    page.wait_for_function("document.querySelector('.aw-enlarged-plot').layout.shapes.length === 2")
    names = page.evaluate(
        "document.querySelector('.aw-enlarged-plot').layout.shapes.map((s) => s.name)"
    )
    assert sorted(names) == ["selected-column", "selected-row"]
    assert outside == [] and errors == []
    close_page(page)


@pytest.mark.slow  # a kernel process
def test_a_notebooks_html_export_draws_each_view_offline_once_plotly_is_embedded(  # type: ignore[no-untyped-def]
    browser, tmp_path: Path
) -> None:
    """nbconvert's HTML of an executed notebook shows each view's text/html (the widgets'
    state left out: with it, nbconvert would draw widgets through a CDN's manager)."""
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    weights = attention((2, 1, 3, 6, 6))
    np.save(tmp_path / "weights.npy", weights)
    cells = [
        f"import attnviz, numpy as np\nw = np.load('weights.npy')\ntokens = {TOKENS!r}",
        "attnviz.head_view(w, tokens, layer=1)",
        "attnviz.model_view(w, tokens)",
        "attnviz.model_view(w, tokens)",  # draws with the first one's Plotly.js
        "attnviz.token_view(w, tokens)",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(
        notebook,
        timeout=180,
        kernel_name="python3",
        store_widget_state=False,
        resources={"metadata": {"path": tmp_path}},
    ).execute()
    html, _ = HTMLExporter().from_notebook_node(notebook)
    assert html.count("plotly.js (attnviz: core, heatmap, bar") == 1
    path = tmp_path / "notebook.html"
    path.write_text(html, encoding="utf-8")
    page, _outside, errors = open_offline(browser, path)  # nbconvert's CDN scripts: refused
    page.wait_for_function(
        "document.querySelectorAll('.attnviz-widget[data-drawn=\"true\"]').length === 4",
        timeout=HANG_MS,
    )
    views = page.locator(".attnviz-widget").evaluate_all("(all) => all.map((v) => v.dataset.view)")
    assert views == ["head", "model", "model", "token"]
    page.locator(".line-tokens.queries .line-token-row[data-position='4']").click()
    assert_lines_of(lines(page), weights[1, 0], [0, 1, 2], 4)
    cells = page.evaluate(
        "[...document.querySelectorAll('.aw-grid .js-plotly-plot')].map((g) => g.cell(1, 2))"
    )
    for cell in cells:
        np.testing.assert_array_equal(np.array(cell, dtype=np.float32), weights[1, 0, 2])
    assert errors == []
    close_page(page)

"""Token selection and colour scales on the / page, in a real Chromium.

Every expected number is computed here from the API's own response (the page's
``window.attnviz.lastResponse``): the sums and means of the selected rows, each head's
maximum, each row's maximum, log10 of the weights.
"""

import math

import httpx2 as httpx
import pytest
import torch

from tests.support.api import merged_reference
from tests.support.browser import (
    CELL_CENTRE,
    HANG_MS,
    HEADS,
    evaluate_json,
    open_view,
    wait_for_heads,
)

pytestmark = pytest.mark.browser

SHAPES = f"""() => [...document.querySelectorAll('{HEADS}')].map(
    (div) => (div.layout.shapes || []).filter((s) => s.name && s.name.startsWith('selected-'))
        .map((s) => [s.name, s.x0, s.x1, s.y0, s.y1]))"""
STRIP_WEIGHTS = """(id) => [...document.querySelectorAll('#' + id + ' .token')].map(
    (t) => t.dataset.weight === undefined ? null : Number(t.dataset.weight))"""


def wait_selected(page, text: str) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(
        f"document.getElementById('heads').dataset.selected === '{text}'", timeout=HANG_MS
    )


def outlined(rows: int, cols: int, positions: list[int], self: bool = True) -> list[list]:
    """The outline shapes tokens.js selectionShapes gives, written out."""
    shapes: list[list] = []
    for q in positions:
        shapes.append(["selected-row", -0.5, cols - 0.5, q - 0.5, q + 0.5])
        if self:
            shapes.append(["selected-column", q - 0.5, q + 0.5, -0.5, rows - 0.5])
    return shapes


def row_sums(head: list[list[float]], rows: list[int]) -> list[float]:
    return [sum(head[i][j] for i in rows) for j in range(len(head[0]))]


def head_mean(weights: list, rows: list[int]) -> list[float]:
    """The mean over the heads of the selected rows' sums."""
    sums = [row_sums(head, rows) for head in weights]
    return [sum(col) / len(sums) for col in zip(*sums, strict=True)]


def test_selecting_tokens_outlines_rows_and_columns_in_every_head_and_shades_the_text(
    page, server_url
) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    response = evaluate_json(page, "() => window.attnviz.lastResponse")
    weights = response["weights"][0]  # sequence 0: (H, 10, 10)
    assert page.evaluate(SHAPES) == [[], []]
    assert page.evaluate(STRIP_WEIGHTS, "query-strip") == [None] * 10  # nothing selected

    page.click("#query-strip .token[data-position='3']")
    wait_selected(page, "3")
    assert page.evaluate(SHAPES) == [outlined(10, 10, [3])] * 2
    mean = head_mean(weights, [3])
    assert page.evaluate(STRIP_WEIGHTS, "query-strip") == pytest.approx(mean, abs=1e-6)
    assert page.locator("#query-strip .token[aria-selected=true]").all_text_contents() == ["39"]

    # Shift-click adds a token: both are outlined, and the strip sums their rows.
    page.click("#query-strip .token[data-position='6']", modifiers=["Shift"])
    wait_selected(page, "3,6")
    assert page.evaluate(SHAPES) == [outlined(10, 10, [3, 6])] * 2
    page.select_option("#shade-head", "1")
    summed = row_sums(weights[1], [3, 6])
    page.wait_for_function(
        f"Math.abs(Number(document.querySelector('#query-strip .token').dataset.weight)"
        f" - {summed[0]}) < 1e-6"
    )
    assert page.evaluate(STRIP_WEIGHTS, "query-strip") == pytest.approx(summed, abs=1e-6)

    # The keyboard: the arrows move the selection from the focused token; Esc clears it.
    page.focus("#query-strip .token[data-position='6']")
    page.keyboard.press("ArrowRight")
    wait_selected(page, "7")
    assert page.evaluate("document.activeElement.dataset.position") == "7"
    assert page.evaluate(SHAPES) == [outlined(10, 10, [7])] * 2
    page.keyboard.press("Escape")
    wait_selected(page, "")
    assert page.evaluate(SHAPES) == [[], []]
    assert page.errors == []


def test_a_click_on_a_map_row_or_an_axis_label_selects_that_token(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.locator(HEADS).nth(1).scroll_into_view_if_needed()
    x, y = page.evaluate(CELL_CENTRE, [HEADS, 1, 4, 2, 1])
    page.mouse.click(x, y)  # query 4, key 2 of head 1: selects query 4
    wait_selected(page, "4")
    assert page.evaluate(SHAPES) == [outlined(10, 10, [4])] * 2
    # The y axis label of row 8 (shift adds it), then the x axis label of key 1.
    page.locator(HEADS).nth(0).locator(".ytick text").nth(8).click(modifiers=["Shift"])
    wait_selected(page, "4,8")
    page.locator(HEADS).nth(0).locator(".xtick text").nth(1).click()
    wait_selected(page, "1")
    assert page.errors == []


def test_cross_attention_selects_target_queries_and_shades_the_source_keys(
    page, server_url
) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.fill("#sequences", "the cat sat on the mat")
    page.fill("#targets", "le chat")
    page.uncheck("#mask-causal")  # self-attention only
    page.click("#compute")
    page.wait_for_function("window.attnviz.lastResponse.attention === 'cross'")
    wait_for_heads(page, 2)
    response = evaluate_json(page, "() => window.attnviz.lastResponse")
    _, _, rows, cols = response["shape"]
    assert page.locator("#key-strip").is_visible()
    page.click("#query-strip .token[data-position='1']")
    wait_selected(page, "1")
    # Rows only: a target token has no column among the source keys.
    assert page.evaluate(SHAPES) == [outlined(rows, cols, [1], self=False)] * 2
    weights = response["weights"][0]
    mean = head_mean(weights, [1])
    assert page.evaluate(STRIP_WEIGHTS, "key-strip") == pytest.approx(mean, abs=1e-6)
    assert page.evaluate(STRIP_WEIGHTS, "query-strip") == [None] * rows
    assert page.errors == []


def drawn_maps(page):  # type: ignore[no-untyped-def]
    return evaluate_json(
        page,
        f"""() => [...document.querySelectorAll('{HEADS}')].map((div) => ({{
            z: div.data[0].z, zmin: div.data[0].zmin, zmax: div.data[0].zmax,
            title: div.data[0].colorbar.title.text, showscale: div.data[0].showscale}}))""",
    )


def test_colour_scales_change_the_drawn_range_as_documented(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    # 80 tokens, causal: row 0 has one weight 1.0, row 79 weights near 1/80.
    page.fill("#sequences", " ".join(f"w{i}" for i in range(80)))
    page.fill("#vocab_size", "1000")
    page.uncheck("#verify")
    page.click("#compute")
    page.wait_for_function("window.attnviz.lastResponse.shape[2] === 80")
    wait_for_heads(page, 2)
    weights = evaluate_json(page, "() => window.attnviz.lastResponse.weights[0]")

    def redraw(mode: str):  # type: ignore[no-untyped-def]
        page.evaluate("document.getElementById('heads').dataset.drawnHeads = '0'")
        page.select_option("#colour-scale", mode)
        wait_for_heads(page, 2)
        return drawn_maps(page)

    # auto above 64 queries = per row: each row divided by its own maximum.
    for mode in ("auto", "row"):
        maps = redraw(mode)
        for h, drawn in enumerate(maps):
            assert (drawn["zmin"], drawn["zmax"]) == (0, 1)
            assert "row" in drawn["title"]
            for i in (0, 40, 79):
                top = max(weights[h][i][: i + 1])
                expected = [w / top for w in weights[h][i][: i + 1]]
                assert drawn["z"][i][: i + 1] == pytest.approx(expected, rel=1e-6)
                assert drawn["z"][i][i + 1 :] == [None] * (79 - i)  # the future stays masked
    maps = redraw("log")
    for h, drawn in enumerate(maps):
        assert (drawn["zmin"], drawn["zmax"]) == (-4, 0)
        assert "log" in drawn["title"]
        row = weights[h][79]
        assert drawn["z"][79] == pytest.approx([max(-4, math.log10(w)) for w in row], rel=1e-6)
    maps = redraw("head")
    for h, drawn in enumerate(maps):
        assert drawn["z"] == [
            [w if j <= i else None for j, w in enumerate(row)] for i, row in enumerate(weights[h])
        ]
        assert drawn["zmax"] == pytest.approx(max(map(max, weights[h])))
        assert drawn["showscale"] is True  # each head its own colour bar
    maps = redraw("shared")
    top = max(max(map(max, head)) for head in weights)
    assert [m["zmax"] for m in maps] == pytest.approx([top, top])
    assert [m["showscale"] for m in maps] == [False, True]  # one colour bar for both
    assert maps[1]["title"] == "weight"
    assert page.errors == []


def test_colour_scales_colour_the_layer_thumbnails_and_the_layer_strip(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    open_view(page, "layers")
    grid = "document.querySelector('#view-layers .grid-plot')"
    raw = page.evaluate(f"() => {grid}.data.map((t) => t.z)")
    top = max(v for z in raw for row in z for v in row if v is not None)
    traces = page.evaluate(f"() => {grid}.data.map((t) => [t.zmin, t.zmax])")
    assert traces == [[0, pytest.approx(top)]] * len(raw)  # auto, short input: shared
    title = page.evaluate(f"() => {grid}.data[0].colorbar.title.text")
    assert title == "weight"

    def redraw(mode: str):  # type: ignore[no-untyped-def]
        page.evaluate("document.getElementById('view-layers').dataset.drawn = 'stale'")
        page.select_option("#colour-scale", mode)
        page.wait_for_function("document.getElementById('view-layers').dataset.drawn === 'true'")
        return page.evaluate(f"() => {grid}.data.map((t) => [t.z, t.zmin, t.zmax, t.text])")

    for z, zmin, zmax, _ in redraw("head"):
        assert z in raw and zmin == 0
        assert zmax == pytest.approx(max(v for row in z for v in row if v is not None))
    for (z, zmin, zmax, text), weights in zip(redraw("row"), raw, strict=True):
        assert (zmin, zmax) == (0, 1)
        for row, scaled, labels in zip(weights, z, text, strict=True):
            peak = max((v for v in row if v is not None), default=0)
            expected = [None if v is None else v / peak for v in row] if peak > 0 else row
            assert scaled == pytest.approx(expected)
            # The hover gives the weight itself.
            assert labels == ["" if v is None else f"{v:.3f}" for v in row]
    for (z, zmin, zmax, _), weights in zip(redraw("log"), raw, strict=True):
        assert (zmin, zmax) == (-4, 0)
        assert z[0][0] == pytest.approx(max(-4, math.log10(weights[0][0])))
    assert page.errors == []


@pytest.mark.usefixtures("pretrained_extra")
def test_colour_scale_colours_the_models_layer_strip(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    page.wait_for_function(
        "document.getElementById('view-model').dataset.drawn === 'true'", timeout=HANG_MS
    )
    page.evaluate("document.getElementById('view-averages').dataset.drawn = 'stale'")
    page.click(".tabs button[data-view=averages]")
    page.wait_for_function("document.getElementById('view-averages').dataset.drawn === 'true'")
    means = evaluate_json(page, "() => window.attnvizModels.lastResponse.head_mean")
    strip = "document.getElementById('layer-strip')"
    page.evaluate("document.getElementById('view-averages').dataset.drawn = 'stale'")
    page.select_option("#colour-scale", "shared")
    page.wait_for_function("document.getElementById('view-averages').dataset.drawn === 'true'")
    top = max(v for layer in means for row in layer[0] for v in row)
    assert page.evaluate(f"() => {strip}.data.map((t) => t.zmax)") == pytest.approx([top] * 6)
    assert page.evaluate(f"() => {strip}.data.map((t) => t.z)") == [m[0] for m in means]
    assert page.errors == []


def test_cell_numbers_are_drawn_at_a_readable_size_or_not_at_all(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    sizes = """(sel) => [...document.querySelectorAll(sel + ' .heatmaplayer text')]
        .map((t) => parseFloat(getComputedStyle(t).fontSize))"""
    heads = page.evaluate(sizes, HEADS)
    assert heads and min(heads) >= 11  # the Heads view's 10 x 10 maps are large enough
    open_view(page, "step")
    step = page.evaluate(sizes, "#view-step .stage-plot")
    assert all(size >= 11 for size in step)  # small maps: no 5 px numbers
    assert page.errors == []


# The /models page (all-MiniLM-L6-v2): every map of the model, layer and averages views.

MODEL_SHAPES = """(selector) => [...document.querySelectorAll(selector)].map(
    (div) => (div.layout.shapes || []).filter((s) => s.name && s.name.startsWith('selected-'))
        .map((s) => [s.name, s.x0, s.x1, s.y0, s.y1]))"""


def wait_model_selected(page, view: str, text: str) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(
        f"document.getElementById('view-{view}').dataset.drawn === 'true'"
        f" && document.getElementById('view-{view}').dataset.selected === '{text}'",
        timeout=HANG_MS,
    )


@pytest.mark.usefixtures("pretrained_extra")
def test_models_page_selection_outlines_every_thumbnail_and_head_and_shades_the_text(
    page, server_url
) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    page.wait_for_function(
        "document.getElementById('view-model').dataset.drawn === 'true'", timeout=HANG_MS
    )
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    attentions = response["attentions"]  # (N, 1, H, L, L), not pooled at this length
    length = len(response["tokens"][0])
    page.click("#query-strip .token[data-position='2']")
    wait_model_selected(page, "model", "2")
    # Every tile of the 6 x 12 grid: its row 2, where div.tiles puts it (rows only: columns
    # too would clutter 72 thumbnails; the enlarged maps have both).
    tiles = page.evaluate("() => document.getElementById('model-grid').tiles")
    expected = []
    for r in range(6):
        for c in range(12):
            x, y = tiles["x"][c], tiles["y"][r]
            expected.append(["selected-row", x - 0.5, x + length - 0.5, y + 1.5, y + 2.5])
    assert page.evaluate(MODEL_SHAPES, "#model-grid") == [expected]
    # The strip: layer 0's head mean of row 2.
    mean = head_mean(attentions[0][0], [2])
    assert page.evaluate(STRIP_WEIGHTS, "query-strip") == pytest.approx(mean, abs=1e-6)

    # The layer view of layer 4: its enlarged head outlined; shift-click on it adds a row.
    page.click("[role=tab][data-view=layer]")
    wait_model_selected(page, "layer", "2")
    page.evaluate("document.getElementById('view-layer').dataset.drawn = 'stale'")
    page.select_option("#layer-index", "4")
    wait_model_selected(page, "layer", "2")
    enlarged = "#view-layer .enlarged-plot"
    assert page.evaluate(MODEL_SHAPES, enlarged) == [outlined(length, length, [2])]
    page.locator(enlarged).scroll_into_view_if_needed()
    x, y = page.evaluate(CELL_CENTRE, [enlarged, 0, 6, 0, 1])
    page.keyboard.down("Shift")
    page.mouse.click(x, y)
    page.keyboard.up("Shift")
    wait_model_selected(page, "layer", "2,6")
    assert page.evaluate(MODEL_SHAPES, enlarged) == [outlined(length, length, [2, 6])]
    page.select_option("#shade-head", "5")
    summed = row_sums(attentions[4][0][5], [2, 6])
    page.wait_for_function(
        f"Math.abs(Number(document.querySelector('#query-strip .token').dataset.weight)"
        f" - {summed[0]}) < 1e-6"
    )
    assert page.evaluate(STRIP_WEIGHTS, "query-strip") == pytest.approx(summed, abs=1e-6)
    # The averages view keeps the selection: its head-mean map is outlined too.
    page.click("[role=tab][data-view=averages]")
    wait_model_selected(page, "averages", "2,6")
    shapes = page.evaluate(MODEL_SHAPES, "#view-averages [data-map=head-mean]")
    assert shapes == [outlined(length, length, [2, 6])]
    assert page.errors == []


def test_line_view_draws_the_selected_query_lines_with_the_api_weights(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    weights = evaluate_json(page, "() => window.attnviz.lastResponse.weights[0]")
    page.click("#query-strip .token[data-position='4']")
    wait_selected(page, "4")
    open_view(page, "lines")
    lines = """() => [...document.querySelectorAll('#view-lines line')].map((l) => [
        Number(l.dataset.head), Number(l.dataset.query), Number(l.dataset.key),
        Number(l.dataset.weight)])"""
    drawn = page.evaluate(lines)
    # Query 4 (causal: keys 0-4), every head: one line per key with a weight.
    expected = [[h, 4, k, weights[h][4][k]] for h in range(2) for k in range(10)]
    assert drawn == [line for line in expected if line[3] > 0]
    assert {k for _, _, k, _ in drawn} == {0, 1, 2, 3, 4}
    # Switching head 1 off leaves head 0's lines.
    page.uncheck("#view-lines .head-toggle input[data-head='1']")
    assert {h for h, _, _, _ in page.evaluate(lines)} == {0}
    # A click on a query on the left selects it (shift adds it).
    page.click("#view-lines .line-tokens.queries text[data-position='7']", modifiers=["Shift"])
    page.wait_for_function(
        "new Set([...document.querySelectorAll('#view-lines line')].map(l => l.dataset.query))"
        ".size === 2"
    )
    assert {q for _, q, _, _ in page.evaluate(lines)} == {4, 7}
    assert page.errors == []


def test_neuron_view_score_is_q_dot_k_over_sqrt_d_k(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.click("#query-strip .token[data-position='5']")
    wait_selected(page, "5")
    open_view(page, "neuron")
    page.evaluate("document.getElementById('view-neuron').dataset.drawn = 'stale'")
    page.select_option("#head-index", "1")  # shown on the views of one head
    page.wait_for_function("document.getElementById('view-neuron').dataset.drawn === 'true'")
    rows = page.evaluate(
        """() => [...document.querySelectorAll('#view-neuron tr[data-vector]')].map((r) => ({
            vector: JSON.parse(r.dataset.vector), score: Number(r.dataset.score),
            scaled: Number(r.dataset.scaled), weight: Number(r.dataset.weight),
            masked: r.classList.contains('masked')}))"""
    )
    query, keys = rows[0]["vector"], rows[1:]
    d_k = len(query)
    response = evaluate_json(page, "() => window.attnviz.lastResponse")
    assert d_k == response["d_k"] == 4 and len(keys) == 10
    for j, key in enumerate(keys):
        dot = sum(a * b for a, b in zip(query, key["vector"], strict=True))
        assert key["score"] == pytest.approx(dot, abs=1e-6)
        assert key["scaled"] == pytest.approx(dot / math.sqrt(d_k), abs=1e-6)
        assert key["masked"] == (j > 5 or j >= 8)  # causal, and sequence 0's two <pad>
        assert key["weight"] == pytest.approx(response["weights"][0][1][5][j], abs=1e-6)
    # The softmax of the unmasked scaled scores is the weights (tutorial 001).
    kept = [key["scaled"] for key in keys if not key["masked"]]
    total = sum(math.exp(s) for s in kept)
    assert [key["weight"] for key in keys if not key["masked"]] == pytest.approx(
        [math.exp(s) / total for s in kept], abs=1e-6
    )
    assert page.errors == []


@pytest.mark.usefixtures("pretrained_extra")
def test_models_page_merges_pieces_into_words_as_documented_and_steps_through_a_neuron(
    page, server_url, minilm
) -> None:  # type: ignore[no-untyped-def]
    text = "Unbelievably, transformers tokenize words."
    page.goto(server_url + "/models")
    page.wait_for_function(
        "document.getElementById('view-model').dataset.drawn === 'true'", timeout=HANG_MS
    )
    page.fill("#texts", text)
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.click("#compute")
    page.wait_for_function("document.getElementById('view-model').dataset.drawn === 'true'")
    page.click("[role=tab][data-view=layer]")
    page.wait_for_function("document.getElementById('view-layer').dataset.drawn === 'true'")
    page.evaluate("document.getElementById('view-layer').dataset.drawn = 'stale'")
    page.check("#merge-words")
    page.wait_for_function("document.getElementById('view-layer').dataset.drawn === 'true'")
    drawn = page.evaluate("() => document.getElementById('layer-grid').data.map((t) => t.z)")
    words = page.evaluate("() => window.attnvizModels.lastResponse.tokens[0]")
    assert "unbelievably" in words and "tokenize" in words
    # The token maps of layer 0 from the API, merged here with the tokenizer's own words.
    pieces = httpx.post(
        server_url + "/api/v1/models/attention",
        json={"texts": [text], "sequence_index": 0, "layer_index": 0},
        timeout=60,
    ).json()
    numbers = [
        i if w is None else 1000 + w for i, w in enumerate(minilm.tokenizer(text).word_ids())
    ]
    expected = merged_reference(torch.tensor(pieces["attentions"][0][0]), numbers).tolist()
    assert len(drawn) == 12 and len(drawn[0]) == len(words) < len(numbers)
    for head, reference in zip(drawn, expected, strict=True):
        for row, ref in zip(head, reference, strict=True):
            assert row == pytest.approx(ref, abs=1e-5)

    # The neuron view of layer 0, head 3, query 2: the score is q . k times 1/sqrt(32).
    # The pieces drawn again first: a click on the words' strip would pick word 2.
    page.evaluate("document.getElementById('view-layer').dataset.drawn = 'stale'")
    page.uncheck("#merge-words")
    page.wait_for_function("document.getElementById('view-layer').dataset.drawn === 'true'")
    assert page.evaluate("() => window.attnvizModels.lastResponse.tokens[0].length") == len(
        minilm.tokenizer(text).word_ids()
    )
    page.click("#query-strip .token[data-position='2']")
    page.evaluate("document.getElementById('view-neuron').dataset.drawn = 'stale'")
    page.click("[role=tab][data-view=neuron]")
    page.wait_for_function("document.getElementById('view-neuron').dataset.drawn === 'true'")
    page.evaluate("document.getElementById('view-neuron').dataset.drawn = 'stale'")
    page.select_option("#neuron-head", "3")
    page.wait_for_function("document.getElementById('view-neuron').dataset.drawn === 'true'")
    rows = page.evaluate(
        """() => [...document.querySelectorAll('#view-neuron tr[data-vector]')].map((r) => ({
            vector: JSON.parse(r.dataset.vector), score: Number(r.dataset.score),
            scaled: Number(r.dataset.scaled), weight: Number(r.dataset.weight)}))"""
    )
    query, keys = rows[0]["vector"], rows[1:]
    assert len(query) == 32 and len(keys) == len(numbers)
    for key in keys:
        dot = sum(a * b for a, b in zip(query, key["vector"], strict=True))
        assert key["score"] == pytest.approx(dot, abs=1e-4)
        assert key["scaled"] == pytest.approx(dot / math.sqrt(32), abs=1e-4)
    weights = pieces["attentions"][0][0][3][2]
    assert [key["weight"] for key in keys] == pytest.approx(weights, abs=1e-5)
    assert page.errors == []


def test_compare_draws_two_sequences_and_their_difference(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    response = evaluate_json(page, "() => window.attnviz.lastResponse")
    open_view(page, "compare")
    page.evaluate("document.getElementById('view-compare').dataset.drawn = 'stale'")
    page.select_option("#compare-sequence", "2")
    page.wait_for_function("document.getElementById('view-compare').dataset.drawn === 'true'")
    drawn = page.evaluate(
        "() => [...document.querySelectorAll('#view-compare .compare-plot')].map(d => d.data[0].z)"
    )
    a, b = response["weights"][0][0], response["weights"][2][0]  # head 0 of sequences 0 and 2
    mask_a, mask_b = response["attn_mask"][0], response["attn_mask"][2]
    for i in range(10):
        for j in range(10):
            both = mask_a[i][j] and mask_b[i][j]
            expected = a[i][j] - b[i][j] if both else None
            assert drawn[2][i][j] == (pytest.approx(expected, abs=1e-7) if both else None)
    assert page.errors == []


@pytest.mark.usefixtures("pretrained_extra")
def test_models_compare_draws_the_difference_of_two_sentences(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    page.wait_for_function(
        "document.getElementById('view-model').dataset.drawn === 'true'", timeout=HANG_MS
    )
    texts = ["The cat sat on the mat.", "The dog sat on the rug."]
    page.fill("#texts", "\n".join(texts))
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.click("#compute")
    page.wait_for_function("document.getElementById('view-model').dataset.drawn === 'true'")
    page.click("[role=tab][data-view=compare]")
    page.wait_for_function("document.getElementById('view-compare').dataset.drawn === 'true'")
    diff = page.evaluate(
        "() => document.querySelector('#view-compare [data-map=difference]').data[0].z"
    )
    means = [
        httpx.post(
            server_url + "/api/v1/models/attention",
            json={"texts": texts, "sequence_index": b, "layer_index": 0},
            timeout=60,
        ).json()["head_mean"][0][0]
        for b in (0, 1)
    ]
    expected = [[x - y for x, y in zip(*rows, strict=True)] for rows in zip(*means, strict=True)]
    assert len(diff) == len(expected) == 9
    for row, ref in zip(diff, expected, strict=True):
        assert row == pytest.approx(ref, abs=1e-6)
    assert page.errors == []

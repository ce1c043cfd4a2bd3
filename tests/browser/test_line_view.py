"""The line view (tokenviews.js lineView, BertViz's head view) in a real Chromium.

Head colours (distinct, readable on both themes), hovering and double-clicking a head,
hovering a token, the lines drawn with nothing selected, and the stroke of each line.
Every expected line is computed here from the weights the page drew from: the API's JSON
(``window.attnviz.lastResponse`` on /, ``window.attnvizModels.lastResponse`` on /models).
"""

from __future__ import annotations

import itertools
import math

import pytest

from tests.support.browser import (
    HANG_MS,
    compute_heads,
    evaluate_json,
    open_view,
    wait_drawn,
    wait_for_heads,
)

pytestmark = pytest.mark.browser

WORDS = "the cat sat on the mat because it was tired"

# Every line drawn: its data-* numbers, its stroke, and the opacity it is shown with (its
# own and its ancestors' CSS opacity: a faded line is a line of another head under hover).
LINES = """() => [...document.querySelectorAll('#view-lines line')].map((l) => {
    let shown = 1;
    for (let e = l; e.tagName !== 'svg'; e = e.parentElement) {
        shown *= Number(getComputedStyle(e).opacity);
    }
    return {head: Number(l.dataset.head), query: Number(l.dataset.query),
            key: Number(l.dataset.key), weight: Number(l.dataset.weight),
            stroke: l.getAttribute('stroke'), width: Number(l.getAttribute('stroke-width')),
            opacity: Number(l.getAttribute('stroke-opacity')), shown};
})"""
SVG_STATE = "() => ({...document.querySelector('#view-lines svg.line-view').dataset})"
CHECKED = """() => [...document.querySelectorAll('#view-lines .head-toggle input')]
    .filter((i) => i.checked).map((i) => Number(i.dataset.head))"""


def compute(page, num_heads: int, d_model: int, text: str = WORDS) -> None:  # type: ignore[no-untyped-def]
    """Compute ``text`` on / with ``num_heads`` heads (the default preset's causal mask)."""
    page.fill("#sequences", text)
    page.fill("#d_model", str(d_model))
    page.fill("#num_heads", str(num_heads))
    compute_heads(page, num_heads)


def page_weights(page) -> list[list[list[float | None]]]:  # type: ignore[no-untyped-def]
    """Sequence 0's maps as the line view gets them (H x L_q x L_k; a masked 0 is None)."""
    response = evaluate_json(page, "() => window.attnviz.lastResponse")
    mask = response["attn_mask"][0]  # L_q x L_k, True = attend

    def shown(q: int, k: int, w: float) -> float | None:  # figure.js visibleWeights
        return w if mask[q][k] or w != 0 else None

    return [
        [[shown(q, k, w) for k, w in enumerate(row)] for q, row in enumerate(m)]
        for m in response["weights"][0]
    ]


def strongest(maps: list[list[list[float | None]]]) -> list[tuple[int, int, int]]:
    """The rule with nothing selected: each (head, query) row's largest positive weight(s)."""
    lines = []
    for h, m in enumerate(maps):
        for q, row in enumerate(m):
            top = max((w for w in row if w is not None), default=0)
            lines += [(h, q, k) for k, w in enumerate(row) if top > 0 and w == top]
    return lines


def select_in_view(page, q: int) -> None:  # type: ignore[no-untyped-def]
    """Click query ``q`` in the line view, move off it (a hovered token draws its own lines)
    and wait until the view is drawn again with the selection's lines."""
    page.click(f"#view-lines .line-tokens.queries text[data-position='{q}']")
    page.mouse.move(0, 0)
    page.wait_for_function(
        f"document.querySelector('#view-lines svg.line-view')?.dataset.lines === 'selected'"
        f" && document.querySelector('#view-lines text.selected')?.dataset.position === '{q}'"
    )


def drawn(page) -> list[tuple[int, int, int]]:  # type: ignore[no-untyped-def]
    return sorted((line["head"], line["query"], line["key"]) for line in page.evaluate(LINES))


# Colour arithmetic: WCAG 2.1 relative luminance and contrast, and OKLab (Ottosson 2020).


def rgb(colour: str) -> tuple[float, float, float]:
    """sRGB in [0, 1] of "#rrggbb" or "rgb(r, g, b)"."""
    if colour.startswith("#"):
        return tuple(int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))  # type: ignore[return-value]
    parts = colour[colour.index("(") + 1 : colour.index(")")].split(",")
    return tuple(int(p) / 255 for p in parts[:3])  # type: ignore[return-value]


def linear(c: float) -> float:
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def contrast(a: str, b: str) -> float:
    def luminance(colour: str) -> float:
        r, g, b_ = (linear(c) for c in rgb(colour))
        return 0.2126 * r + 0.7152 * g + 0.0722 * b_

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def oklab(colour: str) -> tuple[float, float, float]:
    r, g, b = (linear(c) for c in rgb(colour))
    l_ = math.cbrt(0.4122214708 * r + 0.5363325363 * g + 0.0514459929 * b)
    m_ = math.cbrt(0.2119034982 * r + 0.6806995451 * g + 0.1073969566 * b)
    s_ = math.cbrt(0.0883024619 * r + 0.2817188376 * g + 0.6299787005 * b)
    return (
        0.2104542553 * l_ + 0.7936177850 * m_ - 0.0040720468 * s_,
        1.9779984951 * l_ - 2.4285922050 * m_ + 0.4505937099 * s_,
        0.0259040371 * l_ + 0.7827717662 * m_ - 0.8086757660 * s_,
    )


def closest_pair(colours: list[str]) -> float:
    """The smallest OKLab distance between two of ``colours``."""
    return min(math.dist(oklab(a), oklab(b)) for a, b in itertools.combinations(colours, 2))


def test_head_palette_is_distinct_and_readable_on_both_themes(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    palettes = page.evaluate(
        """async () => {
            const { headColors } = await import('/static/js/tokenviews.js');
            return Array.from({ length: 64 }, (_, n) => headColors(n + 1));
        }"""
    )
    panel = "() => getComputedStyle(document.documentElement).getPropertyValue('--panel').trim()"
    light = page.evaluate(panel)
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate(panel)
    assert light != dark
    for count, colours in enumerate(palettes, start=1):
        assert len(colours) == count
        assert len(set(colours)) == count, colours  # pairwise distinct
        for colour in colours:  # WCAG 1.4.11: 3:1 for graphics, on both themes
            assert contrast(colour, light) >= 3, (count, colour, light)
            assert contrast(colour, dark) >= 3, (count, colour, dark)
        # Up to 12 heads: one qualitative palette, each head keeping its colour.
        if count <= 12:
            assert colours == palettes[11][:count]
            if count > 1:
                assert closest_pair(colours) >= 0.125
        # Beyond: hues around the circle, still clearly apart side by side (an OKLab
        # difference of about 0.02 is just noticeable).
        elif count <= 24:
            assert closest_pair(colours) >= (0.08 if count <= 16 else 0.05), count
    assert page.errors == []


@pytest.mark.parametrize(("num_heads", "d_model"), [(12, 48), (16, 64)])
def test_each_head_is_drawn_in_its_own_colour(page, server_url, num_heads, d_model) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    compute(page, num_heads, d_model)
    open_view(page, "lines")
    strokes: dict[int, set[str]] = {}
    for line in page.evaluate(LINES):
        strokes.setdefault(line["head"], set()).add(line["stroke"])
    assert sorted(strokes) == list(range(num_heads))  # every head has lines
    assert all(len(colours) == 1 for colours in strokes.values())
    colours = [next(iter(strokes[h])) for h in range(num_heads)]
    assert len(set(colours)) == num_heads
    # Each head's swatch in the legend is its lines' colour.
    swatches = page.evaluate(
        """() => [...document.querySelectorAll('#view-lines .head-swatch')]
            .map((s) => getComputedStyle(s).backgroundColor)"""
    )
    assert [rgb(s) for s in swatches] == [rgb(c) for c in colours]
    assert page.errors == []


def test_nothing_selected_draws_the_strongest_keys_strokes_follow_weights(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    compute(page, 8, 32)
    assert page.evaluate("() => document.getElementById('heads').dataset.selected") in ("", None)
    open_view(page, "lines")
    maps = page_weights(page)
    assert page.evaluate(SVG_STATE)["lines"] == "strongest"
    expected = strongest(maps)
    assert drawn(page) == sorted(expected)
    assert len(expected) >= 8 * 10  # at least one line per (head, query)
    for line in page.evaluate(LINES):
        assert line["weight"] == maps[line["head"]][line["query"]][line["key"]]

    # A selected query: every key of its row, each head's strongest line the thickest and
    # the most opaque, widths and opacities in the order of the weights.
    select_in_view(page, 6)
    lines = page.evaluate(LINES)
    assert sorted((line["head"], line["key"]) for line in lines) == sorted(
        (h, k) for h in range(8) for k, w in enumerate(maps[h][6]) if w is not None and w > 0
    )
    for h in range(8):
        row = sorted((line for line in lines if line["head"] == h), key=lambda line: line["weight"])
        assert row[-1]["weight"] == max(w for w in maps[h][6] if w is not None)
        assert row[-1]["width"] == max(line["width"] for line in row)
        for weaker, stronger in itertools.pairwise(row):
            if stronger["weight"] > weaker["weight"]:
                assert stronger["width"] > weaker["width"]
                assert stronger["opacity"] > weaker["opacity"]
    assert page.errors == []


def test_hovering_a_head_fades_the_others_and_double_click_shows_it_alone(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    compute(page, 8, 32)
    open_view(page, "lines")
    everything = drawn(page)
    assert {h for h, _, _ in everything} == set(range(8))
    assert all(line["shown"] == 1 for line in page.evaluate(LINES))

    # Hover head 3's swatch: only its lines at full opacity, the others faded.
    page.hover("#view-lines .head-toggle[data-head='3'] .head-swatch")
    lines = page.evaluate(LINES)
    assert drawn(page) == everything
    assert {line["head"] for line in lines if line["shown"] == 1} == {3}
    assert max(line["shown"] for line in lines if line["head"] != 3) < 0.2
    assert page.evaluate(SVG_STATE)["focusHead"] == "3"
    page.mouse.move(0, 0)
    assert all(line["shown"] == 1 for line in page.evaluate(LINES))

    # Double-click: head 3 alone (its lines only, its checkbox alone checked) ...
    page.dblclick("#view-lines .head-toggle[data-head='3'] .head-swatch")
    page.mouse.move(0, 0)
    assert drawn(page) == [line for line in everything if line[0] == 3]
    assert page.evaluate(CHECKED) == [3]
    # ... kept when the view is drawn again (the caller's `visible` Set holds it) ...
    select_in_view(page, 2)
    assert {line["head"] for line in page.evaluate(LINES)} == {3}
    assert page.evaluate(CHECKED) == [3]
    # ... and a second double-click shows every head again.
    page.dblclick("#view-lines .head-toggle[data-head='3'] .head-swatch")
    page.mouse.move(0, 0)
    assert page.evaluate(CHECKED) == list(range(8))
    assert {line["head"] for line in page.evaluate(LINES)} == set(range(8))
    # The checkboxes still switch single heads off.
    page.uncheck("#view-lines .head-toggle input[data-head='5']")
    page.mouse.move(0, 0)
    assert {line["head"] for line in page.evaluate(LINES)} == set(range(8)) - {5}
    assert page.errors == []


def test_hovering_a_token_draws_only_its_lines_and_keeps_the_selection(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    maps = page_weights(page)  # the default preset: 2 heads, causal and padding masks
    page.click("#query-strip .token[data-position='4']")
    page.wait_for_function("document.getElementById('heads').dataset.selected === '4'")
    open_view(page, "lines")
    selected = drawn(page)
    assert {q for _, q, _ in selected} == {4}

    def positive(h: int, q: int, k: int) -> bool:
        w = maps[h][q][k]
        return w is not None and w > 0

    heads, rows, cols = len(maps), len(maps[0]), len(maps[0][0])
    # A query on the left: its lines to every key.
    page.hover("#view-lines .line-tokens.queries .line-token-row[data-position='7']")
    assert page.evaluate(SVG_STATE)["lines"] == "query"
    assert drawn(page) == [
        (h, 7, k) for h in range(heads) for k in range(cols) if positive(h, 7, k)
    ]
    # A key on the right: every query's line to it.
    page.hover("#view-lines .line-tokens.keys .line-token-row[data-position='2']")
    assert page.evaluate(SVG_STATE)["lines"] == "key"
    expected = sorted((h, q, 2) for h in range(heads) for q in range(rows) if positive(h, q, 2))
    assert drawn(page) == expected
    assert len({q for _, q, _ in expected}) > 1
    # Off the tokens: the selection's lines again; the selection never changed.
    page.mouse.move(0, 0)
    assert drawn(page) == selected
    assert page.evaluate("() => document.getElementById('heads').dataset.selected") == "4"
    # Shift-click query 7, the pointer resting on it: both selected queries' lines, 7's
    # at full opacity, 4's faded below them.
    page.click("#view-lines .line-tokens.queries text[data-position='7']", modifiers=["Shift"])
    page.wait_for_function("document.getElementById('heads').dataset.selected === '4,7'")
    page.wait_for_function(
        "document.querySelector('#view-lines svg.line-view')?.dataset.lines === 'query'"
    )
    lines = page.evaluate(LINES)
    assert {line["query"] for line in lines} == {4, 7}
    assert all((line["shown"] == 1) == (line["query"] == 7) for line in lines)
    assert page.errors == []


def test_tokens_are_shown_as_display_token_writes_them(page, server_url) -> None:  # type: ignore[no-untyped-def]
    # lineView and neuronView called directly with a byte-level BPE token (Ġ: a space, Ċ:
    # a newline), a token already shown (␣the: unchanged) and a SentencePiece byte.
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    shown = page.evaluate(
        """async () => {
            const { lineView, neuronView } = await import('/static/js/tokenviews.js');
            const tokens = ['Ġthe', '␣the', 'Ċ', '<0x0A>', 'ĠcafÃ©'];
            const box = document.createElement('div');
            document.body.append(box);
            const row = [0.4, 0.4, 0.2, null, 0];
            lineView(box, {
                queries: tokens, keys: tokens, maps: [tokens.map(() => row)],
                selected: new Set(), visible: new Set([0]), onSelect: () => {},
            });
            const text = (side) => [...box.querySelectorAll(`.line-tokens.${side} text`)]
                .map((t) => t.textContent);
            const result = { queries: text('queries'), keys: text('keys'),
                lines: box.querySelectorAll('line').length };
            neuronView(box, {
                queryLabel: 'Ġthe', keyLabels: tokens, query: [1, 0],
                keys: tokens.map(() => [0, 1]), scaling: 1, masked: tokens.map(() => false),
                weights: tokens.map(() => 0.2), title: 'test',
            });
            result.neuron = [...box.querySelectorAll('tr[data-vector] th')]
                .map((t) => t.textContent);
            return result;
        }"""
    )
    readable = ["␣the", "␣the", "↵", "↵", "␣café"]
    assert shown["queries"] == shown["keys"] == readable
    assert shown["neuron"] == ["q: ␣the", *readable]
    # Nothing selected: a tie for the strongest key draws both lines of each row.
    assert shown["lines"] == 2 * len(readable)
    assert page.errors == []


@pytest.mark.usefixtures("pretrained_extra")
def test_models_page_line_view_colours_and_strongest_lines(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    page.wait_for_function(  # the first visit may wait for the model to load
        "document.getElementById('view-model').dataset.drawn === 'true'", timeout=HANG_MS
    )
    page.click("[role=tab][data-view=lines]")
    wait_drawn(page, "lines")
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    layer = int(page.evaluate("() => document.getElementById('layer-index').value"))
    maps = response["attentions"][layer][0]  # H x L x L, the model's layer as drawn
    assert len(maps) == response["num_heads"] == 12
    assert drawn(page) == sorted(strongest(maps))
    strokes = {line["head"]: line["stroke"] for line in page.evaluate(LINES)}
    assert len(strokes) == 12 and len(set(strokes.values())) == 12
    labels = page.evaluate(
        "() => [...document.querySelectorAll('#view-lines .line-tokens.queries text')]"
        ".map((t) => t.textContent)"
    )
    assert labels[0] == "[CLS]" and labels[-1] == "[SEP]"
    assert page.errors == []

"""/models as one coherent explorer (issue 32), in a real Chromium against a real server.

Results never silently belong to another input (out of date after an edit, recomputed after
a model switch, emptied after a refusal); a method's result appears in view; decoders get
their own defaults (the last token, per-row colour, the attention sink explained); the
layer view shows every head at once; Compare asks for a second input; no raw tokenizer
marker reaches the screen; nothing scrolls sideways at 1366 and 390 px.
"""

from __future__ import annotations

import json

import pytest

from tests.support.browser import (
    HANG_MS,
    HeldResponses,
    close_page,
    evaluate_json,
    new_page,
    redraw,
    type_and_compute,
    wait_drawn,
    wait_model_option,
)

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

SMOLLM2 = "SmolLM2-135M-Instruct"
LOAD_TIMEOUT_MS = 120_000  # SmolLM2's first load on a machine dequantizes its GGUF file
RAW_MARKERS = ("Ġ", "Ċ", "ĉ", "▁")
"""Byte-level BPE's and SentencePiece's markers: shown as ␣, ↵ and ⇥, never raw."""

STALE = "document.querySelector('.results').dataset.stale"


def wait_smollm2(page) -> None:  # type: ignore[no-untyped-def]
    wait_model_option(page, SMOLLM2, LOAD_TIMEOUT_MS)


def switch_to_smollm2(page, prompt: str, new_tokens: int = 0) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """Pick SmolLM2 (which computes at once), then compute `prompt` with `new_tokens`."""
    wait_smollm2(page)
    page.select_option("#model", SMOLLM2)
    page.wait_for_function(
        f"window.attnvizModels.lastResponse?.model === '{SMOLLM2}'", timeout=LOAD_TIMEOUT_MS
    )
    page.uncheck("#chat")
    page.fill("#max-new-tokens", str(new_tokens))
    type_and_compute(page, prompt)
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    assert response["model"] == SMOLLM2
    return response  # type: ignore[no-any-return]


def in_viewport(page, selector: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether the element's top half is on screen (its top inside the viewport)."""
    return page.evaluate(  # type: ignore[no-any-return]
        """(selector) => {
            const box = document.querySelector(selector).getBoundingClientRect();
            return box.top >= 0 && box.top < window.innerHeight && box.height > 0;
        }""",
        selector,
    )


def no_sideways_scroll(page) -> bool:  # type: ignore[no-untyped-def]
    return page.evaluate(  # type: ignore[no-any-return]
        "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    )


# Every string a drawn Plotly figure shows or hovers: tick labels, axis titles, titles,
# annotations, and the traces' x, y, text, hovertext and customdata.
FIGURE_TEXTS = """() => {
    const texts = [];
    const walk = (v) => {
        if (typeof v === "string") texts.push(v);
        else if (Array.isArray(v)) v.forEach(walk);
    };
    for (const div of document.querySelectorAll(".results .js-plotly-plot")) {
        if (div.offsetParent === null) continue;  // a hidden view's
        for (const trace of div.data || []) {
            for (const key of ["x", "y", "text", "hovertext", "customdata", "hovertemplate"]) {
                walk(trace[key]);
            }
        }
        const layout = div.layout || {};
        for (const [key, axis] of Object.entries(layout)) {
            if (/^[xy]axis/.test(key) && axis) { walk(axis.ticktext); walk(axis.title?.text); }
        }
        walk(layout.title?.text);
        (layout.annotations || []).forEach((a) => walk(a.text));
    }
    return texts;
}"""


def test_a_text_edit_marks_the_results_out_of_date_and_update_recomputes(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    assert page.evaluate(STALE) == "false" and page.locator("#stale-note").is_hidden()
    before = page.evaluate("() => window.attnvizModels.lastResponse.tokens[0]")

    page.fill("#texts", "Birds fly south in winter.")
    assert page.evaluate(STALE) == "true"
    assert page.locator("#stale-note").is_visible()
    # Dimmed: the grid's body is faded while out of date.
    opacity = page.evaluate(
        "Number(getComputedStyle(document.querySelector('#view-model .view-body')).opacity)"
    )
    assert opacity < 0.6
    # Nothing was recomputed by the edit alone.
    assert page.evaluate("() => window.attnvizModels.lastResponse.tokens[0]") == before

    redraw(page, "model", lambda: page.click("#refresh"))
    after = page.evaluate("() => window.attnvizModels.lastResponse.tokens[0]")
    assert after[1:4] == ["birds", "fly", "south"]
    assert page.evaluate(STALE) == "false" and page.locator("#stale-note").is_hidden()
    strip = page.locator("#query-strip .token").all_text_contents()
    assert [t.strip() for t in strip] == after

    # Undoing the edit by hand makes the results current again (the form equals them).
    page.fill("#texts", "Birds fly south in winter!")
    assert page.evaluate(STALE) == "true"
    page.fill("#texts", "Birds fly south in winter.")
    assert page.evaluate(STALE) == "false"
    assert page.errors == []


def test_a_model_switch_recomputes_and_a_refusal_leaves_nothing_behind(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    wait_smollm2(page)
    page.fill("#texts", "The moon orbits the earth.")
    # While the new model's answer is on its way, MiniLM's grid is dimmed (not shown as
    # if it were SmolLM2's).
    held = HeldResponses(page, "**/api/v1/models/attention/layers")
    page.select_option("#model", SMOLLM2)
    page.wait_for_function("document.querySelector('.results').classList.contains('running')")
    held.wait_for(1)  # the model switch's request
    opacity = page.evaluate(
        "Number(getComputedStyle(document.querySelector('#view-model .view-body')).opacity)"
    )
    assert opacity < 0.6
    held.release()
    # The switch computes at once, with the text typed (no Compute pressed).
    page.wait_for_function(
        f"window.attnvizModels.lastResponse?.model === '{SMOLLM2}'"
        " && document.getElementById('view-model').dataset.drawn === 'true'",
        timeout=LOAD_TIMEOUT_MS,
    )
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    assert "moon" in "".join(response["tokens"][0])
    assert page.evaluate(STALE) == "false"
    assert SMOLLM2 in page.locator("#summary").text_content()
    assert page.locator("#texts-label").text_content() == "Prompts"

    # A request the API refuses (too many new tokens): the error names the page's control
    # (not the API's field, max_new_tokens), and no view, strip or summary of the earlier
    # run stays on screen.
    limit = int(page.get_attribute("#max-new-tokens", "max"))
    page.fill("#max-new-tokens", str(limit + 1))
    page.click("#compute")
    page.wait_for_selector("#error:not([hidden])", timeout=HANG_MS)
    error = page.locator("#error").text_content()
    assert error.startswith("Generate N new tokens: ") and "max_new_tokens" not in error
    page.wait_for_function("document.querySelectorAll('.results .js-plotly-plot').length === 0")
    assert page.locator("#token-box").is_hidden()
    assert page.locator("#summary").text_content() == ""
    assert page.evaluate(STALE) == "false"  # nothing shown, so nothing out of date
    assert page.errors == []


def test_a_method_result_appears_in_view_after_picking_it(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    switch_to_smollm2(page, "The capital of France is Paris. The capital of Italy is")
    page.evaluate("window.scrollTo(0, 0)")

    # Head importance: the layers x heads grid, above the thumbnails, its top on screen.
    redraw(page, "model", lambda: page.select_option("#method", "head_importance"))
    page.wait_for_selector("[data-map=head-importance] .main-svg")
    assert in_viewport(page, "[data-map=head-importance]")
    importance = page.evaluate(
        "document.querySelector('[data-map=head-importance]').data[0].z.length"
    )
    assert importance == 30  # a row per layer

    # Gradient rollout, picked in the model view: the Averages view opens with its map
    # first among the figures, brought into sight.
    page.evaluate("window.scrollTo(0, 0)")
    redraw(page, "averages", lambda: page.select_option("#method", "grad_rollout"))
    assert page.evaluate("document.querySelector('.tabs [aria-selected=true]').dataset.view") == (
        "averages"
    )
    page.wait_for_selector("[data-map=grad-rollout] .main-svg")
    page.wait_for_timeout(200)
    assert in_viewport(page, "[data-map=grad-rollout]")
    first = page.evaluate("document.querySelector('#view-averages .heads .head-plot').dataset.map")
    assert first == "grad-rollout"
    assert page.errors == []


def test_decoder_defaults_last_token_per_row_colour_and_the_sink(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    response = switch_to_smollm2(page, "The cat sat on the mat because it was tired")
    tokens = response["tokens"][0]

    # Auto colour is per row for a decoder (its row 0 holds a single 1.0).
    redraw(page, "layer", lambda: page.click(".tabs button[data-view=layer]"))
    title = page.evaluate("document.getElementById('layer-grid').data[0].colorbar.title.text")
    assert "row" in title

    # The token explorer opens on the last token, not on token 0.
    redraw(page, "generation", lambda: page.click(".tabs button[data-view=generation]"))
    page.wait_for_function("window.attnvizModels.lastQuery !== null")
    chosen = page.evaluate(
        "document.querySelector('.token-chips [aria-pressed=true]').dataset.index"
    )
    assert int(chosen) == len(tokens) - 1

    # The averages explain the first-token sink with its share, computed here from the
    # response's all-layer mean: the mean over queries i >= 1 of A[i, 0] / sum_j A[i, j].
    redraw(page, "averages", lambda: page.click(".tabs button[data-view=averages]"))
    overview = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    mean = overview["layer_mean"][0]
    share = sum(row[0] / sum(v or 0 for v in row) for row in mean[1:]) / (len(mean) - 1)
    assert share >= 0.5  # SmolLM2 parks most attention on the first token
    note = page.locator(".sink-note")
    assert note.is_visible()
    assert float(note.get_attribute("data-share")) == pytest.approx(share, abs=1e-3)
    assert f"{100 * share:.0f}%" in note.text_content()
    assert "Xiao et al. 2023" in note.text_content()

    # Leaving the first token out: rollout's first row and column masked (gray, the shape
    # kept so that rows still mean tokens), each other row renormalised over the rest (the
    # brute force here from the response's rollout).
    rollout = overview["rollout"][0]
    redraw(page, "averages", lambda: page.check("#exclude-sink"))
    # Per-row colour: z is each weight over its row's largest.
    z = evaluate_json(page, "() => document.querySelector('[data-map=rollout]').data[0].z")
    assert len(z) == len(rollout) and all(v is None for v in z[0])
    assert all(row[0] is None for row in z)
    for got, row in zip(z[1:], rollout[1:], strict=True):
        rest = [v or 0 for v in row[1:]]
        total = sum(rest)
        weights = [v / total if total > 0 else 0 for v in rest]
        top = max(weights)
        want = [w / top if top > 0 else 0 for w in weights]
        assert [v or 0 for v in got[1:]] == pytest.approx(want, abs=1e-4)
    assert page.is_checked("#exclude-sink")
    assert page.errors == []


def test_the_layer_view_shows_every_head_at_once_on_one_colour_bar(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    redraw(page, "layer", lambda: page.click(".tabs button[data-view=layer]"))
    grid = page.evaluate(
        """() => {
            const div = document.getElementById('layer-grid');
            const box = div.getBoundingClientRect();
            return {traces: div.data.length, scales: div.data.filter((t) => t.showscale).length,
                    height: box.height, width: box.width, maps: div.data.map((t) => t.z)};
        }"""
    )
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    heads = response["num_heads"]
    assert grid["traces"] == heads and grid["scales"] == 1
    assert grid["height"] < 950  # all 12 heads of the layer on one screen (was 2,888 px)
    # The maps are the layer's heads (per-head colour: z is the weight itself).
    tokens = len(response["tokens"][0])
    assert all(len(z) == tokens and len(z[0]) == tokens for z in grid["maps"])
    # A click on head 5 enlarges it below, in sight.
    point = page.evaluate(
        """() => {
            const div = document.getElementById('layer-grid');
            const xa = div._fullLayout.xaxis6, ya = div._fullLayout.yaxis6;
            const box = div.querySelector('.main-svg').getBoundingClientRect();
            return [box.left + xa._offset + xa._length / 2, box.top + ya._offset + ya._length / 2];
        }"""
    )
    page.mouse.click(*point)
    page.wait_for_function("document.querySelector('#view-layer .enlarged').dataset.head === '5'")
    page.wait_for_timeout(300)
    assert in_viewport(page, "#view-layer .enlarged-plot")
    assert page.errors == []


def test_compare_asks_for_a_second_input_and_no_raw_marker_shows(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    prompt = "The capital of France is\nParis, and the café is open"
    response = switch_to_smollm2(page, prompt.split("\n")[0])
    assert any(marker in "".join(response["tokens"][0]) for marker in RAW_MARKERS)

    # One input: Compare asks for a second one instead of comparing it with itself.
    redraw(page, "compare", lambda: page.click(".tabs button[data-view=compare]"))
    assert page.locator(".compare-ask").is_visible()
    assert page.locator("#view-compare .js-plotly-plot").count() == 0
    page.click(".compare-ask button")  # a new line to type the second input on, focused
    assert page.evaluate("document.activeElement.id") == "texts"
    assert page.input_value("#texts").endswith("\n")

    # Two inputs (the second with a newline inside a token's reach and an accent).
    page.fill("#texts", "The capital of France is Paris\nThe capital of Italy is Rome")
    redraw(page, "compare", lambda: page.click("#compute"))
    titles = page.evaluate(
        "[...document.querySelectorAll('#view-compare .js-plotly-plot')]"
        ".map((d) => d.layout.title.text)"
    )
    assert titles[0].startswith("A: sentence 0") and titles[1].startswith("B: sentence 1")

    page.fill("#texts", "Line one\n\tindented, café\nthe end")
    redraw(page, "model", lambda: page.click(".tabs button[data-view=model]"))
    redraw(page, "model", lambda: page.click("#compute"))
    for view in ("layer", "averages", "compare", "lines", "neuron", "generation", "model"):
        redraw(page, view, lambda view=view: page.click(f".tabs button[data-view={view}]"))
        page.wait_for_timeout(200)
        shown = page.locator(".results").inner_text() + json.dumps(page.evaluate(FIGURE_TEXTS))
        found = [marker for marker in RAW_MARKERS if marker in shown]
        assert found == [], f"raw markers {found} in the {view} view"
    assert page.errors == []


@pytest.mark.parametrize("width,height", [(1366, 768), (390, 844)])
def test_no_view_scrolls_sideways(browser, server_url, width: int, height: int) -> None:  # type: ignore[no-untyped-def]
    page = new_page(browser, width, height)
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    switch_to_smollm2(page, "A long enough prompt to fill the grid with thirty layers")
    for view in ("layer", "averages", "compare", "lines", "neuron", "generation", "model"):
        redraw(page, view, lambda view=view: page.click(f".tabs button[data-view={view}]"))
        page.wait_for_timeout(200)
        assert no_sideways_scroll(page), f"the {view} view scrolls sideways at {width} px"
    if width < 600:
        # The model view's thumbnails keep a readable width: the grid scrolls in its box.
        widths = page.evaluate(
            """() => {
                const div = document.getElementById('model-grid');
                const t = div.tiles, xa = div._fullLayout.xaxis;
                return [xa.l2p(t.width) - xa.l2p(0), div.getBoundingClientRect().width];
            }"""
        )
        assert widths[0] >= 30, f"thumbnails {widths[0]:.0f} px wide"
    assert page.errors == []
    close_page(page)


def test_a_picked_generated_token_travels_in_the_link(browser, page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    response = switch_to_smollm2(page, "Name three colours:", new_tokens=4)
    generation = response["generation"]
    picked = generation["prompt_length"] + len(generation["tokens"]) - 2  # a generated one
    redraw(page, "generation", lambda: page.click(".tabs button[data-view=generation]"))
    page.click(f".token-chips .chip[data-index='{picked}']")
    page.wait_for_function(f"window.location.hash.includes('query={picked}')")
    link = page.url

    other = new_page(browser, 1366, 768)
    other.goto(link)
    other.wait_for_function(
        "document.getElementById('view-generation').dataset.drawn === 'true'",
        timeout=LOAD_TIMEOUT_MS,
    )
    chosen = other.evaluate(
        "document.querySelector('.token-chips [aria-pressed=true]').dataset.index"
    )
    assert int(chosen) == picked
    assert other.errors == [] and page.errors == []
    close_page(other)

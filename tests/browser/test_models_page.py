"""The pretrained-model page (/models) in a real Chromium against a real server."""

import base64
import json
import math
from array import array
from urllib.parse import urlsplit

import httpx2 as httpx
import pytest
from attnviz.devtools import live_process

from tests.support.browser import (
    GRID,
    evaluate_json,
    grid_point,
    redraw,
    type_and_compute,
    wait_drawn,
    wait_model_option,
)

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

SENTENCE = "Attention shows what a trained model looks at, token by token."
ATTENTION_URL = "/api/v1/models/attention"
STREAM_URL = "/api/v1/models/attention/layers"


# The model view's grid is one tiled heatmap (GRID, tests/support/browser.py).
GRID_SHAPE = (
    f"() => ({{traces: {GRID}.data.length, rows: {GRID}.tiles.rows, cols: {GRID}.tiles.cols}})"
)


def click_thumbnail(page, r: int, c: int) -> None:  # type: ignore[no-untyped-def]
    """A real mouse click on the middle of thumbnail (r, c) of the model view's grid."""
    row, col = grid_point(page, r, c)
    page.locator("#model-grid").scroll_into_view_if_needed()
    x, y = page.evaluate(
        f"""([row, col]) => {{
            const div = {GRID};
            const xa = div._fullLayout.xaxis, ya = div._fullLayout.yaxis;
            const box = div.querySelector(".main-svg").getBoundingClientRect();
            return [box.left + xa._offset + xa.l2p(col), box.top + ya._offset + ya.l2p(row)];
        }}""",
        [row, col],
    )
    page.mouse.click(x, y)


def test_every_tab_is_a_view_and_every_view_a_tab(page, server_url) -> None:  # type: ignore[no-untyped-def]
    """The tabs' data-view values (templates/models.html) are the keys of models.js's VIEWS,
    in order: a new view is one entry there and one tab here."""
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    tabs = page.eval_on_selector_all(
        ".tabs button[data-view]", "els => els.map(b => b.dataset.view)"
    )
    assert tabs == page.evaluate("window.attnvizModels.views")
    assert len(tabs) == len(set(tabs)) >= 8
    sections = page.eval_on_selector_all("section[id^=view-]", "all => all.map(s => s.id)")
    assert sorted(sections) == sorted(f"view-{name}" for name in tabs)


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

    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    tokens = response["tokens"][0]
    length = len(tokens)
    assert response["shape"] == [6, 1, 12, length, length]
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "attention" in tokens
    # One Plotly figure holds all 72 thumbnails (no WebGL: heatmaps are SVG images).
    grids = page.locator("#view-model .grid-plot")
    assert grids.count() == 1
    # ... as tiles of one heatmap trace.
    assert page.evaluate(GRID_SHAPE) == {"traces": 1, "rows": 6, "cols": 12}
    assert page.locator("#view-model canvas").count() == 0
    # Thumbnail (layer 3, head 7) is the API's matrix, drawn where the tiles say.
    assert page.evaluate(f"() => {GRID}.cell(3, 7)") == response["attentions"][3][0][7]
    row, col = grid_point(page, 3, 7, 2, 1)
    drawn = page.evaluate(
        f"([row, col]) => [{GRID}.data[0].customdata[row][col], {GRID}.data[0].z[row][col]]",
        [row, col],
    )
    weight = response["attentions"][3][0][7][2][1]
    top = max(v for line in response["attentions"][3][0][7] for v in line)
    assert drawn[0] == weight and drawn[1] == pytest.approx(weight / top)
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
    click_thumbnail(page, 2, 5)
    page.wait_for_function("document.querySelector('#view-model .enlarged').dataset.layer === '2'")
    assert page.locator("#view-model .enlarged .gtitle").text_content() == "Layer 2, head 5"


def test_each_sentence_runs_alone_and_special_tokens_can_be_hidden(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    texts = ["Short one.", "A noticeably longer second sentence, to pad the first."]
    page.fill("#texts", "\n".join(texts))
    redraw(page, "model", lambda: page.click("#compute"))
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    assert response["tokens"] == [["[CLS]", "short", "one", ".", "[SEP]"]]  # no [PAD]
    assert "run alone (no padding)" in page.locator("#display-note").text_content()
    redraw(page, "model", lambda: page.select_option("#sequence-index", "1"))
    assert page.evaluate("() => window.attnvizModels.lastResponse.sequence_index") == 1
    redraw(page, "model", lambda: page.select_option("#sequence-index", "0"))

    redraw(page, "model", lambda: page.check("#hide-special"))
    assert "renormalised" in page.locator("#display-note").text_content()
    plot = "document.querySelector('#view-model .enlarged .js-plotly-plot')"
    labels = page.evaluate(f"() => {plot}.layout.xaxis.ticktext")
    assert labels == ["short", "one", "."]
    drawn = evaluate_json(page, f"() => {plot}.data[0].z")
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


def test_the_page_says_how_many_inputs_a_text_makes_and_a_pasted_document_is_one(
    page, server_url
) -> None:  # type: ignore[no-untyped-def]
    """Lines are inputs, and the page says so under the box, offering to keep them as one
    text; a pasted document (paragraphs: a blank line between lines) is one input whole
    (issue 53: 17 paragraphs became 17 prompts, nothing said)."""
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    said = page.locator("#texts-inputs")
    inputs = "() => document.querySelectorAll('#sequence-index option').length"
    page.fill("#texts", "The cat sat.\nThe dog ran.\nA bird sang.")
    assert said.inner_text() == "3 lines: 3 sentences, one per line"
    redraw(page, "model", lambda: page.click("#compute"))
    assert page.evaluate(inputs) == 3
    page.check("#one-text")
    assert said.inner_text() == "one sentence of 3 lines"
    redraw(page, "model", lambda: page.click("#compute"))
    assert page.evaluate(inputs) == 1
    tokens = page.evaluate("() => window.attnvizModels.lastResponse.tokens[0]")
    assert "bird" in tokens and "cat" in tokens
    page.uncheck("#one-text")
    document = "The first paragraph.\nIt goes on here.\n\nThe second one.\n\n\nA third."
    page.fill("#texts", document)
    assert said.inner_text() == "one sentence of 3 paragraphs (a blank line keeps a text whole)"
    assert page.locator("#one-text-control").is_hidden()
    redraw(page, "model", lambda: page.click("#compute"))
    assert page.evaluate(inputs) == 1
    assert "third" in page.evaluate("() => window.attnvizModels.lastResponse.tokens[0]")
    page.fill("#texts", "One line only.")
    assert said.inner_text() == "" and page.locator("#one-text-control").is_hidden()


def attention_requests(page) -> list[tuple[str, dict]]:  # type: ignore[no-untyped-def]
    """The page's requests to POST /attention and /attention/layers from now on: the last
    part of the path ("attention" or "layers") and the body, in order."""
    requests: list[tuple[str, dict]] = []
    page.on(
        "request",
        lambda request: (
            requests.append((urlsplit(request.url).path.rsplit("/", 1)[1], request.post_data_json))
            if urlsplit(request.url).path in (ATTENTION_URL, STREAM_URL)
            else None
        ),
    )
    return requests


def test_long_input_gets_pooled_thumbnails_and_full_resolution_on_click(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    requests = attention_requests(page)
    type_and_compute(page, " ".join(["attention"] * 198))  # 200 tokens
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    assert response["downsample"] == {
        "method": "max",
        "factor": 4,
        "key_factor": 4,
        "full_length": 200,
        "full_key_length": 200,
    }
    assert response["shape"] == [6, 1, 12, 50, 50]
    assert page.evaluate(GRID_SHAPE) == {"traces": 1, "rows": 6, "cols": 12}
    assert len(page.evaluate(f"() => {GRID}.cell(0, 0)")) == 50
    assert "pooled to blocks of 4 × 4" in page.locator("#display-note").text_content()
    # The enlarged map and the layer view are fetched at full resolution.
    enlarged = evaluate_json(
        page, "() => document.querySelector('#view-model .enlarged .js-plotly-plot').data[0].z"
    )
    assert len(enlarged) == 200 and len(enlarged[0]) == 200
    # The grid streams in layer by layer; only that head is fetched for the enlarged map,
    # not its whole layer, through the same stream (its one layer line: no batch axis).
    heads = [(url, b.get("layer_index"), b.get("head_index")) for url, b in requests]
    assert heads == [("layers", None, None), ("layers", 0, 0)]
    click_thumbnail(page, 1, 3)
    page.wait_for_function("document.querySelector('#view-model .enlarged').dataset.head === '3'")
    assert requests[-1][0] == "layers"
    assert (requests[-1][1]["layer_index"], requests[-1][1]["head_index"]) == (1, 3)
    # The layer view opens on the layer of the thumbnail clicked, at full resolution.
    redraw(page, "layer", lambda: page.click(".tabs button[data-view=layer]"))
    heads = page.evaluate("() => document.getElementById('layer-grid').data.map((t) => t.z.length)")
    assert heads == [200] * 12
    assert page.evaluate("document.getElementById('layer-grid').layout.title.text") == (
        "Layer 1: 12 heads"
    )
    assert page.errors == []


def test_layer_view_and_averages_and_rollout(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    # The layer view: all 12 heads of the layer in one figure of small maps (one colour
    # bar), each the API's matrix, and head 0 enlarged below with its tokens.
    redraw(page, "layer", lambda: page.click(".tabs button[data-view=layer]"))
    assert page.evaluate("document.getElementById('layer-grid').data.length") == 12
    redraw(page, "layer", lambda: page.select_option("#layer-index", "4"))
    grid = page.evaluate(
        """() => {
            const div = document.getElementById('layer-grid');
            const names = Object.keys(div.layout).filter((k) => /^xaxis\\d*$/.test(k))
                .sort((a, b) => Number(a.slice(5) || 1) - Number(b.slice(5) || 1));
            return {title: div.layout.title.text, z: div.data.map((t) => t.z),
                    heads: names.map((k) => div.layout[k].title.text)};
        }"""
    )
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    assert grid["title"] == "Layer 4: 12 heads"
    assert grid["heads"] == [f"H{h}" for h in range(12)]
    assert grid["z"] == response["attentions"][4][0]
    assert page.locator("#view-layer .enlarged-plot .gtitle").text_content() == "Layer 4, head 0"
    timings = page.evaluate("() => window.attnvizModels.viewTimings")
    assert timings["view"] == "layer"
    assert 0 <= timings["drawMs"] <= timings["allDrawnMs"]
    # Leaving the view and coming back draws the layer picked meanwhile.
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.select_option("#layer-index", "2")
    page.click(".tabs button[data-view=model]")
    wait_drawn(page, "model")
    redraw(page, "layer", lambda: page.click(".tabs button[data-view=layer]"))
    assert page.evaluate("document.getElementById('layer-grid').layout.title.text") == (
        "Layer 2: 12 heads"
    )
    page.wait_for_selector("#progress", state="hidden")
    redraw(page, "layer", lambda: page.select_option("#layer-index", "4"))

    redraw(page, "averages", lambda: page.click(".tabs button[data-view=averages]"))
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
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
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    assert response["tokens"][0].count("[SEP]") == 2
    assert 1 in response["token_type_ids"][0]

    page.fill("#texts", "word " * 600)
    page.click("#compute")
    page.wait_for_selector("#error:not([hidden])")
    # Named by the form's control and line, not the API's field (texts[0]).
    assert page.locator("#error").text_content().startswith("Sentences (line 1): ")
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


# The packaged decoder LLM. Its first load on a machine dequantizes it (about 30 s, then
# it comes from a cache in under a second): the tests wait up to two minutes for it.
SMOLLM2 = "SmolLM2-135M-Instruct"
LOAD_TIMEOUT_MS = 120_000
SMOLLM2_OPTION = f"#model option[value='{SMOLLM2}']"


def wait_ready(page, name: str = SMOLLM2) -> None:  # type: ignore[no-untyped-def]
    wait_model_option(page, name, LOAD_TIMEOUT_MS)


def wait_drawn_long(page, view: str) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(
        f"document.getElementById('view-{view}').dataset.drawn === 'true'",
        timeout=LOAD_TIMEOUT_MS,
    )


def test_smollm2_chat_prompt_draws_the_30_by_9_grid_and_its_generation(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    # MiniLM (an encoder): sentence pairs, no chat template, no generation.
    assert page.locator("#texts-label").text_content() == "Sentences"
    assert page.locator("#text-pairs").is_visible()
    assert page.locator("#chat").is_hidden() and page.locator("#max-new-tokens").is_hidden()
    assert "[CLS], [SEP]" in page.locator("#special-examples").text_content()

    wait_ready(page)
    page.select_option("#model", SMOLLM2)
    description = page.locator("#model-description").text_content()
    assert "decoder, llama" in description and "30 layers × 9 heads" in description
    assert "3 key/value heads (grouped-query: 3 query heads each)" in description
    assert page.locator("#texts-label").text_content() == "Prompts"
    assert page.locator("#text-pairs").is_hidden()
    assert page.locator("#chat").is_enabled() and page.is_checked("#chat")
    assert page.input_value("#max-new-tokens") == "8"
    assert page.input_value("#temperature") == "0"
    assert page.locator(".tabs button[data-view=generation]").text_content() == "Generation"

    page.fill("#texts", "What is the capital of France?")
    page.fill("#max-new-tokens", "4")
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.click("#compute")
    wait_drawn_long(page, "model")

    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    generation = response["generation"]
    tokens = response["tokens"][0]
    length = len(tokens)
    assert response["family"] == "decoder" and response["num_key_value_heads"] == 3
    assert tokens[0] == "<|im_start|>"  # the chat template wrapped the prompt
    assert 1 <= len(generation["tokens"]) <= 4
    assert length == generation["prompt_length"] + len(generation["tokens"])
    assert tokens[generation["prompt_length"] :] == generation["tokens"]
    assert response["shape"] == [30, 1, 9, length, length]
    # One figure of 30 x 9 thumbnails, the heads in 3 key/value groups.
    grid = page.evaluate(f"() => ({{shape: ({GRID_SHAPE})(), dataset: {{...{GRID}.dataset}}}})")
    assert grid["shape"] == {"traces": 1, "rows": 30, "cols": 9}
    assert grid["dataset"] == {
        "rows": "30",
        "cols": "9",
        "colGroup": "3",
        "kvHeads": "3",
        "scale": "row",  # auto for a decoder: per row (its row 0 is a single 1.0)
    }
    assert page.evaluate(f"() => {GRID}.cell(4, 5)") == response["attentions"][4][0][5]
    row, col = grid_point(page, 4, 5, 3, 0)
    hover = page.evaluate(f"([r, c]) => {GRID}.data[0].hovertext[r][c]", [row, col])
    assert hover.startswith("layer 4, head 5 · key/value head 1 (shared by heads 3–5)<br>Query")
    labels = page.locator("#model-grid .annotation-text").all_text_contents()
    assert labels == [f"key/value head {g}" for g in range(3)]
    assert "<|im_start|>" in page.locator("#special-examples").text_content()
    assert page.locator("#view-model .enlarged .gtitle").text_content() == (
        "Layer 0, head 0 · kv head 0"
    )
    # The link carries the decoder's options.
    page.wait_for_selector("html[data-link='written']")
    linked = page.evaluate(
        "async () => { const raw = new URL(location.href).searchParams.get('request');"
        " const b64 = raw.replace(/-/g, '+').replace(/_/g, '/');"
        " const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));"
        " const stream = new Blob([bytes]).stream()"
        ".pipeThrough(new DecompressionStream('deflate-raw'));"
        " return JSON.parse(await new Response(stream).text()); }"
    )
    assert linked["model"] == SMOLLM2 and linked["chat"] is True
    assert linked["max_new_tokens"] == 4 and linked["temperature"] == 0

    # Generation: the tokens as buttons, the generated ones marked; the prompt's last
    # token is explored first (its row chose the first generated token).
    page.evaluate("document.getElementById('view-generation').dataset.drawn = 'stale'")
    page.click(".tabs button[data-view=generation]")
    wait_drawn_long(page, "generation")
    chips = page.locator("#view-generation .chip")
    assert chips.count() == length
    generated = page.locator("#view-generation .chip.generated")
    assert generated.count() == len(generation["tokens"])
    assert page.locator("#view-generation .chip.special").count() == sum(
        response["special_tokens_mask"][0]
    )
    assert "tested to 1e-5" in page.locator("#view-generation .causal-note").text_content()
    first = generation["prompt_length"] - 1
    assert page.get_attribute(f"#view-generation .chip >> nth={first}", "aria-pressed") == "true"
    rows = page.evaluate(
        "() => { const d = document.getElementById('query-rows');"
        " return {rows: d.data[0].z.length, cols: d.data[0].z[0].length,"
        " y: d.layout.yaxis.ticktext.slice(0, 2)}; }"
    )
    assert rows == {"rows": 270, "cols": first + 1, "y": ["L0 H0", "L1 H0"]}
    # Greedy: the first generated token is the top candidate, highlighted.
    table = page.locator("#view-generation .next-table tbody tr")
    assert table.count() == 5
    assert page.locator("#view-generation .next-table tr.current").count() == 1
    assert table.first.get_attribute("class") == "current"

    # A generated token, chosen with the keyboard: its row over every earlier token.
    target = generation["prompt_length"] + 1 if len(generation["tokens"]) > 1 else first
    page.evaluate("document.getElementById('view-generation').dataset.drawn = 'stale'")
    chips.nth(target).focus()
    page.keyboard.press("Enter")
    wait_drawn_long(page, "generation")
    query = evaluate_json(page, "() => window.attnvizModels.lastQuery")
    assert query["query_index"] == target
    drawn = evaluate_json(page, "() => document.getElementById('query-rows').data[0].z")
    assert len(drawn) == 30 * 9 and {len(row) for row in drawn} == {target + 1}
    rows_api = query["query_attentions"]
    assert drawn[9 * 7 + 4] == rows_api[7][4][: target + 1]
    assert all(value == 0 for value in rows_api[7][4][target + 1 :])  # causal
    assert math.isclose(sum(rows_api[7][4]), 1.0, abs_tol=1e-4)
    assert page.evaluate("document.activeElement.dataset.index") == str(target)
    assert page.errors == []


SIZES = (
    "family",
    "architecture",
    "blocks",
    "num_layers",
    "num_heads",
    "num_key_value_heads",
    "d_model",
    "d_ff",
    "vocab_size",
    "max_tokens",
    "num_parameters",
    "chat_template",
    "can_generate",
    "load_s",
)
"""What GET /api/v1/models leaves null until a model is ready."""


def patched_listing(route, change) -> None:  # type: ignore[no-untyped-def]
    """Answer GET /api/v1/models with the server's list, SmolLM2's entry changed."""
    response = route.fetch()
    listing = response.json()
    for model in listing["models"]:
        if model["name"] == SMOLLM2 and change is not None:
            for key in SIZES:
                model[key] = None
            model.update(change)
    listing["loading"] = any(m["state"] == "loading" for m in listing["models"])
    route.fulfill(response=response, json=listing)


def test_a_model_still_loading_is_shown_and_computed_once_ready(page, server_url) -> None:  # type: ignore[no-untyped-def]
    # The server's real list, but SmolLM2 still loading (its requests answered 503 as the
    # server does then) until `loading` is cleared; the first list says it is ready, so
    # that the page's first request meets a 503.
    loading = {"on": True, "lists": 0, "refused": 0}

    def listing(route) -> None:  # type: ignore[no-untyped-def]
        loading["lists"] += 1
        still = loading["on"] and loading["lists"] > 1
        patched_listing(route, {"state": "loading"} if still else None)

    def attention(route) -> None:  # type: ignore[no-untyped-def]
        if loading["on"] and route.request.post_data_json.get("model") == SMOLLM2:
            loading["refused"] += 1
            route.fulfill(
                status=503,
                headers={"Retry-After": "1"},
                json={
                    "detail": [
                        {
                            "loc": ["body", "model"],
                            "msg": f"model '{SMOLLM2}' is still loading (3 s so far); "
                            "try again shortly",
                            "type": "loading",
                        }
                    ]
                },
            )
        else:
            route.continue_()

    page.route("**/api/v1/models", listing)
    page.route("**/api/v1/models/attention", attention)
    page.route("**/api/v1/models/attention/layers", attention)  # the grid's stream
    # Whether the error box ever showed: a wait for a model is not an error.
    page.add_init_script(
        """document.addEventListener('DOMContentLoaded', () => {
            const box = document.getElementById('error');
            window.errorSeen = [];
            new MutationObserver(() => { if (!box.hidden) window.errorSeen.push(box.textContent); })
                .observe(box, {attributes: true, childList: true, characterData: true});
        });"""
    )
    request = {"model": SMOLLM2, "texts": ["Say hello."], "chat": True, "max_new_tokens": 2}
    page.goto(f"{server_url}/models?request={json.dumps(request)}#view=model")
    page.wait_for_function(
        "document.getElementById('summary').textContent.includes('is loading')",
        timeout=LOAD_TIMEOUT_MS,
    )
    assert page.locator("#summary").text_content() == (
        f"{SMOLLM2} is loading; the view appears when it is ready."
    )
    option = page.locator(SMOLLM2_OPTION)
    assert option.text_content() == f"{SMOLLM2} (loading…)"
    assert option.is_disabled()
    assert page.input_value("#model") == SMOLLM2
    assert "Loading…" in page.locator("#model-description").text_content()
    assert loading["refused"] >= 1
    page.wait_for_timeout(2_000)  # polls, and no request while it loads
    refused = loading["refused"]
    lists = loading["lists"]
    page.wait_for_timeout(1_600)
    assert loading["refused"] == refused and loading["lists"] > lists
    assert page.locator("#error").is_hidden()

    loading["on"] = False
    wait_ready(page)
    assert option.text_content() == SMOLLM2
    wait_drawn_long(page, "model")
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    assert response["model"] == SMOLLM2
    assert response["tokens"][0][0] == "<|im_start|>"  # the link's chat option held
    assert len(response["generation"]["tokens"]) <= 2
    assert page.is_checked("#chat")
    assert page.evaluate("window.errorSeen") == []
    assert page.errors == []


def test_a_model_that_failed_to_load_says_why(page, server_url) -> None:  # type: ignore[no-untyped-def]
    failed = {"state": "failed", "error": "no such file: smollm2.gguf"}
    page.route("**/api/v1/models", lambda route: patched_listing(route, failed))
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    option = page.locator(SMOLLM2_OPTION)
    assert option.text_content() == f"{SMOLLM2} (failed)"
    assert option.is_disabled()
    page.evaluate(
        f"""() => {{
            const select = document.getElementById('model');
            select.value = '{SMOLLM2}';
            select.dispatchEvent(new Event('change'));
        }}"""
    )
    assert "Failed to load: no such file: smollm2.gguf" in (
        page.locator("#model-description").text_content()
    )
    page.click("#compute")
    page.wait_for_selector("#error:not([hidden])")
    assert "no such file: smollm2.gguf" in page.locator("#error").text_content()
    assert page.errors == []


# What #view-model's data-first-layer and data-drawn and the layer progress (shown or not,
# aria-valuenow, aria-valuemax, its text) went through, each with performance.now().
RECORDER = """document.addEventListener('DOMContentLoaded', () => {
    window.seen = [];
    const view = document.getElementById('view-model');
    const box = document.getElementById('layer-progress');
    const bar = document.getElementById('layer-progress-bar');
    const label = document.getElementById('layer-progress-label');
    new MutationObserver((records) => {
        for (const r of records) {
            const value = r.target.getAttribute(r.attributeName);
            window.seen.push([performance.now(), r.attributeName, value]);
            if (r.attributeName === 'data-first-layer' && value === 'true') {
                // The stand-in's canvases, and the distinct colours of the top and the
                // bottom tenth of the first one (a row of thumbnails is a thirtieth).
                const canvases = [...view.querySelectorAll('.grid-preview canvas')];
                const c = canvases[0];
                const colours = (y0, y1) => {
                    const d = c.getContext('2d').getImageData(0, y0, c.width, y1 - y0).data;
                    const seen = new Set();
                    for (let i = 0; i < d.length; i += 4) {
                        seen.add(d[i] << 16 | d[i + 1] << 8 | d[i + 2]);
                    }
                    return seen.size;
                };
                const tenth = Math.floor(c.height / 10);
                window.seen.push([performance.now(), 'stand-in', canvases.length,
                    colours(0, tenth), colours(c.height - tenth, c.height)]);
            }
        }
    }).observe(view, {attributes: true, attributeFilter: ['data-drawn', 'data-first-layer']});
    new MutationObserver(() => window.seen.push([performance.now(), 'progress', !box.hidden,
        bar.getAttribute('aria-valuenow'), bar.getAttribute('aria-valuemax'), label.textContent]))
        .observe(box, {attributes: true, childList: true, characterData: true, subtree: true});
});"""
# The stream paced as a slow server would send it: the overview's lines up to layer 0's pass
# at once, the rest once #view-model says layer 0's row is painted (30 s at most). Without
# it, a fast server (or a browser starved of CPU beside it) gets every line in before the
# first frame, and "layer 0 drawn before the last layer came" would depend on the machine.
PACED_STREAM = """(() => {
    const plain = window.fetch;
    window.fetch = async (url, options) => {
        const response = await plain(url, options);
        if (!String(url).endsWith('/attention/layers') || !response.ok) return response;
        const reader = response.body.getReader();
        const encoder = new TextEncoder();
        const decoder = new TextDecoder();
        const painted = () => new Promise((resolve) => {
            const until = performance.now() + 30000;
            const look = () => {
                const view = document.getElementById('view-model');
                if (view.dataset.firstLayer === 'true' || performance.now() > until) resolve();
                else setTimeout(look, 20);
            };
            look();
        });
        let text = '';
        let held = false;
        const body = new ReadableStream({
            async pull(controller) {
                for (;;) {  // a pull that enqueues nothing would not be called again
                    const { done, value } = await reader.read();
                    if (done) {
                        if (text) controller.enqueue(encoder.encode(text));
                        controller.close();
                        return;
                    }
                    text += decoder.decode(value, { stream: true });
                    if (held) {
                        controller.enqueue(encoder.encode(text));
                        text = '';
                        return;
                    }
                    const first = text.search(/"type":\\s*"layer"/);
                    const end = first < 0 ? -1 : text.indexOf('\\n', first);
                    if (end < 0) continue;
                    controller.enqueue(encoder.encode(text.slice(0, end + 1)));
                    text = text.slice(end + 1);
                    held = true;
                    await painted();
                    return;
                }
            },
        });
        return new Response(body, { status: response.status, headers: response.headers });
    };
})();"""
# About 500 tokens: SmolLM2's 30 layers stream in over a few seconds, thumbnails pooled.
LONG_PROMPT = " ".join(
    f"Sentence {i} says that every head weighs the earlier tokens." for i in range(45)
)


def map_of(spec: dict, index: int) -> list[list[float | None]]:
    """The index-th P x P map of a base64 float32 array (..., P, P), NaN as None."""
    assert spec["dtype"] == "f4"
    rows, cols = spec["shape"][-2:]
    values = array("f", base64.b64decode(spec["bdata"]))
    first = index * rows * cols
    return [
        [None if math.isnan(v) else v for v in values[first + i * cols : first + (i + 1) * cols]]
        for i in range(rows)
    ]


def test_smollm2_grid_streams_in_layer_by_layer_with_its_progress(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.add_init_script(RECORDER)
    page.add_init_script(PACED_STREAM)
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    wait_ready(page)
    # The switch computes SmolLM2's default prompt: drawn before the input measured below.
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.select_option("#model", SMOLLM2)
    wait_drawn_long(page, "model")
    page.uncheck("#chat")
    page.fill("#max-new-tokens", "0")
    page.fill("#texts", LONG_PROMPT)
    requests = attention_requests(page)
    failed: list[str] = []
    page.on("requestfailed", lambda request: failed.append(request.url))
    page.evaluate("window.seen = []")
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.click("#compute")
    wait_drawn_long(page, "model")

    # The grid came through the stream, then the enlarged head alone (layer 0, head 0).
    assert [(url, b.get("layer_index"), b.get("head_index")) for url, b in requests] == [
        ("layers", None, None),
        ("layers", 0, 0),
    ]
    assert failed == []  # the stream was read to its end, not cancelled
    body = requests[0][1]
    assert body["display_size"] == 64 and body["encoding"] == "base64_float32"
    assert body["model"] == SMOLLM2 and body["chat"] is False and body["max_new_tokens"] == 0

    seen = page.evaluate("window.seen")
    first = next(t for t, *change in seen if change == ["data-first-layer", "true"])
    drawn = next(t for t, *change in seen if change == ["data-drawn", "true"])
    progress = [change[2:] for change in seen if change[1] == "progress"]
    last_layer = next(t for t, *change in seen if change[:3] == ["progress", True, "30"])
    # Layer 0's row was drawn before the last layer came, and long before the whole grid.
    assert first < last_layer < drawn, seen
    # ... on the stand-in's one canvas: the top rows of thumbnails painted in many shades,
    # the bottom ones still blank (background, frames, labels: a few colours).
    stand_in = next(change for _, *change in seen if change[0] == "stand-in")
    assert stand_in[1] == 1 and stand_in[2] > 20 and stand_in[3] < 8, stand_in
    # The progress said how far the stream was, and went once the grid was drawn.
    counts = {int(now) for shown, now, _, _ in progress if shown and now not in (None, "30")}
    assert any(0 < k < 30 for k in counts) and all(0 <= k < 30 for k in counts)
    for shown, now, most, text in progress:
        if shown and now is not None and now != "30":
            assert most == "30" and text == f"Layer {now} of 30…"
    assert progress[-1][0] is False
    assert page.locator("#layer-progress").is_hidden()
    assert page.get_attribute("#view-model", "data-first-layer") == "true"
    timings = page.evaluate("() => window.attnvizModels.timings")
    assert 0 < timings["firstLayerMs"] < timings["wholeGridMs"]
    assert timings["responseMs"] > 0 and timings["drawMs"] > 0

    # The figure is today's: one grid of 30 x 9 thumbnails, the heads in 3 groups, and no
    # stand-in left.
    grid = page.evaluate(f"() => ({{shape: ({GRID_SHAPE})(), dataset: {{...{GRID}.dataset}}}})")
    assert grid == {
        "shape": {"traces": 1, "rows": 30, "cols": 9},
        "dataset": {
            "rows": "30",
            "cols": "9",
            "colGroup": "3",
            "kvHeads": "3",
            "scale": "row",  # auto, above 64 tokens: each query row to its own maximum
        },
    }
    assert page.locator("#view-model .grid-preview").count() == 0

    # The assembled overview is POST /attention's one-input answer to the same request.
    whole = httpx.post(server_url + ATTENTION_URL, json=body, timeout=120).json()
    assembled = evaluate_json(
        page,
        "() => { const {attentions, head_mean, ...rest} = window.attnvizModels.lastResponse;"
        " return {rest, heads: [head_mean.length, attentions.length], last: head_mean[29][0]}; }",
    )
    rest = assembled["rest"]
    assert set(rest) | {"attentions", "head_mean"} == set(whole)
    assert assembled["heads"] == [30, 30]
    length = len(whole["tokens"][0])
    assert length > 256 and whole["downsample"]["factor"] > 1
    assert whole["shape"][:3] == [30, 1, 9] and whole["shape"][3] <= 64
    for name in set(rest) - {"compute_ms", "layer_mean", "rollout"}:
        assert rest[name] == whole[name], name
    assert rest["layer_mean"][0] == map_of(whole["layer_mean"], 0)
    assert rest["rollout"][0] == map_of(whole["rollout"], 0)
    assert assembled["last"] == map_of(whole["head_mean"], 29)
    for layer, head in [(0, 0), (7, 4), (29, 8)]:
        z = page.evaluate(f"([l, h]) => {GRID}.cell(l, h)", [layer, head])
        assert z == map_of(whole["attentions"], layer * 9 + head), (layer, head)
    assert page.errors == []


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (
            '{"type": "error", "detail": "layer 1 failed: out of memory"}\n',
            "layer 1 failed: out of memory",
        ),
        ("", "The answer ended after 1 of 6 layers; compute again."),
    ],
    ids=["error line", "cut short"],
)
def test_a_stream_that_breaks_off_shows_why(page, server_url, tail: str, message: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")

    def broken(route) -> None:  # type: ignore[no-untyped-def]
        start, layer = route.fetch().text().splitlines()[:2]
        route.fulfill(
            status=200, content_type="application/x-ndjson", body=f"{start}\n{layer}\n{tail}"
        )

    page.route("**" + STREAM_URL, broken)
    page.fill("#texts", "An answer that breaks off after its first layer.")
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.click("#compute")
    page.wait_for_selector("#error:not([hidden])")
    assert page.locator("#error").text_content() == message
    page.wait_for_function("document.getElementById('compute').disabled === false")
    assert page.locator("#layer-progress").is_hidden()
    assert page.get_attribute("#view-model", "data-drawn") != "true"
    assert page.errors == []


def test_a_newer_request_cancels_the_stream_in_flight(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    held: list[object] = []
    page.route(
        "**" + STREAM_URL, lambda route: held.append(route) if not held else route.continue_()
    )
    failed: list = []
    page.on("requestfailed", lambda request: failed.append(request))
    requests = attention_requests(page)
    page.fill("#texts", SENTENCE)
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.click("#compute")
    page.wait_for_function("document.getElementById('layer-progress').hidden === false")
    assert len(held) == 1  # the first stream waits: its input is still being computed
    page.check("#hide-special")  # another request for the same sentence
    wait_drawn(page, "model")
    # The page cancelled the first (held, never answered).
    assert {(urlsplit(r.url).path, r.failure) for r in failed} == {(STREAM_URL, "net::ERR_ABORTED")}
    assert {r.post_data_json["hide_special_tokens"] for r in failed} == {False}
    assert [(url, b["hide_special_tokens"]) for url, b in requests if url == "layers"] == [
        ("layers", False),
        ("layers", True),
    ]
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    assert response["hidden_special_tokens"] is True
    assert "[CLS]" not in response["tokens"][0]
    assert page.locator("#error").is_hidden()
    assert page.locator("#layer-progress").is_hidden()
    assert page.errors == []

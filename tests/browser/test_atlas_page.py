"""The head atlas on /models (issue 33), in a real Chromium against a real server.

The maps and the table show the API's scores (POST /api/v1/models/heads), the table sorts,
a click on a head opens that head's map on the form's input, and the atlas downloads as
CSV.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import httpx2 as httpx
import pytest

from tests.support.browser import close_page, evaluate_json, new_page, redraw, wait_drawn

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

ATLAS_TIMEOUT_MS = 180_000  # MiniLM's first atlas on a busy 2-core machine


def open_atlas(page) -> dict:  # type: ignore[no-untyped-def,type-arg]
    page.evaluate("document.getElementById('view-atlas').dataset.drawn = 'stale'")
    page.click(".tabs button[data-view=atlas]")
    page.wait_for_function(
        "document.getElementById('view-atlas').dataset.drawn === 'true'", timeout=ATLAS_TIMEOUT_MS
    )
    return evaluate_json(page, "() => window.attnvizModels.lastAtlas")  # type: ignore[no-any-return]


def test_the_atlas_draws_every_score_and_a_click_opens_the_head(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    atlas = open_atlas(page)
    api = httpx.post(
        server_url + "/api/v1/models/heads", json={"model": atlas["model"]}, timeout=300
    ).json()
    assert api["cached"] is True  # the page's request computed and kept it
    assert api["scores"] == atlas["scores"]

    maps = page.evaluate(
        """() => [...document.querySelectorAll('#view-atlas .atlas-plot')]
            .map((d) => ({score: d.dataset.score, z: d.data[0].z}))"""
    )
    assert [m["score"] for m in maps] == [
        "previous_token",
        "induction",
        "duplicate_token",
        "first_token",
        "self",
        "entropy",
    ]
    for m in maps:
        expected = api["scores"][m["score"]]  # (6, 12): MiniLM's layers x heads
        if m["score"] == "entropy":  # nats in the API, bits on every page
            assert api["definitions"]["entropy"]["unit"] == "nats"
            expected = [[v / math.log(2) for v in row] for row in expected]
            assert m["z"] == [pytest.approx(row, rel=1e-12) for row in expected]
        else:
            assert m["z"] == expected
    assert "(bits)" in page.locator("#view-atlas [data-score=entropy] .gtitle").text_content()

    # The table: the 10 heads with the highest previous-token score, highest first.
    cells = page.evaluate(
        """() => [...document.querySelectorAll('.atlas-table tr[data-layer]')]
            .map((tr) => [Number(tr.dataset.layer), Number(tr.dataset.head)])"""
    )
    flat = [
        (api["scores"]["previous_token"][layer][h], layer, h)
        for layer in range(api["num_layers"])
        for h in range(api["num_heads"])
    ]
    expected = [(layer, h) for _, layer, h in sorted(flat, key=lambda t: -t[0])[:10]]
    assert cells == [list(p) for p in expected]
    # Another score, then sorted by layer (a header click).
    page.select_option("#atlas-score", "first_token")
    page.click(".atlas-table th[data-key=layer]")
    layers = page.evaluate(
        "[...document.querySelectorAll('.atlas-table tr[data-layer]')]"
        ".map((tr) => Number(tr.dataset.layer))"
    )
    assert layers == sorted(layers)

    # A click on the table's first row lists that head's best passages (the atlas's
    # examples: each score's, best first), and opens its map on the form's input.
    first = page.locator(".atlas-table tr[data-layer]").first
    layer, head = int(first.get_attribute("data-layer")), int(first.get_attribute("data-head"))
    first.click()
    panel = page.locator("#view-atlas .atlas-examples")
    panel.wait_for(state="visible")
    assert (panel.get_attribute("data-layer"), panel.get_attribute("data-head")) == (
        str(layer),
        str(head),
    )
    mine = [
        r
        for r in atlas["examples"]
        if (r["layer"], r["head"], r["score"]) == (layer, head, "previous_token")
    ]
    listed = panel.locator("li[data-score=previous_token]")
    assert listed.count() == len(mine) == atlas["top_k"]
    assert [int(p) for p in listed.evaluate_all("(li) => li.map((x) => x.dataset.passage)")] == [
        r["passage"] for r in mine
    ]
    assert float(listed.first.locator("b").text_content()) == pytest.approx(
        mine[0]["value"], abs=1e-3
    )
    assert atlas["passages"][str(mine[0]["passage"])][:40] in listed.first.text_content()
    redraw(page, "layer", lambda: panel.locator(".atlas-open-input").click())
    page.wait_for_function(
        f"document.querySelector('#view-layer .enlarged').dataset.head === '{head}'"
    )
    assert page.input_value("#layer-index") == str(layer)
    assert page.evaluate("document.getElementById('layer-grid').layout.title.text").startswith(
        f"Layer {layer}:"
    )

    # The CSV download: a header and one row per head, the API's numbers.
    redraw(page, "atlas", lambda: page.click(".tabs button[data-view=atlas]"))
    with page.expect_download() as info:
        page.click("#atlas-csv")
    text = Path(info.value.path()).read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == api["num_layers"] * api["num_heads"]
    row = rows[13]  # layer 1, head 1
    assert (int(row["layer"]), int(row["head"])) == (1, 1)
    assert float(row["induction"]) == pytest.approx(api["scores"]["induction"][1][1])
    assert page.errors == []


def test_the_atlas_fits_a_phone(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    page = new_page(browser, 390, 844)
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    open_atlas(page)
    assert page.evaluate(
        "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    )
    assert page.errors == []
    close_page(page)


def test_on_your_texts_the_random_token_scores_say_so(page, server_url) -> None:  # type: ignore[no-untyped-def]
    """Induction and duplicate-token are scored on repeated random tokens whatever the
    corpus (issue 42): on the user's texts their titles say they are not of those texts."""
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    page.fill("#texts", "The cat sat on the mat.\nThe dog lay on the rug by the door.")
    open_atlas(page)  # the shipped corpus first: the choice is the atlas view's own
    page.evaluate("document.getElementById('view-atlas').dataset.drawn = 'stale'")
    page.check("#atlas-own")
    page.wait_for_function(
        "document.getElementById('view-atlas').dataset.drawn === 'true'", timeout=ATLAS_TIMEOUT_MS
    )
    atlas = evaluate_json(page, "() => window.attnvizModels.lastAtlas")
    assert atlas["corpus"]["name"] == "texts"
    titles = page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('#view-atlas .atlas-plot')]
            .map((d) => [d.dataset.score, d.layout.title.text]))"""
    )
    random = {n for n, d in atlas["definitions"].items() if d["inputs"] == "repeated random tokens"}
    assert random == {"induction", "duplicate_token"}
    for name, title in titles.items():
        assert title.endswith("(random tokens, not your texts)") == (name in random), title
    assert page.errors == []


def test_a_heads_best_passage_opens_that_head_on_that_passage(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    atlas = open_atlas(page)
    row = page.locator(".atlas-table tr[data-layer]").nth(1)
    layer, head = int(row.get_attribute("data-layer")), int(row.get_attribute("data-head"))
    row.click()
    best = next(
        r
        for r in atlas["examples"]
        if (r["layer"], r["head"], r["score"], r["rank"]) == (layer, head, "self", 0)
    )
    fold = page.locator("#view-atlas .atlas-examples details[data-score=self]")
    assert fold.get_attribute("open") is None  # the first score's fold alone is open
    fold.locator("summary").click()
    opened = fold.locator("li .atlas-open-passage")
    redraw(page, "layer", lambda: opened.first.click())
    page.wait_for_function(
        f"document.querySelector('#view-layer .enlarged').dataset.head === '{head}'"
    )
    passage = " ".join(line.strip() for line in atlas["passages"][str(best["passage"])].split("\n"))
    assert page.input_value("#texts") == passage.strip()  # one input: its lines as spaces
    assert page.input_value("#layer-index") == str(layer)
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    assert response["tokens"][0][best["position"]] == best["token"]  # the atlas's tokens
    page.wait_for_function(  # the peak token selected, its row outlined
        f"document.getElementById('view-layer').dataset.selected === '{best['position']}'"
    )
    assert page.errors == []


def test_an_atlas_file_from_the_command_opens_in_the_tab(page, server_url, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # attnviz atlas's atlas.json (its own corpus) drawn in place of the server's atlas, its
    # passages opening on the page's model; a file of a model not served lists them only.
    import json
    import subprocess
    import sys

    texts = [
        "The quick brown fox jumps over the lazy dog near the river bank.",
        "Attention heads often attend to the previous token or to the first one.",
        "Paris is the capital of France, and Rome is the capital of Italy.",
    ]
    (tmp_path / "corpus.txt").write_text("\n".join(texts) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "attnviz.cli", "atlas", "all-MiniLM-L6-v2", "--corpus",
         str(tmp_path / "corpus.txt"), "--out", str(tmp_path / "out"), "--top-k", "2",
         "--max-tokens", "32"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads((tmp_path / "out" / "atlas.json").read_text())
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    (tmp_path / "bad.json").write_text('{"model": "x"}')
    page.set_input_files("#atlas-file", str(tmp_path / "bad.json"))
    page.wait_for_selector("#error:not([hidden])")
    assert "bad.json is not a head atlas" in page.inner_text("#error")
    page.set_input_files("#atlas-file", str(tmp_path / "out" / "atlas.json"))
    atlas = open_atlas(page)  # drawn from the file: no atlas is computed
    assert atlas["scores"] == written["scores"] and atlas["examples"] == written["examples"]
    assert "from atlas.json" in page.inner_text("#summary")
    assert page.is_visible("#view-atlas .atlas-file-close")
    row = page.locator(".atlas-table tr[data-layer]").first
    layer, head = int(row.get_attribute("data-layer")), int(row.get_attribute("data-head"))
    row.click()
    best = next(
        r
        for r in written["examples"]
        if (r["layer"], r["head"], r["score"], r["rank"]) == (layer, head, "self", 0)
    )
    fold = page.locator("#view-atlas .atlas-examples details[data-score=self]")
    fold.locator("summary").click()
    redraw(page, "layer", lambda: fold.locator("li .atlas-open-passage").first.click())
    assert page.input_value("#texts") == written["passages"][str(best["passage"])]
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    assert response["tokens"][0][best["position"]] == best["token"]
    # Another model's file (not served here): drawn, its passages listed but not opened.
    (tmp_path / "other.json").write_text(json.dumps({**written, "model": "gpt2"}))
    page.set_input_files("#atlas-file", str(tmp_path / "other.json"))
    open_atlas(page)
    assert "gpt2 is not served here" in page.inner_text("#summary")
    page.locator(".atlas-table tr[data-layer]").first.click()
    assert page.locator("#view-atlas .atlas-examples .atlas-open-passage").count() == 0
    assert "not served here" in page.inner_text("#view-atlas .atlas-not-served")
    assert page.errors == []

"""Heads by address, keyboard and screen readers on /models (issue 42, class 6), in a real
Chromium against a real server (MiniLM: 6 layers x 12 heads).

The enlarged head travels in the link (&head=L.H) and a link opens on it; the jump box
takes "L4.H7" and refuses a head the model lacks; the heads switched off are outlined on
the model view's grid; a click or Enter on a token leaves the focus on it, so the arrow
keys go on; each map has a text alternative (its largest weights, checked against the
drawn matrix); on a phone the sideways-scrolling grid says so.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.browser import (
    HANG_MS,
    another_page,
    close_page,
    evaluate_json,
    new_page,
    redraw,
    type_and_compute,
    wait_drawn,
)

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

SENTENCE = "Heads have addresses, and the keyboard reaches every one of them."


def fragment(page) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {k: v[0] for k, v in parse_qs(urlsplit(page.url).fragment).items()}


def enlarged(page, view: str = "model") -> tuple[int, int]:  # type: ignore[no-untyped-def]
    box = page.locator(f"#view-{view} .enlarged")
    return int(box.get_attribute("data-layer")), int(box.get_attribute("data-head"))


def jump(page, text: str, view: str = "model") -> None:  # type: ignore[no-untyped-def]
    redraw(page, view, lambda: (page.fill("#head-jump", text), page.press("#head-jump", "Enter")))


def test_the_jump_box_and_the_link_address_a_head(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    type_and_compute(page, SENTENCE)
    assert enlarged(page) == (0, 0) and "head" not in fragment(page)

    jump(page, "L4.H7")
    assert enlarged(page) == (4, 7)
    title = page.locator("#view-model .enlarged .gtitle").text_content()
    assert title == "Layer 4, head 7"
    assert fragment(page)["head"] == "4.7" and fragment(page)["layer"] == "4"
    assert page.evaluate("document.activeElement.id") == "head-jump"  # typing goes on

    # The enlarged map is the API's head 7 of layer 4.
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    z = evaluate_json(page, "() => document.querySelector('#view-model .enlarged-plot').data[0].z")
    assert z == response["attentions"][4][0][7]

    # A head MiniLM does not have: an error naming the box, nothing moves.
    page.fill("#head-jump", "L6.H0")
    page.press("#head-jump", "Enter")
    page.wait_for_selector("#error:not([hidden])")
    assert page.locator("#error").text_content().startswith("Go to head: “L6.H0” is not a head")
    assert page.get_attribute("#head-jump", "aria-invalid") == "true"
    assert enlarged(page) == (4, 7)

    # The layer view opens on the jumped head's layer with it enlarged; "2.11" also reads.
    redraw(page, "layer", lambda: page.click(".tabs button[data-view=layer]"))
    assert enlarged(page, "layer") == (4, 7)
    jump(page, "2.11", "layer")
    assert enlarged(page, "layer") == (2, 11)
    assert page.evaluate("document.getElementById('layer-grid').layout.title.text").startswith(
        "Layer 2:"
    )

    # The link carries the head: a new page opens with it enlarged.
    link = page.url
    other = another_page(page)
    other.goto(link)
    other.wait_for_function(
        "document.getElementById('view-layer').dataset.drawn === 'true'", timeout=HANG_MS
    )
    assert enlarged(other, "layer") == (2, 11)
    other.close()
    assert page.errors == []


def test_heads_switched_off_are_outlined_on_the_grid(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    page.fill("#ablate", "1.3 4.10")
    redraw(page, "model", lambda: page.press("#ablate", "Tab"))  # its change, as a user makes it
    grid = page.locator("#model-grid")
    assert grid.get_attribute("data-ablated") == "1.3,4.10"
    shapes = page.evaluate(
        """() => { const g = document.getElementById('model-grid');
            return g.layout.shapes.filter((s) => s.name === 'head-off')
              .map((s) => [(s.x0 + s.x1) / 2, (s.y0 + s.y1) / 2]); }"""
    )
    tiles = page.evaluate(
        """() => { const t = document.getElementById('model-grid').tiles;
            return {x: t.x, y: t.y, w: t.width, h: t.height}; }"""
    )
    expected = [
        (tiles["x"][h] + (tiles["w"] - 1) / 2, tiles["y"][l] + (tiles["h"] - 1) / 2)
        for l, h in ((1, 3), (4, 10))  # noqa: E741
    ]
    assert [coordinate for s in shapes for coordinate in s] == pytest.approx(
        [coordinate for point in expected for coordinate in point]
    )
    # A token selected afterwards keeps the marks (its outlines come on top).
    page.click("#query-strip .token[data-position='2']")
    page.wait_for_function("document.getElementById('view-model').dataset.selected === '2'")
    names = page.evaluate("document.getElementById('model-grid').layout.shapes.map((s) => s.name)")
    assert names.count("head-off") == 2 and "selected-row" in names
    assert page.errors == []


def test_the_focus_stays_on_the_token_clicked(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    type_and_compute(page, SENTENCE)
    page.click("#query-strip .token[data-position='3']")
    page.wait_for_function("document.getElementById('view-model').dataset.selected === '3'")
    assert page.evaluate("document.activeElement.dataset.position") == "3"
    page.keyboard.press("ArrowRight")  # the documented arrow keys go on from it
    page.wait_for_function("document.getElementById('view-model').dataset.selected === '4'")
    assert page.evaluate("document.activeElement.dataset.position") == "4"
    page.keyboard.press("Escape")  # clears the selection; the focus stays where it was
    page.wait_for_function("document.getElementById('view-model').dataset.selected === ''")
    assert page.evaluate("document.activeElement.dataset.position") == "4"
    page.keyboard.press("Enter")  # Enter selects the focused token and keeps the focus
    page.wait_for_function("document.getElementById('view-model').dataset.selected === '4'")
    assert page.evaluate("document.activeElement.dataset.position") == "4"
    assert page.errors == []


def test_every_map_has_its_largest_weights_as_text(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    for view, selector in (("model", ".enlarged-plot"), ("averages", "[data-map=head-mean]")):
        if view != "model":
            redraw(page, view, lambda v=view: page.click(f".tabs button[data-view={v}]"))
        div = page.locator(f"#view-{view} {selector}")
        assert div.get_attribute("role") == "img"
        table = page.locator("#" + div.get_attribute("aria-describedby"))
        assert table.get_attribute("class") == "map-description"
        assert table.evaluate("(t) => t.parentElement.className") == "visually-hidden"
        values = [float(v) for v in table.locator("tbody tr td:nth-child(3)").all_text_contents()]
        plot = f"document.querySelector('#view-{view} {selector}')"
        z = evaluate_json(page, f"() => {plot}.data[0].z")
        flat = sorted((v for row in z for v in row if v is not None), reverse=True)
        assert values == pytest.approx(flat[:10], abs=5e-5)
        assert div.get_attribute("aria-label") in table.locator("caption").text_content()
    assert page.errors == []


def test_the_thumbnail_grids_have_each_maps_largest_weight_as_text(page, server_url) -> None:  # type: ignore[no-untyped-def]
    """The model view's 6 x 12 grid and the layer view's 12 heads, against the API's maps."""
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    response = evaluate_json(page, "() => window.attnvizModels.lastResponse")
    for view, grid in (("model", "#model-grid"), ("layer", "#layer-grid")):
        if view != "model":
            redraw(page, view, lambda v=view: page.click(f".tabs button[data-view={v}]"))
        div = page.locator(grid)
        assert div.get_attribute("role") == "img"
        table = page.locator("#" + div.get_attribute("aria-describedby"))
        assert table.evaluate("(t) => t.parentElement.className") == "visually-hidden"
        rows = table.locator("tbody tr")
        heads = (
            [(n, h) for n in range(6) for h in range(12)]
            if view == "model"
            else [(0, h) for h in range(12)]
        )
        assert rows.count() == len(heads)
        for k in (0, len(heads) - 1, len(heads) // 2):
            n, h = heads[k]
            cells = rows.nth(k).locator("th, td").all_text_contents()
            z = response["attentions"][n][0][h]
            value, i, j = max((v, i, j) for i, row in enumerate(z) for j, v in enumerate(row))
            assert cells[0] == f"L{n}.H{h}"
            assert float(cells[1]) == pytest.approx(value, abs=5e-5)
            assert cells[2].startswith(f"{i}: ") and cells[3].startswith(f"{j}: ")
            assert float(cells[4]) == pytest.approx(sum(map(max, z)) / len(z), abs=5e-5)
    # The averages' strip of head means, the line view's heads: a row per map.
    for view, selector, count in (
        ("averages", "#layer-strip", 6),
        ("lines", "#view-lines svg.line-view", 12),
    ):
        redraw(page, view, lambda v=view: page.click(f".tabs button[data-view={v}]"))
        described = page.locator(selector).get_attribute("aria-describedby")
        assert page.locator(f"#{described} tbody tr").count() == count
    assert page.errors == []


def test_the_phone_grid_says_it_scrolls_sideways(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    page = new_page(browser, 390, 844)
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    body = page.locator("#view-model .view-body")
    assert "scrolls-sideways" in body.get_attribute("class")
    assert "swipe the grid sideways for all 12 heads" in body.locator(".hint").first.text_content()
    assert page.evaluate(
        "(() => { const b = document.querySelector('#view-model .view-body');"
        " return b.scrollWidth > b.clientWidth; })()"
    )
    assert page.errors == []
    close_page(page)

"""Go to head names the chosen head at once (round 5's walkthrough: "for ~4 s after Go to
head L17.H3 in the layer view, the button still read Head L0.H0 .npy and the URL said
head=0.0"), in a real Chromium against a real server (MiniLM: 6 layers x 12 heads).

The link and the head's download name the chosen head in the same task as the Enter that
chose it, before any map of it is drawn, and the download asks the server for that head;
a map of an earlier head arriving after the choice (a long input's enlarged head is a
request of its own) changes neither the link nor the enlarged head.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.browser import redraw, type_and_compute, wait_drawn

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

DOWNLOAD_URL = "/api/v1/models/attention/download"
LAYERS_URL = "/api/v1/models/attention/layers"
HUNG_S = 300  # a bound on a hang, not on speed

# Enter in the jump box, then, in the same task (no map can have arrived), the link and
# the head's download button as they are; the button clicked.
JUMP_AND_READ = """(text) => {
    const box = document.getElementById('head-jump');
    box.value = text;
    box.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', bubbles: true}));
    const button = document.getElementById('download-head');
    const seen = {url: location.href, label: button.textContent, disabled: button.disabled};
    button.click();
    return seen;
}"""


def fragment(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).fragment).items()}


def enlarged(page, view: str) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    box = page.locator(f"#view-{view} .enlarged")
    return int(box.get_attribute("data-layer")), int(box.get_attribute("data-head"))


def jump_at_once(page, view: str, text: str, l: int, h: int) -> None:  # type: ignore[no-untyped-def]  # noqa: E741
    """Go to head ``text`` (layer l, head h) in ``view``: the link and the download name
    it at once, the file asked for is that head's, and the view then enlarges it."""
    page.evaluate(f"document.getElementById('view-{view}').dataset.drawn = 'stale'")
    with page.expect_request(lambda r: r.url.endswith(DOWNLOAD_URL)) as asked:
        seen = page.evaluate(JUMP_AND_READ, text)
    assert fragment(seen["url"])["head"] == f"{l}.{h}", seen["url"]
    assert fragment(seen["url"])["layer"] == str(l)
    assert seen["label"] == f"Head L{l}.H{h} .npy" and not seen["disabled"]
    body = asked.value.post_data_json
    assert (body["layer_index"], body["head_index"]) == (l, h)
    wait_drawn(page, view)
    assert enlarged(page, view) == (l, h)
    assert fragment(page.url)["head"] == f"{l}.{h}"
    assert page.text_content("#download-head") == f"Head L{l}.H{h} .npy"


def test_go_to_head_names_the_head_before_its_map_is_drawn(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    redraw(page, "layer", lambda: page.click(".tabs button[data-view=layer]"))
    assert page.text_content("#download-head") == "Head L0.H0 .npy"
    jump_at_once(page, "layer", "L3.H5", 3, 5)  # the walkthrough's case: the layer view
    redraw(page, "model", lambda: page.click(".tabs button[data-view=model]"))
    jump_at_once(page, "model", "4.7", 4, 7)
    assert page.errors == []


def test_an_earlier_heads_map_arriving_late_changes_nothing(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    # Over 64 tokens the thumbnails are pooled: an enlarged head is a request of its own.
    type_and_compute(page, " ".join(["The keyboard reaches every head of the model."] * 10))
    held = []  # the enlarged heads' requests, answered when the test says

    def hold(route) -> None:  # type: ignore[no-untyped-def]
        body = route.request.post_data_json or {}
        if "head_index" in body:
            held.append(route)
        else:
            route.continue_()

    page.route(f"**{LAYERS_URL}", hold)
    page.evaluate(
        """() => { window.linksWritten = [];
            const replace = history.replaceState.bind(history);
            history.replaceState = (data, title, url) => {
                window.linksWritten.push(String(url)); replace(data, title, url); }; }"""
    )

    def is_head(request) -> bool:  # type: ignore[no-untyped-def]
        return LAYERS_URL in request.url and "head_index" in (request.post_data_json or {})

    def jump_held(text: str, count: int) -> None:
        """Go to head ``text``; its map's request is held (the count-th)."""
        with page.expect_request(is_head, timeout=HUNG_S * 1000):
            page.fill("#head-jump", text)
            page.press("#head-jump", "Enter")
        for _ in range(1000):  # each call handles Playwright's events, the route's among them
            if len(held) >= count:
                return
            page.evaluate("0")
        pytest.fail("the enlarged head's request was seen but never routed")

    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    jump_held("L1.H2", 1)  # head 2 of layer 1 asked for, not answered
    jump_held("L4.H7", 2)  # the grid drawn again, head 7 of layer 4 asked for
    written = page.evaluate("window.linksWritten.length")
    assert fragment(page.url)["head"] == "4.7"

    # Layer 4's head answers and is drawn; then layer 1's, asked for before it, arrives
    # late. #progress shows while any wait lasts (lib/form.js busy): it goes once the
    # drawing that asked for layer 1's head has ended, whatever that drawing did.
    held[1].continue_()
    wait_drawn(page, "model")
    assert enlarged(page, "model") == (4, 7)
    page.wait_for_function("!document.getElementById('progress').hidden")  # layer 1's wait
    held[0].continue_()
    page.wait_for_function("document.getElementById('progress').hidden", timeout=HUNG_S * 1000)
    later = page.evaluate("window.linksWritten")[written:]
    assert all(fragment(url).get("head") == "4.7" for url in later), later
    assert enlarged(page, "model") == (4, 7)
    assert fragment(page.url)["head"] == "4.7"
    assert page.text_content("#download-head") == "Head L4.H7 .npy"
    page.unroute(f"**{LAYERS_URL}")
    assert page.errors == []

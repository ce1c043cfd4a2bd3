"""What the pages write into their URL, in a real Chromium.

A tab clicked while Compute waits for the API: the API's response is held back
(page.route) while the user types a new input, presses Compute and opens another tab;
the URL's request must be the new input, before and after the response, on both pages.

Old links' bare fragments (#summary, #heads) are elements' ids on /: opening one must
not scroll the page to that element (/models: tests/browser/test_models_phone.py).
"""

from typing import Any

import pytest

from tests.pretrained.support import require_pretrained_extra
from tests.support.browser import (
    HANG_MS,
    HeldResponses,
    close_page,
    decode_link,
    new_page,
    wait_drawn,
    wait_heads,
)

pytestmark = pytest.mark.browser


def written(page) -> Any:  # type: ignore[no-untyped-def]
    page.wait_for_selector("html[data-link='written']")
    return decode_link(page.url)


def test_attention_page_link_carries_the_request_being_computed(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_heads(page, 2)
    before = written(page)["sequences"]
    held = HeldResponses(page, "**/api/v1/attention")
    page.fill("#sequences", "a brand new input\nand its second line")
    page.uncheck("#verify")
    page.click("#compute")
    held.wait_for(1)
    page.click(".tabs button[data-view=summary]")  # before the response
    request = written(page)
    assert request["sequences"] != before
    assert request["sequences"] == ["a brand new input", "and its second line"]
    assert request["verify"] is False
    assert page.url.endswith("#view=summary")

    held.release()
    page.wait_for_selector("#view-summary[data-drawn='true']", timeout=HANG_MS)
    page.wait_for_function(
        "window.attnviz.lastResponse.key_labels[0].includes('brand')", timeout=HANG_MS
    )
    # Another tab after the response: still the new request.
    page.click(".tabs button[data-view=heads]")
    assert written(page)["sequences"] == ["a brand new input", "and its second line"]
    assert page.errors == []


def test_models_page_link_carries_the_request_being_computed(page, server_url) -> None:  # type: ignore[no-untyped-def]
    require_pretrained_extra()
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    before = written(page)["texts"]
    held = HeldResponses(page, "**/api/v1/models/attention/layers")
    page.fill("#texts", "A brand new sentence.\nAnd a second one.")
    page.click("#compute")
    held.wait_for(1)
    page.click(".tabs button[data-view=averages]")  # before the response
    request = written(page)
    assert request["texts"] != before
    assert request["texts"] == ["A brand new sentence.", "And a second one."]
    assert page.url.endswith("#view=averages")

    held.release()
    wait_drawn(page, "averages")
    assert page.evaluate("window.attnvizModels.lastResponse.tokens[0][1]") == "a"
    page.click(".tabs button[data-view=layer]")
    assert written(page)["texts"] == ["A brand new sentence.", "And a second one."]
    assert page.errors == []


@pytest.mark.parametrize("view", ["summary", "heads"])
def test_old_bare_view_links_to_the_attention_page_do_not_jump(browser, server_url, view) -> None:  # type: ignore[no-untyped-def]
    page = new_page(browser, 390, 844)
    page.goto(f"{server_url}/#{view}")
    assert page.evaluate("(id) => document.getElementById(id) !== null", view)
    page.wait_for_selector(f"#view-{view}[data-drawn='true']", timeout=HANG_MS)
    page.wait_for_selector("html[data-link='written']")
    assert page.url.endswith(f"#view={view}")
    page.wait_for_timeout(300)
    assert page.evaluate("window.scrollY") == 0
    assert page.errors == []
    close_page(page)

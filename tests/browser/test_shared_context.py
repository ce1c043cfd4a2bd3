"""The browser tests' pages: most open in one shared context (its disk cache keeps the
static files and V8's compiled code between tests), each a new page with nothing of the
pages before it; a page with options of its own (the CSP enforced) gets its own context."""

import pytest

from tests.browser.strict import strict_page
from tests.support.browser import (
    SHARED_CONTEXTS,
    another_page,
    close_page,
    close_shared_pages,
    evaluate_json,
    new_page,
)

pytestmark = pytest.mark.browser


def test_a_new_page_shares_the_cache_but_nothing_of_the_page_before(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    shared = SHARED_CONTEXTS[id(browser)]
    first = new_page(browser, 390, 844)
    assert first.context is shared
    first.goto(server_url + "/healthz")
    first.evaluate("window.leftBehind = 1")
    close_page(first)
    assert first.is_closed() and shared.pages  # the context stays open

    second = new_page(browser, 1366, 768)
    second.goto(server_url + "/healthz")
    assert second.evaluate("typeof window.leftBehind") == "undefined"
    assert second.evaluate("[innerWidth, innerHeight]") == [1366, 768]
    # A second tab of the page has the page's viewport (a phone's link opened on a phone).
    tab = another_page(second)
    tab.goto(server_url + "/healthz")
    assert tab.evaluate("[innerWidth, innerHeight]") == [1366, 768]
    close_page(second)
    assert not tab.is_closed()
    # What runs after each browser test (pages_of_this_test): the tabs it left are closed,
    # the blank page the context was launched with stays.
    close_shared_pages(browser)
    assert tab.is_closed() and len(shared.pages) == 1


def test_a_page_with_options_of_its_own_gets_a_context_of_its_own(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    with strict_page(browser) as page:
        assert page.context is not SHARED_CONTEXTS[id(browser)]
        page.goto(server_url + "/healthz")
        context = page.context
    assert context not in browser.contexts  # closed with the page


def test_a_value_sent_as_json_is_the_value_playwright_sends(page) -> None:  # type: ignore[no-untyped-def]
    # Playwright's own transfer is the reference; -0 is the one documented difference.
    page.set_content("<div id='d' data-k='7'></div>")
    value = """(k) => ({
        numbers: [1, 2.5, 1e-7, NaN, Infinity, -Infinity, null, 2 ** 53],
        typed: new Float32Array([0.1, 1 / 3]), nested: {rows: [[0.25, 0.5], []], text: "é\\u0000"},
        k,
    })"""
    sent = evaluate_json(page, value, 3)
    expected = page.evaluate(value, 3)
    assert repr(sent) == repr(expected)  # NaN too, and the floats to the last bit
    assert evaluate_json(page, "() => undefined") is None
    assert evaluate_json(page.locator("#d"), "(d, n) => [d.dataset.k, n]", 2) == ["7", 2]
    assert evaluate_json(page, "async () => [-0]") == [0]

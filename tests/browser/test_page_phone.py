"""The attention page (/) on a phone, 390 x 844, in a real Chromium.

Found wrong by a user on the page (issue 12): a page wider than the screen on some tabs,
a shared link that jumped the page, and Plotly's toolbar over the figures' titles. The
pretrained-model page on a phone is tests/browser/test_models_phone.py.
"""

import pytest

from tests.support.browser import (
    HANG_MS,
    another_page,
    close_page,
    new_page,
    open_view,
    wait_for_heads,
)

pytestmark = pytest.mark.browser

VIEWS = ["heads", "step", "scaling", "decoding", "parameters", "summary", "dropout", "layers"]


def test_phone_width_has_no_horizontal_scroll_on_any_tab(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    page = new_page(browser, 390, 844)
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    for view in VIEWS:
        if view != "heads":
            open_view(page, view)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, (view, width)
    assert page.errors == []
    close_page(page)


def test_phone_opening_a_shared_link_does_not_jump_the_page(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    page = new_page(browser, 390, 844)
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    assert page.evaluate("window.scrollY") == 0
    open_view(page, "summary")
    link = page.url
    # The fragment names the view and no element of the page.
    fragment = link.split("#", 1)[1]
    assert fragment == "view=summary"
    assert page.evaluate(f"document.getElementById({fragment!r})") is None
    other = another_page(page)
    other.goto(link)
    other.wait_for_function(
        "document.getElementById('view-summary').dataset.drawn === 'true'", timeout=HANG_MS
    )
    other.wait_for_timeout(300)
    assert other.evaluate("window.scrollY") == 0
    # Drawing the default view does not jump a page scrolled by its user either.
    page.click(".tabs button[data-view=heads]")
    wait_for_heads(page, 2)
    page.evaluate("window.scrollTo(0, 400)")
    page.evaluate(
        """() => {
            const select = document.getElementById('sequence-index');
            select.value = '2';
            select.dispatchEvent(new Event('change'));
        }"""
    )
    page.wait_for_function("document.getElementById('heads').dataset.drawnSequence === '2'")
    assert page.evaluate("window.scrollY") == 400
    close_page(page)


def test_phone_modebar_does_not_cover_the_titles(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    page = new_page(browser, 390, 844)
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    overlaps = """() => [...document.querySelectorAll('.view:not([hidden]) .js-plotly-plot')]
        .map((div) => {
            const bar = div.querySelector('.modebar').getBoundingClientRect();
            const title = div.querySelector('.gtitle');
            if (!title) return null;
            const t = title.getBoundingClientRect();
            const overlap = bar.left < t.right && t.left < bar.right
                && bar.top < t.bottom && t.top < bar.bottom;
            return {title: title.textContent, overlap, bar: bar.width * bar.height};
        }).filter((x) => x !== null)"""
    for view in VIEWS:
        if view == "parameters":
            continue  # tables only
        if view != "heads":
            open_view(page, view)
        drawn = page.evaluate(overlaps)
        assert drawn, view
        for plot in drawn:
            assert plot["bar"] > 0, plot  # the modebar is there
            assert not plot["overlap"], (view, plot)
    assert page.errors == []
    close_page(page)

"""The pretrained-model page (/models) on a phone, 390 x 844, in a real Chromium.

What a phone user found wrong: a page wider than the screen, a page that jumps while it
draws (the URL fragment #model was the id of the model picker, so opening a link
scrolled to it; and a redraw emptied the view first, so the page shrank under the
reader), and figure titles under Plotly's toolbar or cut off at the screen's edge.
"""

import pytest

from tests.support.browser import (
    HANG_MS,
    another_page,
    close_page,
    new_page,
    redraw,
    type_and_compute,
    wait_drawn,
)

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

WIDTH, HEIGHT = 390, 844
VIEWS = ["model", "layer", "averages"]
# Long enough that the sentence picker's option (40 characters and "…") is the widest
# control of the page.
SENTENCE = "On a phone the attention maps of every tab fit the screen, and nothing jumps."


def phone(browser, url: str):  # type: ignore[no-untyped-def]
    """A 390 x 844 page at ``url`` with its first view drawn."""
    page = new_page(browser, WIDTH, HEIGHT)
    page.goto(url)
    page.wait_for_function(
        "[...document.querySelectorAll('.view')].some((v) => v.dataset.drawn === 'true')",
        timeout=HANG_MS,
    )
    return page


def open_tab(page, view: str) -> None:  # type: ignore[no-untyped-def]
    redraw(page, view, lambda: page.click(f".tabs button[data-view={view}]"))


def set_control(page, selector: str, value: str) -> None:  # type: ignore[no-untyped-def]
    """Change a select as a user does, without Playwright scrolling it into view."""
    page.evaluate(
        """([selector, value]) => {
            const select = document.querySelector(selector);
            select.value = value;
            select.dispatchEvent(new Event('change'));
        }""",
        [selector, value],
    )


# Whatever reaches past the right edge of the screen: elements of the page and the
# figures' titles (an SVG clips them at the figure's edge, so they do not widen the
# page; they are cut off instead).
# What scrolls inside a box of its own that ends on screen (the model view's grid of
# thumbnails) does not widen the page.
PAST_THE_EDGE = """(width) => [...document.querySelectorAll('body *')]
    .filter((e) => e.closest('.js-plotly-plot') === null || e.matches('.js-plotly-plot'))
    .filter((e) => e.getClientRects().length && e.getBoundingClientRect().right > width)
    .filter((e) => {
        for (let a = e.parentElement; a; a = a.parentElement) {
            const overflow = getComputedStyle(a).overflowX;
            if (["auto", "scroll", "hidden"].includes(overflow)
                && a.getBoundingClientRect().right <= width) return false;
        }
        return true;
    })
    .map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className}`)"""


def test_phone_no_horizontal_scroll_on_any_tab(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    page = phone(browser, server_url + "/models")
    type_and_compute(page, SENTENCE)
    for view in VIEWS:
        if view != "model":
            open_tab(page, view)
        assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH, view
        assert page.evaluate(PAST_THE_EDGE, WIDTH) == [], view
        assert page.locator(f"#view-{view} .js-plotly-plot").count() > 0
    assert page.errors == []
    close_page(page)


# Each figure's titles: whether one overlaps the modebar, and whether it lies inside its
# figure (the figure's SVG cuts off what does not).
TITLES = """() => [...document.querySelectorAll('.view:not([hidden]) .js-plotly-plot')]
    .flatMap((div) => {
        const box = div.getBoundingClientRect();
        const bar = div.querySelector('.modebar').getBoundingClientRect();
        return [...div.querySelectorAll('.gtitle')].map((title) => {
            const t = title.getBoundingClientRect();
            return {
                title: title.textContent,
                overlap: bar.left < t.right && t.left < bar.right
                    && bar.top < t.bottom && t.top < bar.bottom,
                inside: t.left >= box.left && t.right <= box.right,
                bar: bar.width * bar.height,
            };
        });
    })"""


def test_phone_titles_are_whole_and_not_under_the_modebar(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    page = phone(browser, server_url + "/models")
    type_and_compute(page, SENTENCE)
    seen = []
    for view in VIEWS:
        if view != "model":
            open_tab(page, view)
        titles = page.evaluate(TITLES)
        assert titles, view
        for title in titles:
            assert title["bar"] > 0, title  # the modebar is there
            assert not title["overlap"], (view, title)
            assert title["inside"], (view, title)
        seen += [t["title"] for t in titles]
    assert "Layer 0: 12 heads" in seen and "Attention rollout (Abnar & Zuidema 2020)" in seen
    assert page.errors == []
    close_page(page)


def test_phone_fragment_names_no_element_and_links_open_at_the_top(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    page = phone(browser, server_url + "/models")
    type_and_compute(page, SENTENCE)
    links = {}
    for view in VIEWS:
        if view != "model":
            open_tab(page, view)
        page.wait_for_selector("html[data-link='written']")
        fragment = page.url.split("#", 1)[1]
        assert fragment == f"view={view}"
        assert page.evaluate("(id) => document.getElementById(id)", fragment) is None
        links[view] = page.url
    for view, link in links.items():
        other = another_page(page)
        other.goto(link)
        wait_drawn(other, view)
        other.wait_for_selector("html[data-link='written']")
        other.wait_for_timeout(300)
        assert other.evaluate("window.scrollY") == 0, view
        assert other.input_value("#texts") == SENTENCE
        assert other.url == link  # the reopened page writes the same link
        other.close()
    close_page(page)


@pytest.mark.parametrize("view", VIEWS)
def test_old_bare_view_links_open_their_tab_without_jumping(browser, server_url, view: str) -> None:  # type: ignore[no-untyped-def]
    page = phone(browser, f"{server_url}/models#{view}")
    wait_drawn(page, view)
    page.wait_for_selector("html[data-link='written']")
    assert page.url.endswith(f"#view={view}")
    page.wait_for_timeout(300)
    assert page.evaluate("window.scrollY") == 0  # #model was the model picker's id
    assert page.errors == []
    close_page(page)


# How far down the page `selector`'s element starts, or the bottom of the page when it
# cannot scroll that far.
SCROLL_TO = """(selector) => Math.min(
    Math.round(document.querySelector(selector).getBoundingClientRect().top + window.scrollY),
    document.documentElement.scrollHeight - window.innerHeight)"""


def test_phone_drawing_keeps_the_scroll_position(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    page = phone(browser, server_url + "/models")
    page.fill("#texts", f"{SENTENCE}\nA second sentence.")
    redraw(page, "model", lambda: page.click("#compute"))

    def unmoved(view: str, selector: str, action) -> None:  # type: ignore[no-untyped-def]
        y = page.evaluate(SCROLL_TO, selector)
        assert y > 600, (view, y)  # well below the tabs: where a reader scrolled to
        page.evaluate("(y) => window.scrollTo(0, y)", y)
        assert page.evaluate("window.scrollY") == y
        redraw(page, view, action)
        page.wait_for_timeout(200)
        assert page.evaluate("window.scrollY") == y, view

    # Down at the enlarged map, another sentence; then Compute again from there.
    enlarged = "#view-model .enlarged"
    unmoved("model", enlarged, lambda: set_control(page, "#sequence-index", "1"))
    unmoved(
        "model",
        enlarged,
        lambda: page.evaluate("document.getElementById('model-form').requestSubmit()"),
    )
    # Down at the layer view's enlarged head, another layer.
    open_tab(page, "layer")
    unmoved("layer", "#view-layer .enlarged", lambda: set_control(page, "#layer-index", "3"))
    assert page.evaluate("document.getElementById('layer-grid').layout.title.text") == (
        "Layer 3: 12 heads"
    )
    assert page.locator("#view-layer .enlarged-plot .gtitle").text_content() == "Layer 3, head 0"
    # At the rollout, another layer's head average.
    open_tab(page, "averages")
    rollout = "#view-averages [data-map=rollout]"
    unmoved("averages", rollout, lambda: set_control(page, "#layer-index", "5"))
    assert page.errors == []
    close_page(page)

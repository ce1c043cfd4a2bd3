"""The tab lists of both pages from the keyboard (round 5's walkthrough: "ArrowRight on the
tab list does nothing"), in a real Chromium against a real server.

The WAI-ARIA Authoring Practices' Tabs pattern with automatic activation: Left and Right
arrow move the focus to the previous and next tab, wrapping at the ends, Home and End to
the first and last; the tab reached opens its view as a click would; the selected tab is
the list's only stop of the Tab key (tabindex 0, the others -1) and the only one
aria-selected; each tab names its panel and each panel its tab.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.browser import wait_drawn, wait_for_heads

pytestmark = pytest.mark.browser

# What the tab list and the panels say: the focused tab, the selected tabs, the tabs the
# Tab key stops at, the panels shown.
TAB_STATE = """() => {
    const tabs = [...document.querySelectorAll('.tabs [role=tab]')];
    return {
        focused: document.activeElement.dataset.view ?? null,
        selected: tabs.filter((t) => t.getAttribute('aria-selected') === 'true')
            .map((t) => t.dataset.view),
        stops: tabs.filter((t) => t.tabIndex === 0).map((t) => t.dataset.view),
        shown: [...document.querySelectorAll('[role=tabpanel]')].filter((p) => !p.hidden)
            .map((p) => p.id),
    };
}"""


def on_tab(view: str) -> dict[str, object]:
    """The state of the lists when the tab of ``view`` has the focus and is open."""
    return {"focused": view, "selected": [view], "stops": [view], "shown": [f"view-{view}"]}


def press(page, key: str, view: str) -> None:  # type: ignore[no-untyped-def]
    """Press ``key`` on the focused tab and wait until ``view`` is drawn afresh; the focus,
    the selection, the stops and the link's fragment follow it."""
    page.evaluate(f"document.getElementById('view-{view}').dataset.drawn = 'stale'")
    page.keyboard.press(key)
    wait_drawn(page, view)
    assert page.evaluate(TAB_STATE) == on_tab(view), key
    assert parse_qs(urlsplit(page.url).fragment)["view"] == [view]


def test_arrow_keys_home_and_end_move_between_the_tabs_of_the_toy_page(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    views = page.evaluate(
        "[...document.querySelectorAll('.tabs [role=tab]')].map((t) => t.dataset.view)"
    )
    assert views[0] == "heads" and views[-1] == "layers"
    # One stop for the whole list before any key: the open tab's.
    state = page.evaluate(TAB_STATE)
    assert state["stops"] == ["heads"] and state["selected"] == ["heads"]
    for view in views:  # the tabs and the panels name each other
        tab = page.locator(f".tabs [data-view={view}]")
        assert tab.get_attribute("aria-controls") == f"view-{view}"
        panel_label = page.get_attribute(f"#view-{view}", "aria-labelledby")
        assert panel_label == tab.get_attribute("id")

    page.focus(".tabs [data-view=heads]")
    press(page, "ArrowRight", views[1])
    press(page, "ArrowLeft", "heads")
    press(page, "ArrowLeft", "layers")  # wraps to the last
    press(page, "ArrowRight", "heads")  # and back round to the first
    press(page, "End", "layers")
    press(page, "Home", "heads")

    # Tab leaves the list; Shift+Tab comes back to the open tab, not the last one passed.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.getAttribute('role')") != "tab"
    page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.activeElement.dataset.view") == "heads"
    assert page.errors == []


@pytest.mark.usefixtures("pretrained_extra")
def test_arrow_keys_move_between_the_tabs_of_the_models_page(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    state = page.evaluate(TAB_STATE)
    assert state["stops"] == ["model"] and state["selected"] == ["model"]
    page.focus(".tabs [data-view=model]")
    press(page, "ArrowRight", "layer")
    press(page, "ArrowRight", "averages")
    press(page, "ArrowLeft", "layer")
    press(page, "Home", "model")
    assert page.errors == []

"""Hostile tokens typed into the form are shown as text; no script runs."""

import pytest

from tests.support.browser import wait_for_heads

pytestmark = pytest.mark.browser

HOSTILE_LINES = [
    "<img src=x onerror=alert(1)>",
    "</script><script>alert(2)</script>",
    "{{7*7}} ${7*7}",
    "\"'><svg onload=alert(3)>",
    "<a href=javascript:alert(4)>x</a> <b>bold</b>",
]


def test_hostile_tokens_are_literal_text_and_run_nothing(page, server_url) -> None:  # type: ignore[no-untyped-def]
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(server_url + "/")
    wait_for_heads(page, 2)
    page.fill("#sequences", "\n".join(HOSTILE_LINES))
    page.fill("#vocab_size", "200")
    page.evaluate("document.getElementById('heads').dataset.drawnHeads = '0'")  # redrawn below
    page.click("#compute")
    page.wait_for_function("window.attnviz.lastResponse.key_labels.length === 5")
    wait_for_heads(page, 2)
    for b, line in enumerate(HOSTILE_LINES):
        page.select_option("#sequence-index", str(b))
        page.wait_for_function(f"document.getElementById('heads').dataset.drawnSequence === '{b}'")
        ticks = page.locator("#heads .head-plot").first.locator(".xtick").all_text_contents()
        ticks = [tick for tick in ticks if tick]
        # Tick labels over 20 characters are cut with "…" (heatmap.js MAX_TICK_CHARS).
        words = [w if len(w) <= 20 else w[:19] + "…" for w in line.split()]
        assert ticks[: len(words)] == words, ticks
        # The hover label shows the literal token too.
        plot = page.locator("#heads .head-plot").first
        plot.locator(".nsewdrag").first.hover(position={"x": 4, "y": 4})  # the first cell
        hover = plot.locator(".hoverlayer .hovertext")
        hover.wait_for()
        assert line.split()[0] in hover.text_content(), hover.text_content()
    # Nothing ran and nothing was injected.
    assert dialogs == []
    assert (
        page.evaluate(
            "() => document.querySelectorAll('img, script:not([src]):not([type])').length"
        )
        == 0
    )
    assert (
        page.evaluate(
            "() => [...document.querySelectorAll('*')].filter(e => [...e.attributes].some("
            "a => a.name.startsWith('on'))).length"
        )
        == 0
    )
    assert page.evaluate("() => document.querySelectorAll('a[href^=\"javascript\"]').length") == 0
    assert page.errors == []

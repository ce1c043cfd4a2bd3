"""No stale or misleading state on /models (issue 42, class 5), in a real Chromium against
a real server: while a Compute runs, the page does not call its results out of date; a
refused view leaves no maps of the earlier request under its error; a speech model chosen
after a text model shows nothing of the text model's results."""

from __future__ import annotations

import pytest

from tests.support.browser import HeldResponses, type_and_compute, wait_drawn, wait_model_option

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

STREAM = "**/api/v1/models/attention/layers"


def test_no_out_of_date_banner_while_the_new_input_computes(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")

    # The server's answer is held until the page has been seen waiting with its old maps
    # (a request let through after a fixed delay could be answered and drawn before the
    # wait below began, on a busy machine).
    held = HeldResponses(page, STREAM)
    page.fill("#texts", "A new sentence, typed while the old maps are on screen.")
    assert page.locator("#stale-note").is_visible()  # typed, not computed: out of date
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.click("#compute")
    page.wait_for_function("document.querySelector('.results').classList.contains('running')")
    assert page.locator("#stale-note").is_hidden()  # being computed: not "out of date"
    held.wait_for(1)  # Compute's request
    held.release()
    wait_drawn(page, "model")
    assert page.locator("#stale-note").is_hidden()
    assert "computing" not in page.locator("#summary").text_content()
    assert " ms" in page.locator("#summary").text_content()
    assert page.errors == []


def test_a_refused_view_leaves_no_earlier_maps(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    page.fill("#ablate", "1.2")
    page.press("#ablate", "Tab")
    page.wait_for_function("document.getElementById('model-grid')?.dataset.ablated === '1.2'")
    assert page.locator("#view-model .js-plotly-plot").count() > 0
    # A head MiniLM lacks (6 layers): the API refuses; the maps of heads 1.2 off go.
    page.fill("#ablate", "40.2")
    page.press("#ablate", "Tab")
    page.wait_for_selector("#error:not([hidden])")
    assert "Heads off" in page.locator("#error").text_content()
    page.wait_for_function("document.querySelectorAll('.results .js-plotly-plot').length === 0")
    assert page.locator("#summary").text_content() == ""
    assert page.locator("#token-box").is_hidden()
    assert page.errors == []


def test_a_speech_model_shows_nothing_of_the_text_models_results(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    wait_drawn(page, "model")
    type_and_compute(page, "MiniLM's maps, before Whisper is chosen.")
    assert "all-MiniLM-L6-v2" in page.locator("#summary").text_content()
    wait_model_option(page, "whisper-tiny.en", 120_000)
    page.select_option("#model", "whisper-tiny.en")
    page.wait_for_function("document.getElementById('summary').textContent === ''")
    assert page.locator(".results .view .js-plotly-plot").count() == 0
    assert page.locator("#token-box").is_hidden()
    assert page.errors == []

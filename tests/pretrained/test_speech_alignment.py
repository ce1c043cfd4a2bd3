"""Cross-attention alignment scores (attnviz.pretrained.atlas.alignment; issue 54, item 6).

The score is Kendall's tau-b between an output token's position and the source position
its row attends to most. It is checked against a brute-force count of concordant and
discordant pairs (ties corrected), on made-up maps whose answer is known, and on Whisper
tiny.en's 24 cross-attention heads over four spoken sentences, where the heads the model's
own timing uses (its ``alignment_heads``) all follow the audio.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from attnviz.pretrained.atlas.alignment import (
    monotonic_alignment,
    speech_alignment_scores,
    transcription_alignment,
)
from attnviz.pretrained.speech import SpeechModel, decode_audio

from tests.pretrained import test_speech
from tests.pretrained.media import speak

whisper_dir = test_speech.whisper_dir
whisper = test_speech.whisper
SENTENCES = (
    "The cat sat on the mat because it was tired.",
    "A quick brown fox jumps over the lazy dog near the river bank.",
    "Attention shows what a trained model looks at, token by token, as it reads.",
    "Seven big ships sailed slowly into the harbour at dawn yesterday morning.",
)


def brute_force_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b by counting every pair: (C - D) / sqrt((n0 - n1)(n0 - n2))."""
    concordant = discordant = tied_x = tied_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        tied_x += dx == 0
        tied_y += dy == 0
        concordant += dx * dy > 0
        discordant += dx * dy < 0
    pairs = len(x) * (len(x) - 1) // 2
    denominator = math.sqrt((pairs - tied_x) * (pairs - tied_y))
    return 0.0 if denominator == 0 else (concordant - discordant) / denominator


def test_the_score_is_kendalls_tau_b_of_each_rows_argmax() -> None:
    generator = torch.Generator().manual_seed(0)
    cross = torch.rand(3, 4, 9, 7, generator=generator).softmax(-1)  # (N, H, T, F)
    scores = monotonic_alignment(cross)
    assert scores.shape == (3, 4) and scores.dtype == np.float64
    attended = cross.argmax(-1).numpy()
    for layer, head in itertools.product(range(3), range(4)):
        expected = brute_force_tau_b(np.arange(9), attended[layer, head])
        assert scores[layer, head] == pytest.approx(expected, abs=1e-12)


def test_a_head_that_moves_forward_scores_1_back_minus_1_still_0() -> None:
    tokens, frames = 6, 12
    forward = np.zeros((tokens, frames))
    forward[np.arange(tokens), 2 * np.arange(tokens)] = 1.0  # token t at frame 2t
    still = np.zeros((tokens, frames))
    still[:, 0] = 1.0  # every token on the first frame (an attention sink)
    cross = np.stack([forward, forward[::-1], still])[None]  # (1, 3, T, F)
    np.testing.assert_allclose(monotonic_alignment(cross), [[1.0, -1.0, 0.0]], atol=1e-12)
    assert monotonic_alignment(cross[:, :, :1]).tolist() == [[0.0, 0.0, 0.0]]  # one token
    with pytest.raises(ValueError, match="cross"):
        monotonic_alignment(cross[0])


def test_whisper_tiny_en_s_own_alignment_heads_all_follow_the_audio(whisper: SpeechModel) -> None:
    clips = [decode_audio(speak(sentence)) for sentence in SENTENCES]
    scores = speech_alignment_scores(whisper, clips, device="cpu")
    assert scores.shape == (4, 6)  # its 24 cross-attention heads
    # the mean of each clip's score, each against the brute-force count on its weights
    each = []
    for clip in clips:
        heard = whisper.transcribe(clip, device="cpu")
        rows = heard.block("cross")[:, :, heard.prompt_length : len(heard.decoder_ids)]
        attended = rows.argmax(-1).numpy()
        tokens = np.arange(attended.shape[-1])
        brute = [[brute_force_tau_b(tokens, row) for row in layer] for layer in attended]
        np.testing.assert_allclose(transcription_alignment(heard), brute, atol=1e-12)
        each.append(brute)
    np.testing.assert_allclose(scores, np.mean(each, axis=0), atol=1e-12)
    own = whisper.alignment_heads
    assert len(own) == 8
    # measured (docs/methods.md): 0.78 to 0.99 for the eight, a mean of 0.90
    theirs = [scores[layer, head] for layer, head in own]
    assert min(theirs) > 0.7 and np.mean(theirs) > 0.85

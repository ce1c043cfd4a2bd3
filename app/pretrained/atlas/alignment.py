"""Cross-attention alignment: how monotonically each cross-attention head follows the source.

An encoder-decoder's cross attention maps each output token to source positions. In a
model that aligns (speech recognition, translation) some heads move forward through the
source as the output advances: Whisper times its words with dynamic time warping over
the cross attention of a few such heads, its ``alignment_heads`` (Radford et al. 2022,
"Robust Speech Recognition via Large-Scale Weak Supervision", §3.8; openai/whisper
``timing.py``, ``find_alignment``).

The score of head (l, h) on one input: with T output tokens past the decoder's prompt and
a_t = argmax_f A[l, h, t, f] the source position token t attends to most, Kendall's
tau-b between t and a_t (Kendall 1945, "The treatment of ties in ranking problems"):
1 when the attended position never goes back as the output advances, -1 when it only
goes back, near 0 when it does not follow the output (or stays on one position, which
gives no order: 0). A head's score is the mean over the inputs. ``docs/methods.md``
compares it with Whisper tiny.en's own ``alignment_heads``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from ..speech import SpeechModel, Transcription


def monotonic_alignment(cross: torch.Tensor | np.ndarray) -> np.ndarray:
    """Each head's alignment score on one input (module docstring).

    Args:
        cross: (N, H, T, F) cross-attention weights of the T output tokens to score (the
            decoder's prompt left out) over the F source positions, any float dtype.

    Returns:
        (N, H) float64 Kendall tau-b between t and each row's argmax, in [-1, 1]; 0 for
        a head whose argmax never changes, and for fewer than two tokens.

    Raises:
        ValueError: ``cross`` is not 4-dimensional, or has no source position.
    """
    from scipy.stats import kendalltau

    weights = np.asarray(cross.float() if isinstance(cross, torch.Tensor) else cross)
    if weights.ndim != 4 or weights.shape[-1] == 0:
        raise ValueError(f"cross: (N, H, T, F) with F >= 1, got shape {weights.shape}")
    layers, heads, tokens, _ = weights.shape
    scores = np.zeros((layers, heads))
    if tokens < 2:
        return scores
    attended = weights.argmax(axis=-1)  # (N, H, T)
    order = np.arange(tokens)
    for layer in range(layers):
        for head in range(heads):
            tau = kendalltau(order, attended[layer, head]).statistic
            scores[layer, head] = 0.0 if math.isnan(tau) else tau
    return scores


def transcription_alignment(transcription: Transcription) -> np.ndarray:
    """:func:`monotonic_alignment` of one clip's cross attention, transcript tokens only.

    The rows are the teacher-forced pass's positions from the end of the prompt
    (``<|startoftranscript|>``, ``<|notimestamps|>``) to the last transcript token; the
    columns are the encoder frames that hold the audio.

    Returns:
        (N, H) float64, N decoder layers, H heads.
    """
    rows = slice(transcription.prompt_length, len(transcription.decoder_ids))
    return monotonic_alignment(transcription.block("cross", lambda w: w[:, rows]))


def speech_alignment_scores(
    model: SpeechModel, clips: Sequence[np.ndarray], device: str = "auto"
) -> np.ndarray:
    """Each cross-attention head's alignment score, the mean over ``clips``.

    Each clip is transcribed greedily and its transcript's teacher-forced pass recorded
    (:meth:`..speech.SpeechModel.transcribe`); its weights are the model's own eager ones.

    Args:
        model: a Whisper model.
        clips: 16 kHz mono float32 audio, (S,) each, at most 30 s.
        device: where to run ("auto", "cpu", "cuda").

    Returns:
        (N, H) float64: N decoder layers, H heads (Whisper tiny.en: 4 x 6 = 24 heads).

    Raises:
        ValueError: no clip.
        AttentionInputError: as :meth:`..speech.SpeechModel.transcribe` (a clip over 30 s).
    """
    if not clips:
        raise ValueError("clips: give at least one")
    scores = [transcription_alignment(model.transcribe(clip, device=device)) for clip in clips]
    return np.mean(scores, axis=0)  # type: ignore[no-any-return]

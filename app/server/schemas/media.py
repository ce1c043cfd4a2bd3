"""Responses of POST /api/v1/speech and POST /api/v1/vision (for the OpenAPI schema).

The requests are multipart forms (a file and a few fields), declared on the routes.
Arrays are plain JSON numbers or Plotly.js typed arrays (``{"dtype", "bdata", "shape"}``),
as ``encoding`` asks (:mod:`attnviz.server.transport`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class SpeechBlock(BaseModel):
    """One attention block of a transcription, every layer and head."""

    weights: Any = Field(
        description="(N, H, L_q, L_k): encoder (N, H, F', F') frames, decoder (N, H, T, T) "
        "tokens, cross (N, H, T, F) tokens over frames."
    )
    frames_per_cell: int = Field(
        1,
        description="Encoder frames averaged (queries) and summed (keys) per cell; the "
        "encoder's maps of long audio are pooled to at most 300 x 300.",
    )


class SpeechResponse(BaseModel):
    """An audio clip transcribed by Whisper, with its attention over time."""

    model_config = {"protected_namespaces": ()}

    model: str
    text: str = Field(description="The transcript.")
    duration_s: float = Field(description="The audio's length, in seconds.")
    sample_rate: int = Field(description="16000: the audio is resampled to it, mono.")
    frame_s: float = Field(description="Seconds per encoder frame (0.02).")
    num_frames: int = Field(description="F, the encoder frames holding the audio.")
    decoder_tokens: list[str] = Field(
        description="The decoder's input tokens (prompt, then transcript): rows and "
        "columns of the decoder block, rows of the cross block."
    )
    decoder_ids: list[int] = Field(description="The ids of decoder_tokens.")
    next_tokens: list[str] = Field(
        description="What each decoder position produced; row i of the cross block is the "
        "attention over the audio that produced next_tokens[i]."
    )
    first_text_row: int = Field(
        description="The first row that produced a transcribed token (the prompt's last)."
    )
    alignment_heads: list[list[int]] = Field(
        description="[layer, head] of the cross-attention heads the model's config names "
        "as following the words in time (Whisper's alignment_heads)."
    )
    waveform: dict[str, Any] = Field(
        description="The waveform's min and max per span of step_s seconds, for drawing."
    )
    blocks: dict[str, SpeechBlock]
    transcribe_ms: float = Field(description="Greedy decoding, in ms.")
    compute_ms: float = Field(description="The recorded teacher-forced pass, in ms.")
    device: str


class ImageLabel(BaseModel):
    """One of a classifier's most likely labels."""

    label: str
    probability: float


class VisionResponse(BaseModel):
    """An image through a vision transformer: one token's attention over the patches."""

    model_config = {"protected_namespaces": ()}

    model: str
    architecture: str
    image: str = Field(
        description="The image as the model saw it (resized, cropped), a PNG data URL."
    )
    width: int = Field(description="Its width in pixels.")
    height: int = Field(description="Its height in pixels.")
    patch_size: int = Field(description="p: each patch is p x p pixels.")
    grid: list[int] = Field(description="[rows, cols] of patches; token P + r*cols + c.")
    prefix: list[str] = Field(description="The P tokens before the patches ([CLS], ...).")
    num_tokens: int = Field(description="L = P + rows x cols.")
    num_layers: int
    num_heads: int
    query: int = Field(description="The token whose attention is given (0: [CLS]).")
    query_name: str = Field(description='"[CLS]", or "patch (row r, column c)".')
    weights: Any = Field(description="(N, H, L): the query's row in every layer and head.")
    rollout: Any = Field(
        description="(N, L): the query's row of attention rollout through layers 0..n."
    )
    labels: list[ImageLabel] = Field(
        description="A classifier's top 5 labels with probabilities; [] for a backbone."
    )
    compute_ms: float
    device: str

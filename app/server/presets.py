"""Named example requests, one per lesson of the tutorials. The first is the default."""

from __future__ import annotations

from typing import Final

from ..attention.tutorials import TUTORIAL_BATCH, TUTORIAL_TARGETS
from .schemas.attention import AttentionRequest, Preset


def _batch(rows: list[list[int]]) -> list[list[int] | str]:
    """A batch of id sequences, typed as a request's ``sequences`` (ids or words)."""
    return list(rows)


PRESETS: Final[tuple[Preset, ...]] = (
    Preset(
        name="tutorial-padding-causal",
        title="Tutorial batch: padding & causal mask",
        description="The 5-sequence id batch of tutorial 000 (pad_id 0, d_model 8, 2 heads) "
        "with padding & causal masks: padded and future keys get weight 0.",
        request=AttentionRequest(
            sequences=_batch(TUTORIAL_BATCH), d_model=8, num_heads=2, mask="padding_causal"
        ),
    ),
    Preset(
        name="i-love-deep-learning",
        title='"I love deep learning": 8 heads, no mask',
        description="Tutorial 001's sentence through d_model 64 and 8 heads, as in its "
        "per-head heatmaps.",
        request=AttentionRequest(
            sequences=["I love deep learning"], d_model=64, num_heads=8, mask="none"
        ),
    ),
    Preset(
        name="tutorial-encoder-decoder",
        title="Tutorials' encoder-decoder (cross) attention",
        description="Queries from tutorial 000's 5 target sequences (T_L 12), keys and values "
        "from its source batch (S_L 10), with the source padding mask.",
        request=AttentionRequest(
            sequences=_batch(TUTORIAL_BATCH),
            targets=_batch(TUTORIAL_TARGETS),
            d_model=8,
            num_heads=2,
            mask="padding",
        ),
    ),
    Preset(
        name="fully-masked-rows",
        title="Fully-masked rows: -inf vs the tutorials' -1e9",
        description="The first query of sequence 0 is padding, so under padding & causal "
        "it has no key to attend to. With the -inf fill its row is 0; switch the mask fill "
        "to -1e9 (the tutorials' choice) and it becomes uniform.",
        request=AttentionRequest(
            sequences=["<pad> the cat sat", "the cat sat on the mat"],
            d_model=8,
            num_heads=2,
            mask="padding_causal",
        ),
    ),
)
DEFAULT_PRESET: Final = PRESETS[0]

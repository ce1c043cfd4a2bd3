"""Image share: how much of each head's attention goes from the text to the image tokens.

In a vision-language decoder (LLaVA, Qwen2-VL; :mod:`..vision_language`) every layer's
causal self-attention reads text and image tokens alike. Studies of where these models
look (Zhang et al. 2025, "MLLMs Know Where to Look: Training-free Perception of Small
Visual Details", ICLR; Kang et al. 2025, "Your Large Vision-Language Model Only Needs A
Few Attention Heads For Visual Grounding", CVPR) start from how much attention a head
gives the image at all: most heads give it little, a few most of theirs.

The score of head (l, h) on one prompt: with Q the text tokens after the first image
token (the queries that can see an image: the attention is causal) and I the image
tokens,

    share(l, h) = 1/|Q| * sum_{q in Q} sum_{k in I} A[l, h, q, k],

the mean over the text queries of the weight their row puts on the image tokens, in
[0, 1]. A head's score is the mean over the prompts of a corpus of image-prompt pairs.
``docs/methods.md`` defines it with the alignment score (:mod:`.alignment`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import numpy as np
import torch

from ...attention.errors import AttentionInputError

if TYPE_CHECKING:
    from PIL import Image

    from ..tokens import TokenizedBatch
    from ..vision_language import VisionLanguageModel

PAIRS_FIELD: Final = "pairs"


def image_share(weights: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
    """Each head's share of text-to-image attention in one layer (module docstring).

    Args:
        weights: (H, L, L) one layer's attention weights over one prompt, any float dtype.
        image: (L,) bool, True at the image tokens.

    Returns:
        (H,) float64, each head's mean weight from the text queries after the first image
        token to all image tokens, in [0, 1].

    Raises:
        ValueError: shapes that disagree, no image token, or no text token after one.
    """
    if weights.ndim != 3 or weights.shape[1:] != (image.shape[0], image.shape[0]):
        raise ValueError(
            f"weights (H, L, L) over the L={image.shape[0]} tokens, got {tuple(weights.shape)}"
        )
    where = image.nonzero().flatten()
    if where.numel() == 0:
        raise ValueError("no image token")
    queries = ~image
    queries[: int(where[0])] = False
    if not bool(queries.any()):
        raise ValueError("no text token after the first image token")
    rows = weights.double()[:, queries]  # (H, |Q|, L)
    return rows[..., image].sum(-1).mean(-1)


def prompt_image_share(
    model: VisionLanguageModel, batch: TokenizedBatch, *, device: str = "cpu"
) -> np.ndarray:
    """(N, H) float64 :func:`image_share` of every layer and head of the decoder on one prompt.

    Args:
        model: a vision-language model.
        batch: one prompt with its images (``VisionLanguageModel.tokenize_images``).
        device: "auto", "cpu" or "cuda".

    Raises:
        ValueError: as :func:`image_share` (a prompt without images).
    """
    image = batch.input_ids[0] == model.image_token_id
    result = model.run(batch, device=device)
    return np.stack(
        [
            image_share(
                result.layer_weights("decoder", layer)[0], image.to(torch.device("cpu"))
            ).numpy()
            for layer in range(result.num_layers("decoder"))
        ]
    )


def image_share_scores(
    model: VisionLanguageModel,
    pairs: Sequence[tuple[Image.Image | Sequence[Image.Image], str]],
    *,
    device: str = "cpu",
) -> np.ndarray:
    """Each head's image share, the mean over a corpus of image-prompt pairs.

    Args:
        model: a vision-language model (LLaVA, Qwen-VL, Idefics3, SmolVLM).
        pairs: (image or images, prompt) each; the images go before the prompt unless it
            places them (:meth:`.vision_language.VisionLanguageModel.prompt_with_images`).
        device: "auto", "cpu" or "cuda".

    Returns:
        (N, H) float64 in [0, 1].

    Raises:
        AttentionInputError: (field ``pairs``) no pair; as the prompts' tokenisation.
    """
    if not pairs:
        raise AttentionInputError(PAIRS_FIELD, "no image-prompt pair to score")
    total = None
    for images, prompt in pairs:
        pictures = list(images) if isinstance(images, Sequence) else [images]
        share = prompt_image_share(model, model.tokenize_images(prompt, pictures), device=device)
        total = share if total is None else total + share
    assert total is not None
    return total / len(pairs)

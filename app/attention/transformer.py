"""Encoder and decoder layers, stacked: attention of every layer and head.

Source: tutorial 004_0d24e55d99c5e317.txt (``EncoderLayer``: multi-head self-attention,
residual + LayerNorm, ``PositionwiseFeedForwardLayer`` fc1 -> ReLU -> fc2, residual +
LayerNorm) and Vaswani et al. 2017 sections 3.1 (post-LN layers), 3.3 (feed-forward)
and 3.5 (sinusoidal positional encoding). The decoder layer adds, between the two,
cross attention to the encoder output (tutorial 000 section 7.8).

Masks (True = attend): encoder self-attention uses the source padding mask; decoder
self-attention the target padding & causal mask; cross attention the source padding
mask. The stack runs in eval mode: no dropout. The input is ``embedding(ids) + PE``
(the embedding is not multiplied by sqrt(d_model): with N(0, 1) embeddings that
would drown the positional encoding).

Shapes use the legend of :mod:`attnviz.attention`, with N = num_layers, S = L_k of the
source and T = L_q of the target.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, get_args

import torch
from torch import nn

from .cancellation import check_cancelled
from .engine import DTYPES, LayerConfig, check_dtype, resolve_device
from .errors import AttentionInputError
from .masks import causal_mask, padding_mask
from .mha import MultiHeadAttention, ScaleMode, count_parameters
from .parameters import build_seeded
from .tokens import SequenceInput, encode_source_target

PositionalEncodingName = Literal["sinusoidal", "none"]
POSITIONAL_ENCODINGS: Final[tuple[str, ...]] = get_args(PositionalEncodingName)
MAX_LAYERS: Final = 12


def sinusoidal_positional_encoding(length: int, d_model: int) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same).

    Source: Vaswani et al. 2017, section 3.5.

    Returns:
        (length, d_model) float32.
    """
    position = torch.arange(length, dtype=torch.float64)[:, None]  # (L, 1)
    div_term = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model)
    )  # (ceil(d_model / 2),)
    encoding = torch.zeros(length, d_model, dtype=torch.float64)
    encoding[:, 0::2] = torch.sin(position * div_term)
    encoding[:, 1::2] = torch.cos(position * div_term[: d_model // 2])
    return encoding.to(torch.float32)


Activation = Callable[[torch.Tensor], torch.Tensor]


class PositionwiseFeedForward(nn.Module):
    """fc2(activation(fc1(x))), applied to each position alone (tutorial 004, section 3.3).

    Args:
        d_model: model width. d_ff: hidden width.
        activation: ReLU (the paper and tutorial 004) by default; BERT uses GELU.
    """

    def __init__(self, d_model: int, d_ff: int, activation: Activation = torch.relu) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, d_model) -> (B, L, d_model)."""
        return self.fc2(self.activation(self.fc1(x)))  # type: ignore[no-any-return]


class EncoderLayer(nn.Module):
    """Self-attention, add & norm, feed-forward, add & norm (tutorial 004 ``EncoderLayer``).

    The same post-LN layer is BERT's (Devlin et al. 2019, section 3), with GELU and
    LayerNorm eps 1e-12: :mod:`attnviz.pretrained` loads trained weights into it.

    Args:
        d_model, num_heads, d_ff: sizes.
        activation: of the feed-forward; ReLU by default.
        layer_norm_eps: eps of both LayerNorms; PyTorch's 1e-5 by default.
        scale_mode: of the attention scale, see
            :func:`attnviz.attention.mha.scaled_dot_product_attention`.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        *,
        activation: Activation = torch.relu,
        layer_norm_eps: float = 1e-5,
        scale_mode: ScaleMode = "divide",
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, scale_mode=scale_mode)
        self.attn_layer_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.ff = PositionwiseFeedForward(d_model, d_ff, activation)
        self.ff_layer_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)

    def forward(
        self, src: torch.Tensor, src_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Src (B, S, d_model), src_mask (B, 1, S) True = attend.

        Returns:
            (B, S, d_model) and the self-attention weights (B, H, S, S).
        """
        attended, weights = self.self_attn(src, src, src, src_mask)
        src = self.attn_layer_norm(src + attended)
        src = self.ff_layer_norm(src + self.ff(src))
        return src, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, cross attention, feed-forward; each then add & norm.

    Source: Vaswani et al. 2017, section 3.1; the cross attention attends from the
    target to the encoder output (tutorial 000 section 7.8).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.cross_attn_layer_norm = nn.LayerNorm(d_model)
        self.ff = PositionwiseFeedForward(d_model, d_ff)
        self.ff_layer_norm = nn.LayerNorm(d_model)

    def forward(
        self,
        trg: torch.Tensor,
        memory: torch.Tensor,
        trg_mask: torch.Tensor,
        src_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Trg (B, T, d_model), memory (B, S, d_model) the encoder output.

        Args:
            trg: (B, T, d_model) decoder input.
            memory: (B, S, d_model) encoder output.
            trg_mask: (B, T, T) padding & causal, True = attend.
            src_mask: (B, 1, S) source padding, True = attend.

        Returns:
            (B, T, d_model), self-attention weights (B, H, T, T) and cross-attention
            weights (B, H, T, S).
        """
        attended, self_weights = self.self_attn(trg, trg, trg, trg_mask)
        trg = self.self_attn_layer_norm(trg + attended)
        attended, cross_weights = self.cross_attn(trg, memory, memory, src_mask)
        trg = self.cross_attn_layer_norm(trg + attended)
        trg = self.ff_layer_norm(trg + self.ff(trg))
        return trg, self_weights, cross_weights


class TransformerStack(nn.Module):
    """Embedding, N encoder layers and, optionally, N decoder layers.

    Args:
        vocab_size, d_model, num_heads, d_ff: sizes.
        num_layers: N, for the encoder and the decoder alike.
        decoder: build the decoder layers too.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        num_layers: int,
        decoder: bool,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.encoder = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers)
        )
        self.decoder = nn.ModuleList(
            DecoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers if decoder else 0)
        )


@dataclass(frozen=True)
class TransformerResult:
    """Attention of every layer and head of a stack, on the CPU.

    Attributes:
        encoder_weights: (N, B, H, S, S) encoder self-attention.
        decoder_self_weights: (N, B, H, T, T) decoder masked self-attention, or None.
        cross_weights: (N, B, H, T, S) decoder cross attention, or None.
        encoder_output: (B, S, d_model); decoder_output: (B, T, d_model) or None.
        source_labels, target_labels: per sequence, one label per position.
        num_parameters: every parameter of the stack, the embedding included.
        compute_ms: wall time of the forward pass in milliseconds (ms).
        device, dtype: where and how it ran.
    """

    encoder_weights: torch.Tensor
    decoder_self_weights: torch.Tensor | None
    cross_weights: torch.Tensor | None
    encoder_output: torch.Tensor
    decoder_output: torch.Tensor | None
    source_labels: list[list[str]]
    target_labels: list[list[str]] | None
    num_parameters: int
    compute_ms: float
    device: str
    dtype: str


def compute_transformer(
    sequences: Sequence[SequenceInput],
    config: LayerConfig | None = None,
    *,
    targets: Sequence[SequenceInput] | None = None,
    d_ff: int = 16,
    num_layers: int = 2,
    positional_encoding: str = "sinusoidal",
    dtype: str = "float32",
) -> TransformerResult:
    """Run a seeded encoder (and decoder, when targets are given) stack.

    Args:
        sequences: B source sequences (ids or words).
        config: the layer, as in :func:`attnviz.attention.compute_attention`; its seed
            draws every parameter (:mod:`attnviz.attention.parameters`).
        targets: optional B target sequences: adds N decoder layers.
        d_ff: hidden width of the feed-forward (tutorial 004's pf_dim).
        num_layers: N, 1 to 12.
        positional_encoding: "sinusoidal" or "none".
        dtype: as in :func:`attnviz.attention.compute_attention`.

    Returns:
        A :class:`TransformerResult`.

    Raises:
        AttentionInputError: naming the field, for the inputs
            :func:`attnviz.attention.compute_attention` refuses, a d_ff below 1, a
            num_layers outside 1..12 or an unknown positional_encoding.
    """
    layer = config or LayerConfig()
    layer.check()
    if d_ff < 1:
        raise AttentionInputError("d_ff", f"must be >= 1, got {d_ff}")
    if not 1 <= num_layers <= MAX_LAYERS:
        raise AttentionInputError("num_layers", f"must lie in 1..{MAX_LAYERS}, got {num_layers}")
    if positional_encoding not in POSITIONAL_ENCODINGS:
        raise AttentionInputError(
            "positional_encoding",
            f"unknown {positional_encoding!r}; choose one of {', '.join(POSITIONAL_ENCODINGS)}",
        )
    check_dtype(dtype)
    source, target = encode_source_target(
        sequences, targets, pad_id=layer.pad_id, vocab_size=layer.vocab_size
    )
    run_on = resolve_device(layer.device)
    stack = build_seeded(
        lambda: TransformerStack(
            layer.vocab_size,
            layer.d_model,
            layer.num_heads,
            d_ff,
            num_layers,
            decoder=target is not None,
        ),
        layer.seed,
    ).to(run_on, DTYPES[dtype])

    def embed(ids: torch.Tensor) -> torch.Tensor:
        x: torch.Tensor = stack.embedding(ids)  # (B, L, d_model)
        if positional_encoding == "sinusoidal":
            pe = sinusoidal_positional_encoding(ids.shape[1], layer.d_model)
            x = x + pe.to(run_on, x.dtype)
        return x

    src_ids = source.ids.to(run_on)
    src_mask = padding_mask(src_ids, layer.pad_id)  # (B, 1, S)
    with torch.inference_mode():
        start = time.perf_counter()
        x = embed(src_ids)
        encoder_weights = []
        for enc_layer in stack.encoder:
            check_cancelled()
            x, weights = enc_layer(x, src_mask)
            encoder_weights.append(weights)
        memory = x
        decoder_self, cross, decoder_output = None, None, None
        if target is not None:
            trg_ids = target.ids.to(run_on)
            trg_mask = padding_mask(trg_ids, layer.pad_id) & causal_mask(trg_ids.shape[1], run_on)
            y = embed(trg_ids)
            self_list, cross_list = [], []
            for dec_layer in stack.decoder:
                check_cancelled()
                y, self_weights, cross_weights = dec_layer(y, memory, trg_mask, src_mask)
                self_list.append(self_weights)
                cross_list.append(cross_weights)
            decoder_self = torch.stack(self_list).cpu()
            cross = torch.stack(cross_list).cpu()
            decoder_output = y.cpu()
        if run_on.type == "cuda":
            torch.cuda.synchronize(run_on)
        compute_ms = (time.perf_counter() - start) * 1000.0

    return TransformerResult(
        encoder_weights=torch.stack(encoder_weights).cpu(),
        decoder_self_weights=decoder_self,
        cross_weights=cross,
        encoder_output=memory.cpu(),
        decoder_output=decoder_output,
        source_labels=source.labels,
        target_labels=None if target is None else target.labels,
        num_parameters=count_parameters(stack),
        compute_ms=compute_ms,
        device=run_on.type,
        dtype=dtype,
    )

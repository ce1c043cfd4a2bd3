"""Pretrained transformers models: real text in, any layer's and head's attention out.

transformers is the runtime for every family (encoders, decoders, encoder-decoders):
:mod:`.loading` loads a local directory or GGUF file, :mod:`.model` runs it while
:mod:`.recorder` keeps each attention call, and any head's weights are computed on
demand by the model's own eager attention. Needs the ``pretrained`` extra; without it
:data:`MODELS` stays empty and the API says how to install it. Shapes: N layers, B
inputs, H heads, L tokens (padded), as in :mod:`attnviz.attention`.
"""

from ..attention.rollout import attention_rollout
from .blocks import BLOCKS, Block, Family
from .loading import PACKAGED_MODELS, PRETRAINED_EXTRA, load_model, load_model_dir, wrap_model
from .model import ModelFormatError, PretrainedModel
from .registry import MODELS, ModelEntry, ModelNotReady, ModelRegistry
from .results import Generation, PretrainedAttentions
from .tokens import TokenizedBatch

__all__ = [
    "BLOCKS",
    "MODELS",
    "PACKAGED_MODELS",
    "PRETRAINED_EXTRA",
    "Block",
    "Family",
    "Generation",
    "ModelEntry",
    "ModelFormatError",
    "ModelNotReady",
    "ModelRegistry",
    "PretrainedAttentions",
    "PretrainedModel",
    "TokenizedBatch",
    "attention_rollout",
    "load_model",
    "load_model_dir",
    "wrap_model",
]

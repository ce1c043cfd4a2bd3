"""What AttnViz knows about particular architectures, by transformers' names, in one place.

Everything else reads a model's config and modules as transformers builds them; these
tables name the architectures and modules that need telling apart: which family a config
is, which model types read images or speech, which compute a position bias outside the
attention interface (drawn from their output_attentions), whose positions start after the
pad id, how a model names its list of transformer blocks and its cross attention.
"""

from __future__ import annotations

from typing import Any, Final

from .blocks import Block, Family

ALIBI_TYPES: Final = frozenset({"bloom", "mpt", "falcon"})
"""Model types with ALiBi position bias (Press et al. 2022); transformers computes it inside
their own attention modules, outside the attention interface."""
POSITIONS_AFTER_PADDING: Final = frozenset(
    {
        "roberta",
        "xlm-roberta",
        "xlm-roberta-xl",
        "camembert",
        "data2vec-text",
        "roberta-prelayernorm",
    }
)
"""Model types whose position ids start after ``pad_token_id`` (transformers'
``create_position_ids_from_input_ids``): roberta-base's 514 positions take 512 tokens."""
VISION_TYPES: Final = frozenset({"vit", "deit", "dinov2", "dinov2_with_registers", "vit_msn"})
"""transformers ``model_type``s loaded as image models (their attention goes through
transformers' attention interface)."""
SPEECH_TYPES: Final = frozenset({"whisper"})
"""transformers ``model_type``s loaded as speech models (:mod:`.speech`)."""
LAYER_LISTS: Final = frozenset({"layers", "layer", "h", "block", "blocks"})
"""Names transformers gives the list of a model's transformer blocks (Llama ``layers``,
BERT ``layer``, GPT-2 ``h``, T5 ``block``)."""
CROSS_MODULES: Final = frozenset({"encoder_attn", "EncDecAttention", "crossattention"})
"""Module names transformers gives cross attention (BART/Marian, T5, BERT as a decoder)."""


def family_of(config: Any) -> Family:
    """The family of a transformers config (:mod:`.blocks` lists the families and blocks).

    A vision-language config (:func:`vision_language_type`) is ``"vision-language"``; a
    config that says it is an encoder-decoder is one; else its ``architectures`` decide
    (``...ForCausalLM`` and ``...LMHeadModel``: a decoder); else whether transformers has a
    causal LM and no masked LM of its model type.
    """
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    if vision_language_type(config) is not None:
        return "vision-language"
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    architectures = getattr(config, "architectures", None) or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):
        return "decoder"
    if architectures:
        return "encoder"
    model_type = getattr(config, "model_type", "")
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and (
        model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES
    ):
        return "decoder"
    return "encoder"


def vision_language_type(config: Any) -> str | None:
    """The ``model_type`` of a vision-language config, else None.

    A vision-language model is an image encoder feeding a text decoder (LLaVA, Qwen2-VL,
    Idefics3 and SmolVLM, PaliGemma, Gemma 3, ...): transformers' image-text-to-text
    models (``MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES``), less the image models AttnViz
    runs (:data:`VISION_TYPES`). Read as a text model, one would be mistaken for an
    encoder and run without its image.
    """
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    model_type = str(getattr(config, "model_type", ""))
    if model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES and model_type not in VISION_TYPES:
        return model_type
    return None


def block_named(module_name: str) -> Block:
    """The block of an encoder-decoder's attention module, by its dotted name in the model.

    ``model.decoder.layers.0.encoder_attn`` is ``"cross"`` (:data:`CROSS_MODULES`), a name
    with an ``encoder`` part ``"encoder"``, any other ``"decoder"``.
    """
    parts = set(module_name.split("."))
    if parts & CROSS_MODULES:
        return "cross"
    return "encoder" if "encoder" in parts else "decoder"

"""The models on offer: GET /api/v1/models (each model's description and its family's)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ...pretrained.blocks import Block

__all__ = ["FamilyInfo", "ModelInfo", "ModelListResponse"]


class FamilyInfo(BaseModel):
    """A model family as the page reads it (:meth:`attnviz.pretrained.families.FamilySpec.page`)."""

    name: Literal["encoder", "decoder", "encoder-decoder", "vision-language"]
    blocks: list[Block] = Field(description="Its attention blocks, the first the default.")
    text_pairs: bool = Field(description="Whether `text_pairs` (sentence pairs) applies.")
    targets: bool = Field(description="Whether `targets` (the decoder's text) is required.")
    generates: bool = Field(description="Whether `max_new_tokens` and `top_k` apply.")
    causal_blocks: list[Block] = Field(description="The blocks whose maps are causal.")
    input_label: Literal["prompt", "sentence", "text"] = Field(
        description="What one input is called."
    )
    gradient_target: Literal["embedding", "logit"] = Field(
        description="What a gradient method explains: the first token's embedding score, "
        "or the last word's next-token logit (`target_token_id` applies)."
    )
    reads_images: bool = Field(
        False, description="Whether a prompt may hold images (a vision-language model)."
    )


class ModelInfo(BaseModel):
    """A pretrained model on offer (GET /api/v1/models); sizes are null until it is ready."""

    model_config = ConfigDict(protected_namespaces=())

    name: str = Field(description="What a request puts in `model`.")
    source: str = Field(description="The package (and version), directory or GGUF file.")
    state: Literal["loading", "ready", "failed"] = Field(
        description="Models load in the background after start-up: a request to one still "
        "loading is a 503 with Retry-After; one that failed is a 422 with the reason."
    )
    error: str | None = Field(None, description="Why it failed to load.")
    modality: Literal["text", "speech", "image"] | None = Field(
        None,
        description="What it reads: text (POST /api/v1/models/attention), speech (POST "
        "/api/v1/speech) or images (POST /api/v1/vision).",
    )
    family: Literal["encoder", "decoder", "encoder-decoder", "vision-language"] | None = None
    architecture: str | None = Field(
        None, description="The config's model_type (bert, llama, ...)."
    )
    blocks: list[Block] | None = Field(
        None,
        description="Its attention blocks: ['encoder'], ['decoder'], or ['encoder', "
        "'decoder', 'cross'] for an encoder-decoder.",
    )
    num_layers: int | None = Field(None, description="N, the layers (of the encoder).")
    num_heads: int | None = Field(None, description="H, the query heads of every layer.")
    num_key_value_heads: int | None = Field(
        None,
        description="H_kv, the key/value heads (H // H_kv query heads share each; "
        "= num_heads without grouped-query attention).",
    )
    d_model: int | None = Field(None, description="Hidden size.")
    d_ff: int | None = Field(None, description="Hidden width of the feed-forward.")
    vocab_size: int | None = None
    max_tokens: int | None = Field(
        None, description="The most tokens of one input (learned positions); null if unbounded."
    )
    num_parameters: int | None = Field(None, description="Parameters of the loaded model.")
    chat_template: bool | None = Field(None, description="Whether prompts can use `chat`.")
    can_generate: bool | None = Field(None, description="Whether `max_new_tokens` applies.")
    family_spec: FamilyInfo | None = Field(
        None, description="What its family reads and gives (attnviz.pretrained.families)."
    )
    load_s: float | None = Field(None, description="How long loading took, in seconds.")
    dtype: str | None = Field(
        None, description="The dtype of its weights: float32, bfloat16 or float16 (ATTNVIZ_DTYPE)."
    )
    parameter_bytes: int | None = Field(
        None, description="Bytes of its parameters in that dtype, wherever they lie."
    )
    layers_per_device: dict[str, int] | None = Field(
        None,
        description="How many transformer blocks lie on each device: 'cuda:0', 'cpu', "
        "'mps', or 'disk' for blocks offloaded there (ATTNVIZ_DEVICE_MAP, "
        "ATTNVIZ_MAX_MEMORY, ATTNVIZ_OFFLOAD_DIR).",
    )
    device: str | None = Field(
        None, description="Where its inputs go and a request's device 'auto' runs it."
    )
    placed: bool | None = Field(
        None,
        description="Whether a device map placed it: it then runs only where it lies, and a "
        "request for another device is a 422.",
    )
    attention_path: Literal["recorded", "output_attentions"] | None = Field(
        None,
        description="How its maps are obtained: 'recorded' (the fused path: transformers' "
        "attention interface, any length the memory limit admits, every method), or "
        "'output_attentions' for a family whose attention modules compute attention "
        "themselves (GPT-Neo, BLOOM): the model's own eager weights, every layer at once "
        "(shorter inputs), without the methods that need queries, keys or values.",
    )
    attention_note: str | None = Field(
        None, description="With 'output_attentions': why, and what is not available."
    )


class ModelListResponse(BaseModel):
    """The pretrained models on offer; empty without the pretrained extra."""

    default: str | None = Field(description="The model used when a request names none.")
    models: list[ModelInfo]
    loading: bool = Field(False, description="Whether any model is still loading.")
    install_hint: str | None = Field(None, description="How to get a model, when there is none.")

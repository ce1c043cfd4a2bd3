"""The pretrained models' endpoints: GET /api/v1/models and POST /api/v1/models/attention."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from ...attention.engine import DeviceName
from ..limits import MAX_BATCH, MAX_MODEL_DISPLAY_SIZE, MAX_MODEL_NAME_CHARS, MAX_TEXT_CHARS
from ..transport import Encoding
from .common import DEVICE_FIELD, NONEMPTY_WORDS, EncodedArray, StrictRequest, Tensor4

TextIn = Annotated[
    str,
    Field(
        max_length=MAX_TEXT_CHARS,
        description="Raw text; the model's own WordPiece tokenizer splits it. A text "
        "with no token in it, or longer than the model's positions (512 for BERT), is a "
        "422 naming it.",
        json_schema_extra={"pattern": NONEMPTY_WORDS},
        examples=["The cat sat on the mat."],
    ),
]


class ModelInfo(BaseModel):
    """A pretrained model the server has loaded (GET /api/v1/models)."""

    name: str = Field(description="What a request puts in `model`.")
    source: str = Field(description="The package (and version) or directory it came from.")
    architecture: Literal["bert"] = "bert"
    num_layers: int = Field(description="N, the encoder layers.")
    num_heads: int = Field(description="H, the heads of every layer.")
    d_model: int = Field(description="Hidden size; d_k = d_model // num_heads.")
    d_ff: int = Field(description="Hidden width of the feed-forward.")
    vocab_size: int
    max_tokens: int = Field(description="The most tokens of one input, [CLS] and [SEP] included.")
    num_parameters: int = Field(description="Parameters of the encoder (no pooler or heads).")


class ModelListResponse(BaseModel):
    """The pretrained models on offer; empty without the pretrained extra."""

    default: str | None = Field(description="The model used when a request names none.")
    models: list[ModelInfo]
    install_hint: str | None = Field(None, description="How to get a model, when there is none.")


class PretrainedAttentionRequest(StrictRequest):
    """Texts (or sentence pairs) to run through a pretrained encoder."""

    model_config = ConfigDict(
        protected_namespaces=(),
        json_schema_extra={
            "examples": [
                {"texts": ["The cat sat on the mat because it was tired."]},
                {
                    "model": "all-MiniLM-L6-v2",
                    "texts": ["The cat sat on the mat.", "Where did the cat sit?"],
                    "text_pairs": ["It was tired.", None],
                    "encoding": "base64_float32",
                },
            ]
        },
    )

    model: str | None = Field(
        None,
        max_length=MAX_MODEL_NAME_CHARS,
        description="A name from GET /api/v1/models; default the first. A name the server "
        "has not loaded (or no model at all) is a 422 naming model.",
    )
    texts: list[TextIn] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description="B texts (sentence A of each input), padded with [PAD] to the longest.",
    )
    text_pairs: list[TextIn | None] | None = Field(
        None,
        max_length=MAX_BATCH,
        description="Optional sentence B of each input (null for none): the input is then "
        "[CLS] A [SEP] B [SEP], with segment ids 0 and 1, as BERT takes pairs. One entry "
        "per text (else 422 naming text_pairs).",
    )
    device: DeviceName = DEVICE_FIELD
    encoding: Encoding = Field("json", description="As in the attention request.")
    sequence_index: int | None = Field(
        None,
        ge=0,
        description="Return only this input, run alone (so without [PAD]): B = 1 and L its "
        "length. Must be below B (else 422). The display options below need it (one of "
        "them without it is a 422 naming that option).",
    )
    hide_special_tokens: bool = Field(
        False,
        description="With sequence_index: remove [CLS] and [SEP] from rows and columns and "
        "renormalise every row to sum to 1 (means are then of the renormalised maps).",
    )
    layer_index: int | None = Field(
        None,
        ge=0,
        description="With sequence_index: only this layer's attentions and head mean. Must "
        "be below the model's layers (else 422).",
    )
    display_size: int | None = Field(
        None,
        ge=8,
        le=MAX_MODEL_DISPLAY_SIZE,
        description="With sequence_index: block-max pool attentions and head means to at most "
        "this many rows and columns (layer_mean and rollout are never pooled).",
    )


class PretrainedDownsample(BaseModel):
    """How attentions and head means were pooled for display (``display_size``)."""

    method: Literal["max"] = "max"
    factor: int = Field(description="Tokens per displayed row and column.")
    full_length: int = Field(description="L before pooling.")


class PretrainedAttentionResponse(BaseModel):
    """Every layer's and head's attention of a pretrained encoder, and maps derived from it."""

    model: str
    shape: list[int] = Field(
        description="[N, B, H, L, L], the shape of `attentions` as returned (after selection "
        "and pooling)."
    )
    num_layers: int
    num_heads: int
    d_model: int
    tokens: list[list[str]] = Field(
        description="(B, L) WordPiece tokens: [CLS], ##pieces, [SEP], [PAD]."
    )
    input_ids: list[list[int]] = Field(description="(B, L) token ids.")
    token_type_ids: list[list[int]] = Field(description="(B, L) segment: 0 = A, 1 = B.")
    attention_mask: list[list[bool]] = Field(
        description="(B, L) True for real tokens, False for [PAD] (the key padding mask)."
    )
    special_tokens_mask: list[list[bool]] = Field(
        description="(B, L) True for [CLS], [SEP] and [PAD]."
    )
    lengths: list[int] = Field(description="(B,) real tokens of each input, [CLS] and [SEP] in.")
    attentions: list[Tensor4] | EncodedArray = Field(
        description="(N, B, H, L, L) softmax weights of every layer and head, as "
        "transformers' output_attentions; [PAD] keys get 0."
    )
    head_mean: Tensor4 | EncodedArray = Field(description="(N, B, L, L) mean over heads.")
    layer_mean: list[list[list[float]]] | EncodedArray = Field(
        description="(B, L, L) mean over every layer and head."
    )
    rollout: list[list[list[float]]] | EncodedArray = Field(
        description="(B, L, L) attention rollout across layers (Abnar & Zuidema 2020): "
        "the product of 0.5 * head mean + 0.5 * I, first layer rightmost."
    )
    device: str
    compute_ms: float = Field(description="Forward pass and derived maps, in milliseconds.")
    sequence_index: int | None = Field(None, description="The input returned, when selected.")
    layer_index: int | None = Field(None, description="The layer returned, when selected.")
    hidden_special_tokens: bool = Field(False, description="Whether [CLS] / [SEP] were removed.")
    special_share: float | None = Field(
        None,
        description="With hidden special tokens: the mean share of a shown row that went to "
        "them, over layers, heads and rows.",
    )
    downsample: PretrainedDownsample | None = Field(
        None, description="Present when display_size pooled the attentions."
    )

"""Request and response models of the JSON API (/api/v1).

JSON is snake_case. Shapes use the engine's legend (:mod:`app.attention`).
The Literal choices come from the engine, so the API and the engine cannot drift.
"""

from __future__ import annotations

import functools
import math
import types
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, Union, cast, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from app.attention.engine import FLOAT32_LOWEST, STAGE_NAMES, DeviceName, DtypeName, StageName
from app.attention.masks import MaskName
from app.attention.transformer import MAX_LAYERS, PositionalEncodingName
from app.seed_data import SEED_BATCH, SEED_TARGETS
from app.serialize import Encoding

MAX_TOKENS: Final = 4096
"""The most tokens one sequence may have."""
MAX_BATCH: Final = 64
"""The most sequences one batch may have."""
MAX_DECODING_TOKENS: Final = 128
"""The most tokens of the step-by-step decoding lesson (one forward pass per token)."""

SEED_MAX: Final = 2**63 - 1
"""The largest seed: torch.Generator takes a signed 64-bit integer."""

NONEMPTY_WORDS: Final = r"\S"
"""A word string must hold at least one non-whitespace character."""


def _json_integer(value: object) -> object:
    """JSON Schema's integer: an int, or a number with a zero fraction (3.0); never a bool.

    Strict validation then refuses anything else (1.5, "3", null) with its own message.
    """
    if isinstance(value, bool):
        raise ValueError("must be an integer, not a boolean")
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_json_integer)]
"""An integer field as JSON Schema means it: 3 and 3.0 are integers, true and 1.5 are not."""


def _mask_fill(value: object) -> str | float:
    """The string "-inf", or a finite JSON number in [FLOAT32_LOWEST, 0]."""
    if value == "-inf":
        return "-inf"
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        if math.isfinite(number) and FLOAT32_LOWEST <= number <= 0:
            return number
    shown = repr(value) if isinstance(value, int | float) else type(value).__name__
    raise ValueError(
        f'must be the string "-inf" or a finite number in [{FLOAT32_LOWEST:.8g}, 0], such '
        f"as -1e9; got {shown}"
    )


MaskFill = Annotated[
    str | float,
    PlainValidator(_mask_fill),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "const": "-inf"},
                {"type": "number", "minimum": FLOAT32_LOWEST, "maximum": 0},
            ]
        }
    ),
]
"""The string "-inf", or a finite number in [lowest float32, 0]: the scores are masked
in float32 (float64 for dtype float64), and every dtype must be able to hold the fill."""

_IDS: Final = TypeAdapter(list[JsonInt])


def _sequence_type(max_tokens: int) -> Any:
    """The type of one sequence of at most ``max_tokens`` ids (words are counted later).

    Token ids (a non-empty list of integers) or words (a string with a word in it);
    every error is one plain message naming the sequence.
    """

    def validate(value: object) -> list[int] | str:
        if isinstance(value, str):
            if not value.split():
                raise ValueError("the sequence is empty: give at least one word")
            return value
        if isinstance(value, list):
            if not value:
                raise ValueError("the sequence is empty: give at least one token id")
            if len(value) > max_tokens:
                raise ValueError(f"{len(value)} tokens; the limit is {max_tokens}")
            try:
                return _IDS.validate_python(value, strict=True)
            except ValidationError as error:
                where = error.errors()[0]["loc"][0]
                raise ValueError(f"token {where} is not an integer id") from None
        raise ValueError("must be a list of token ids or a string of words")

    return Annotated[
        list[int] | str,
        PlainValidator(validate),
        WithJsonSchema(
            {
                "anyOf": [
                    {
                        "type": "array",
                        "items": {"type": "integer", "minimum": 0},
                        "minItems": 1,
                        "maxItems": max_tokens,
                    },
                    {"type": "string", "pattern": NONEMPTY_WORDS},
                ],
                "description": f"Token ids (1 to {max_tokens} integers, each in "
                "[0, vocab_size)) or words (a string split on whitespace into 1 to "
                f"{max_tokens} words; the word <pad> is the padding token).",
                "examples": [[62, 13, 47, 39], "I love deep learning"],
            }
        ),
    ]


if TYPE_CHECKING:  # what the validated values are
    SequenceIn = list[int] | str
    DecodingSequenceIn = list[int] | str
else:
    SequenceIn = _sequence_type(MAX_TOKENS)
    """One sequence of a batch: ids or words, at most MAX_TOKENS."""
    DecodingSequenceIn = _sequence_type(MAX_DECODING_TOKENS)
    """The one sequence of the decoding lesson: at most MAX_DECODING_TOKENS."""


def _whole_number(value: Any) -> Any:
    """A finite float with a zero fraction as an int; anything else unchanged."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _whole(value: Any) -> Any:
    """:func:`_whole_number` of a value, or of each item of a list (one level only).

    Integer fields are at most list[int]; anything nested deeper is left for strict
    validation to refuse, never walked (a body can nest thousands of levels).
    """
    if isinstance(value, list):
        return [_whole_number(item) for item in value]
    return _whole_number(value)


@functools.cache
def _integer_fields(model: type[BaseModel]) -> frozenset[str]:
    """The fields of ``model`` that hold an int, an optional int or a list of ints."""
    names = set()
    for name, info in model.model_fields.items():
        annotation = info.annotation
        options = set(get_args(annotation)) if get_origin(annotation) in _UNIONS else {annotation}
        if get_origin(annotation) is list:
            options = set(get_args(annotation))
        if int in options or any(
            get_origin(o) is Annotated and int in get_args(o) for o in options
        ):
            names.add(name)
    return frozenset(names)


_UNIONS: Final = (Union, types.UnionType)


class StrictRequest(BaseModel):
    """Base of every request body: unknown fields are refused, and nothing is coerced.

    Strict mode: a boolean is not an integer (``"seed": false`` is a 422), a string
    is not a number, a number is not a boolean. Strings must be valid Unicode
    (lone UTF-16 surrogates are refused before validation, :mod:`app.errors`).
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _whole_numbers_are_integers(cls, data: Any) -> Any:
        """3.0 in an integer field is the integer 3, as JSON Schema has it.

        Strict mode would refuse it, while a schema-valid client may send it. Only
        numbers with a zero fraction in the model's integer fields change; a boolean
        stays a boolean, which strict mode then refuses.
        """
        if not isinstance(data, dict):
            return data
        fields = _integer_fields(cls)
        return {name: _whole(value) if name in fields else value for name, value in data.items()}


IncludeName = StageName | Literal["head_mean"]
"""What ``include`` can ask for: a step-through stage, or the head-averaged map."""


def _json(batch: list[list[int]]) -> JsonValue:
    """A seed batch as a JSON value for the OpenAPI examples."""
    return cast(JsonValue, batch)


class LayerConfig(StrictRequest):
    """The seeded attention layer: widths, seed, vocabulary and device."""

    d_model: int = Field(
        8,
        ge=1,
        le=1024,
        description="Model width. num_heads must divide it (else 422 naming num_heads).",
    )
    num_heads: int = Field(
        2,
        ge=1,
        le=64,
        description="H; d_k = d_model // num_heads. Must divide d_model (else 422 naming "
        "num_heads, with the divisors to pick from).",
    )
    seed: int = Field(0, ge=0, le=SEED_MAX, description="Seeds every parameter.")
    pad_id: int = Field(
        0, ge=0, description="The padding token id; must be < vocab_size (else 422)."
    )
    vocab_size: int = Field(
        100,
        ge=1,
        le=32768,
        description="Rows of the embedding table; ids lie in [0, vocab_size) (an id outside "
        "is a 422 naming it).",
    )
    device: DeviceName = Field(
        "auto",
        description="auto (CUDA if available, else CPU) | cpu | cuda. cuda on a server "
        "without a CUDA device is a 422 naming device.",
    )

    def layer_kwargs(self) -> dict[str, Any]:
        """The layer fields as the engine's functions take them (same keyword names).

        d_model, num_heads, seed, pad_id, vocab_size and device.
        """
        return {name: getattr(self, name) for name in LayerConfig.model_fields}


def _token_count(sequence: list[int] | str) -> int:
    return len(sequence.split()) if isinstance(sequence, str) else len(sequence)


class BatchInput(LayerConfig):
    """A source batch, an optional target batch, and the layer to run them through."""

    sequences: list[SequenceIn] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description="B source sequences, right-padded with pad_id to the longest (L). "
        "All sequences of a request are ids, or all are words (mixing them is a 422), and "
        "each has at most 4096 tokens (else 422).",
    )
    targets: list[SequenceIn] | None = Field(
        None,
        min_length=1,
        max_length=MAX_BATCH,
        description="Optional B target sequences for cross (encoder-decoder) attention: "
        "queries come from the targets (L_q = T_L), keys and values from `sequences` "
        "(L_k = S_L), with the source padding mask. As many as `sequences`, and of the "
        "same kind, ids or words (else 422 naming targets).",
    )
    dtype: DtypeName = Field("float32", description="Floating-point type of the computation.")

    @field_validator("sequences", "targets")
    @classmethod
    def _bounded_lengths(cls, value: list[list[int] | str] | None) -> list[list[int] | str] | None:
        for i, seq in enumerate(value or []):
            n = _token_count(seq)
            if n > MAX_TOKENS:
                raise ValueError(f"sequence {i} has {n} tokens; the limit is {MAX_TOKENS}")
        return value

    def lengths(self) -> tuple[int, int, int]:
        """(B, L_q, L_k): L_k the longest source, L_q the longest target (or L_k)."""
        len_k = max(_token_count(s) for s in self.sequences)
        len_q = len_k if self.targets is None else max(_token_count(s) for s in self.targets)
        return len(self.sequences), len_q, len_k


class AttentionRequest(BatchInput):
    """One batch to run through seeded multi-head attention."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "sequences": _json(SEED_BATCH),
                    "d_model": 8,
                    "num_heads": 2,
                    "mask": "padding_causal",
                },
                {
                    "sequences": ["I love deep learning"],
                    "d_model": 64,
                    "num_heads": 8,
                    "mask": "none",
                    "include": ["q", "k", "v", "scores", "masked_scores", "head_output"],
                },
                {"sequences": _json(SEED_BATCH), "targets": _json(SEED_TARGETS), "mask": "padding"},
                {
                    "sequences": _json(SEED_BATCH),
                    "mask": "padding",
                    "dropout": 0.1,
                    "dropout_seed": 1,
                },
            ]
        },
    )

    mask: MaskName = Field(
        "padding",
        description="none | padding (keys that are pad_id) | causal (no-peak, tril) | "
        "padding_causal (both). Cross attention takes none or padding (a causal mask "
        "across two sequences is a 422 naming mask).",
    )
    mask_fill: MaskFill = Field(
        "-inf",
        description='Score given to masked entries before the softmax: "-inf" (default), or '
        "a finite number in [-3.4028235e38, 0] (the float32 range, in which the scores are "
        "masked) such as the seeds' -1e9, -1e10, -1e12. Under -inf a fully-masked query row "
        "gets weights 0; under a finite fill it is uniform, 1/L_k, as the seeds compute it. "
        "Other rows are the same under both.",
        examples=["-inf", -1e9],
    )
    verify: bool = Field(
        False,
        description="Also run torch.nn.MultiheadAttention and "
        "torch.nn.functional.scaled_dot_product_attention with the same parameters and "
        "report the largest differences in `verification`.",
    )
    scale: bool = Field(
        True,
        description="Divide the scores by sqrt(d_k) (the paper). false shows why: without "
        "it, softmax turns one-hot as d_k grows (seed 001 section 7).",
    )
    include: list[IncludeName] = Field(
        default_factory=list,
        max_length=len(STAGE_NAMES) + 1,
        description="Step-through stages to return in `stages`: q, k, v, head_output "
        "(B, H, L, d_k); scores (Q K^T), scaled_scores (/ sqrt(d_k)), masked_scores "
        "(B, H, L_q, L_k); and head_mean, the head-averaged map in "
        "`head_summary.mean_weights`. Weights only by default.",
    )
    encoding: Encoding = Field(
        "json",
        description="How arrays travel: json (nested numbers, at float64 precision when "
        "dtype is float64), or base64_float32 / base64_float16 / base64_float64: {dtype: "
        "f4|f2|f8, bdata: base64, shape}, Plotly.js's typed-array form (masks as u1). "
        "base64_float32 is about 3x smaller and much faster.",
    )
    display_size: int | None = Field(
        None,
        ge=8,
        le=4096,
        description="Downsample the weights, mask and labels for display to at most this "
        "many rows and columns, by blocks (see `downsample`). Stages are never downsampled.",
    )
    downsample: Literal["max", "mean"] = Field(
        "max", description="Block statistic when display_size applies: max keeps sharp weights."
    )
    sequence_index: int | None = Field(
        None,
        ge=0,
        description="Return only this sequence of the batch (all are computed). Must be "
        "below B (else 422).",
    )
    head_index: int | None = Field(
        None, ge=0, description="Return only this head. Must be below num_heads (else 422)."
    )
    dropout: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        allow_inf_nan=False,
        description="Dropout probability on the weights in training mode, returned in "
        "`dropped_weights` (PyTorch's definition: zero with probability p, scale the rest "
        "by 1/(1-p), so rows sum to 1 in expectation).",
    )
    dropout_seed: int = Field(0, ge=0, le=SEED_MAX, description="Seed of the dropout mask.")

    def weight_cells(self) -> int:
        """How many numbers the computation holds for the response, weights included.

        B*H*L_q*L_k per (B, H, L_q, L_k) matrix (weights, dropped weights, score
        stages), B*H*L*d_k per head stage (q, k, v, head_output) and B*L_q*L_k
        for the head average. Counted before any selection or downsampling: the
        whole batch is computed either way.
        """
        batch, len_q, len_k = self.lengths()
        square = batch * self.num_heads * len_q * len_k
        score_stages = ("scores", "scaled_scores", "masked_scores")
        matrices = 1 + (self.dropout > 0) + sum(name in score_stages for name in self.include)
        d_k = self.d_model // max(self.num_heads, 1)
        per_head = {"q": len_q, "k": len_k, "v": len_k, "head_output": len_q}
        head_cells = sum(batch * self.num_heads * per_head.get(n, 0) * d_k for n in self.include)
        mean = batch * len_q * len_k if "head_mean" in self.include else 0
        return matrices * square + head_cells + mean


class VerificationResult(BaseModel):
    """Largest absolute differences from PyTorch's own attention, same parameters."""

    mha_weights_max_abs_diff: float = Field(
        description="Per-head weights vs torch.nn.MultiheadAttention "
        "(need_weights=True, average_attn_weights=False)."
    )
    mha_output_max_abs_diff: float = Field(
        description="Layer output vs torch.nn.MultiheadAttention."
    )
    sdpa_output_max_abs_diff: float = Field(
        description="Layer output vs torch.nn.functional.scaled_dot_product_attention + W_o."
    )
    fully_masked_rows: int = Field(
        description="Query rows with every key masked, compared under AttnViz's rule."
    )
    weights_tolerance: float = Field(
        description="The largest weight difference that counts as a match. float32 and "
        "float64: 4 * gamma~_n * M, the probabilistic rounding-error bound of the sums "
        "that lead to the weights (Higham & Mary 2019, lambda = 10: n = d_model + 1 + d_k "
        "+ L_k, u = 2^-24 or 2^-53, M the largest sum of absolute products), so that a "
        "correct result matches at every length; float16 1e-2, bfloat16 5e-2."
    )
    output_tolerance: float = Field(
        description="The same for the layer outputs: 2 * gamma~_n * M over the whole "
        "chain, n = 2 (d_model + 1) + d_k + L_k."
    )
    tolerance: float = Field(description="The larger of the two tolerances.")
    matches: bool = Field(description="Every difference is at most `tolerance`.")
    torch_version: str


Tensor4 = list[list[list[list[float | None]]]]
"""A 4-d array as nested lists; null marks a masked entry where one is documented."""


class EncodedArray(BaseModel):
    """An array as Plotly.js's typed-array spec (request ``encoding`` base64_*)."""

    dtype: Literal["f8", "f4", "f2", "u1"] = Field(
        description="float64, float32, float16 or uint8 (masks)."
    )
    bdata: str = Field(description="base64 of the little-endian bytes in C order.")
    shape: list[int]


class DownsampleInfo(BaseModel):
    """How the weights were reduced for display (request ``display_size``)."""

    method: Literal["max", "mean"]
    factor_q: int = Field(description="Query positions per displayed row.")
    factor_k: int = Field(description="Key positions per displayed column.")
    full_shape: list[int] = Field(description="[B, H, L_q, L_k] before downsampling.")


class HeadSummary(BaseModel):
    """Sharp and diffuse heads at a glance."""

    entropy_bits: list[list[float]] = Field(
        description="(B, H) mean row entropy in bits, fully-masked rows left out: 0 is "
        "one-hot, log2(L_k) uniform."
    )
    max_weight: list[list[float]] = Field(description="(B, H) the largest weight of each head.")
    mean_weights: list[list[list[float]]] | EncodedArray | None = Field(
        None, description="(B, L_q, L_k) the head-averaged map, with include head_mean."
    )


class AttentionResponse(BaseModel):
    """Every head's attention weights for every sequence, with what produced them."""

    attention: Literal["self", "cross"] = Field(description="Self- or cross attention.")
    shape: list[int] = Field(
        description="The shape of `weights` as returned: [B, H, L_q, L_k] after any "
        "selection and downsampling."
    )
    d_model: int
    num_heads: int
    d_k: int = Field(description="d_model // num_heads.")
    seed: int
    mask: MaskName
    pad_id: int
    query_labels: list[list[str]] = Field(description="(B, L_q) token labels; <pad> for padding.")
    key_labels: list[list[str]] = Field(description="(B, L_k) token labels.")
    query_ids: list[list[int]] = Field(description="(B, L_q) padded token ids.")
    key_ids: list[list[int]] = Field(description="(B, L_k) padded token ids.")
    weights: Tensor4 | EncodedArray = Field(
        description="(B, H, L_q, L_k) softmax weights; row i of head h is query i's "
        "distribution over the keys. Sliced by sequence_index / head_index and block-"
        "pooled by display_size when asked."
    )
    attn_mask: list[list[list[bool]]] | EncodedArray = Field(
        description="(B, L_q, L_k) the mask applied, True = attend."
    )
    fully_masked: list[list[bool]] = Field(
        description="(B, L_q) query rows whose every key is masked; their weights are all 0."
    )
    num_parameters: int = Field(description="Attention layer parameters: 4*d_model^2 + 4*d_model.")
    num_embedding_parameters: int = Field(description="vocab_size * d_model.")
    device: str = Field(description="Device the computation ran on: cpu or cuda.")
    dtype: DtypeName
    compute_ms: float = Field(description="Forward-pass wall time in milliseconds.")
    mask_fill: MaskFill
    verification: VerificationResult | None = Field(
        None, description="Present when the request asked for `verify`."
    )
    scale: bool = Field(description="Whether the scores were divided by sqrt(d_k).")
    stages: dict[StageName, Tensor4 | EncodedArray] = Field(
        default_factory=dict,
        description="The stages asked for in `include`. masked_scores has null where "
        "the mask hides a key (not the fill value).",
    )
    dropout: float
    dropped_weights: Tensor4 | EncodedArray | None = Field(
        None, description="(B, H, L_q, L_k) weights after dropout, when dropout > 0."
    )
    head_summary: HeadSummary
    full_shape: list[int] = Field(description="[B, H, L_q, L_k] as computed.")
    downsample: DownsampleInfo | None = Field(
        None, description="Present when the weights were block-pooled for display."
    )


class ScalingRequest(StrictRequest):
    """The scaling experiment of seed 001 section 7."""

    d_k_values: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [8, 64, 512],
        min_length=1,
        max_length=8,
        description="Head widths to compare.",
    )
    length: int = Field(16, ge=1, le=128, description="L, queries and keys per sample.")
    num_samples: int = Field(32, ge=1, le=256, description="Random (Q, K) draws per d_k.")
    bins: int = Field(20, ge=2, le=100, description="Histogram bins over [0, 1].")
    seed: int = Field(0, ge=0, le=SEED_MAX)


class WeightStatsOut(BaseModel):
    """Softmax weights of random scores, summarised."""

    counts: list[int] = Field(description="Histogram counts of all weights.")
    bin_edges: list[float] = Field(description="bins + 1 edges over [0, 1].")
    mean_entropy_bits: float = Field(description="Mean row entropy in bits.")
    mean_max_weight: float = Field(description="Mean over rows of the largest weight.")
    one_hot_fraction: float = Field(description="Fraction of rows whose largest weight > 0.99.")


class ScalingCaseOut(BaseModel):
    """One d_k: weights with and without the 1/sqrt(d_k) scale."""

    d_k: int
    scaled: WeightStatsOut
    unscaled: WeightStatsOut


class ScalingResponse(BaseModel):
    """Per d_k, how the scale keeps softmax from turning one-hot."""

    length: int
    num_samples: int
    cases: list[ScalingCaseOut]


class DecodingRequest(LayerConfig):
    """Seed 002 section 3.4: step-by-step decoding vs one (un)masked pass."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"sequence": "机 器 学 习 真 好 玩"}]},
    )

    sequence: DecodingSequenceIn = Field(
        description="One sequence, ids or words (at most 128 tokens: one forward pass per token)."
    )

    @field_validator("sequence")
    @classmethod
    def _bounded(cls, value: list[int] | str) -> list[int] | str:
        if _token_count(value) > MAX_DECODING_TOKENS:
            raise ValueError(
                f"{_token_count(value)} tokens; step-by-step decoding takes at most "
                f"{MAX_DECODING_TOKENS}"
            )
        return value


class DecodingResponse(BaseModel):
    """Weights of step-by-step decoding, one masked pass and one unmasked pass."""

    labels: list[str]
    step_weights: list[list[list[float]]] = Field(
        description="(H, L, L); row t from the pass over the first t + 1 tokens."
    )
    masked_weights: list[list[list[float]]] = Field(description="(H, L, L), causal mask.")
    unmasked_weights: list[list[list[float]]] = Field(description="(H, L, L), no mask.")
    masked_max_abs_diff: float = Field(
        description="max |step - masked| over weights and outputs: 0 up to rounding."
    )
    unmasked_max_abs_diff: float = Field(description="max |step - unmasked|: what breaks.")
    unmasked_output_diff: list[float] = Field(
        description="(L,) per position, how far its output moves when it sees the future."
    )


class ParameterRowOut(BaseModel):
    """One parameter tensor."""

    name: str = Field(description="e.g. W_q.weight")
    shape: list[int]
    count: int


class ParameterCountOut(BaseModel):
    """The layer's total for one num_heads."""

    num_heads: int
    d_k: int
    total: int


class ParameterTableResponse(BaseModel):
    """Parameters per matrix and in total; the total is the same for every num_heads."""

    d_model: int
    num_heads: int
    rows: list[ParameterRowOut]
    total: int = Field(description="4 * d_model^2 + 4 * d_model.")
    by_num_heads: list[ParameterCountOut] = Field(
        description="Every num_heads dividing d_model, with its total."
    )


class TransformerRequest(BatchInput):
    """A stack of encoder layers (and decoder layers when targets are given)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"sequences": _json(SEED_BATCH), "num_layers": 2},
                {
                    "sequences": _json(SEED_BATCH),
                    "targets": _json(SEED_TARGETS),
                    "num_layers": 3,
                    "positional_encoding": "sinusoidal",
                },
            ]
        },
    )

    d_ff: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Hidden width of the feed-forward; default 2 * d_model (seed 004: "
        "d_model 8, pf_dim 16).",
    )
    num_layers: int = Field(2, ge=1, le=MAX_LAYERS, description="N encoder (and decoder) layers.")
    positional_encoding: PositionalEncodingName = Field(
        "sinusoidal", description="Added to the embeddings: sinusoidal (Vaswani 3.5) or none."
    )
    encoding: Encoding = Field("json", description="As in the attention request.")

    def weight_cells(self) -> int:
        """N * B * H * (S*S + T*T + T*S): the weights the response will carry."""
        batch, len_t, len_s = self.lengths()
        per_layer = len_s * len_s + (0 if self.targets is None else len_t * len_t + len_t * len_s)
        return self.num_layers * batch * self.num_heads * per_layer


class TransformerResponse(BaseModel):
    """Attention of every layer and head of the stack."""

    shape: list[int] = Field(description="[N, B, H, S, S], the shape of encoder_weights.")
    d_model: int
    num_heads: int
    d_ff: int
    num_layers: int
    positional_encoding: PositionalEncodingName
    source_labels: list[list[str]]
    target_labels: list[list[str]] | None
    encoder_weights: list[Tensor4] | EncodedArray = Field(
        description="(N, B, H, S, S) self-attention."
    )
    decoder_self_weights: list[Tensor4] | EncodedArray | None = Field(
        None, description="(N, B, H, T, T) masked self-attention, when targets are given."
    )
    cross_weights: list[Tensor4] | EncodedArray | None = Field(
        None, description="(N, B, H, T, S) cross attention, when targets are given."
    )
    num_parameters: int = Field(description="Every parameter of the stack, embedding included.")
    device: str
    dtype: DtypeName
    compute_ms: float


class Preset(BaseModel):
    """A named example request."""

    name: str = Field(description="Stable identifier, e.g. seed-padding-causal.")
    title: str
    description: str
    request: AttentionRequest


class Health(BaseModel):
    """Liveness answer of GET /healthz."""

    status: Literal["ok"] = "ok"
    version: str
    torch: str
    cuda_available: bool


MAX_TEXT_CHARS: Final = 20_000
"""The most characters of one text sent to a pretrained model."""

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


class ModelsResponse(BaseModel):
    """The pretrained models on offer; empty without the pretrained extra."""

    default: str | None = Field(description="The model used when a request names none.")
    models: list[ModelInfo]
    install_hint: str | None = Field(None, description="How to get a model, when there is none.")


class ModelAttentionRequest(StrictRequest):
    """Texts (or sentence pairs) to run through a pretrained encoder."""

    model_config = ConfigDict(
        extra="forbid",
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
        max_length=200,
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
    device: DeviceName = Field(
        "auto",
        description="auto (CUDA if available, else CPU) | cpu | cuda. cuda on a server "
        "without a CUDA device is a 422 naming device.",
    )
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
        le=1024,
        description="With sequence_index: block-max pool attentions and head means to at most "
        "this many rows and columns (layer_mean and rollout are never pooled).",
    )


class ModelDownsample(BaseModel):
    """How attentions and head means were pooled for display (``display_size``)."""

    method: Literal["max"] = "max"
    factor: int = Field(description="Tokens per displayed row and column.")
    full_length: int = Field(description="L before pooling.")


class ModelAttentionResponse(BaseModel):
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
    downsample: ModelDownsample | None = Field(
        None, description="Present when display_size pooled the attentions."
    )


REQUEST_MODELS: Final[tuple[type[BaseModel], ...]] = (
    AttentionRequest,
    ScalingRequest,
    DecodingRequest,
    TransformerRequest,
    ModelAttentionRequest,
)
"""Every request body of the API (their integer bounds are kept exact in /openapi.json)."""

"""The lessons' endpoints: scaling, decoding, parameter table and encoder layer."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from ...attention.engine import DtypeName
from ...attention.errors import AttentionInputError
from ...attention.transformer import PositionalEncodingName
from ...attention.tutorials import TUTORIAL_BATCH, TUTORIAL_TARGETS
from ..limits import (
    MAX_D_FF,
    MAX_DECODING_TOKENS,
    MAX_HISTOGRAM_BINS,
    MAX_LAYERS,
    MAX_SCALING_CASES,
    MAX_SCALING_D_K,
    MAX_SCALING_LENGTH,
    MAX_SCALING_SAMPLES,
    MAX_SCALING_VALUES,
)
from ..transport import Encoding
from .common import (
    SEED_MAX,
    BatchRequest,
    DecodingSequenceIn,
    EncodedArray,
    LayerRequest,
    StrictRequest,
    Tensor4,
    json_example,
)


class ScalingRequest(StrictRequest):
    """The scaling experiment of tutorial 001 section 7.

    num_samples x length x sum(d_k_values), the values drawn for Q (as many for K), is at
    most 33,554,432 (2^25): over it, a 422 naming num_samples.
    """

    d_k_values: list[Annotated[int, Field(ge=1, le=MAX_SCALING_D_K)]] = Field(
        default_factory=lambda: [8, 64, 512],
        min_length=1,
        max_length=MAX_SCALING_CASES,
        description="Head widths to compare.",
    )
    length: int = Field(
        16, ge=1, le=MAX_SCALING_LENGTH, description="L, queries and keys per sample."
    )
    num_samples: int = Field(
        32, ge=1, le=MAX_SCALING_SAMPLES, description="Random (Q, K) draws per d_k."
    )
    bins: int = Field(20, ge=2, le=MAX_HISTOGRAM_BINS, description="Histogram bins over [0, 1].")
    seed: int = Field(0, ge=0, le=SEED_MAX)

    @model_validator(mode="after")
    def _values_drawn_are_bounded(self) -> Self:
        """Refuse more than MAX_SCALING_VALUES values drawn for Q: a 422 naming num_samples.

        Each field within its own bound could still ask for 1.9 GB and 19 CPU-s.
        """
        drawn = self.num_samples * self.length * sum(self.d_k_values)
        if drawn > MAX_SCALING_VALUES:
            raise AttentionInputError(
                "num_samples",
                f"num_samples x length x sum(d_k_values) is {drawn:,} values drawn for Q (as "
                f"many for K), over the limit of {MAX_SCALING_VALUES:,}: fewer samples, a "
                "shorter length or narrower heads",
            )
        return self


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


class DecodingRequest(LayerRequest):
    """Tutorial 002 section 3.4: step-by-step decoding vs one (un)masked pass."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"sequence": "机 器 学 习 真 好 玩"}]},
    )

    sequence: DecodingSequenceIn = Field(
        description=f"One sequence, ids or words (at most {MAX_DECODING_TOKENS} tokens: one "
        "forward pass per token)."
    )


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


class TransformerRequest(BatchRequest):
    """A stack of encoder layers (and decoder layers when targets are given)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"sequences": json_example(TUTORIAL_BATCH), "num_layers": 2},
                {
                    "sequences": json_example(TUTORIAL_BATCH),
                    "targets": json_example(TUTORIAL_TARGETS),
                    "num_layers": 3,
                    "positional_encoding": "sinusoidal",
                },
            ]
        },
    )

    d_ff: int | None = Field(
        None,
        ge=1,
        le=MAX_D_FF,
        description="Hidden width of the feed-forward; default 2 * d_model (tutorial 004: "
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

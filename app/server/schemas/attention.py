"""The seeded attention endpoint: POST /api/v1/attention, and the presets built on it."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from ...attention.engine import STAGE_NAMES, DtypeName, StageName
from ...attention.masks import MaskName
from ...attention.tutorials import TUTORIAL_BATCH, TUTORIAL_TARGETS
from ..limits import MAX_DISPLAY_SIZE
from ..transport import Encoding
from .common import SEED_MAX, BatchRequest, EncodedArray, MaskFill, Tensor4, json_example

IncludeName = StageName | Literal["head_mean"]
"""What ``include`` can ask for: a step-through stage, or the head-averaged map."""


class AttentionRequest(BatchRequest):
    """One batch to run through seeded multi-head attention."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "sequences": json_example(TUTORIAL_BATCH),
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
                {
                    "sequences": json_example(TUTORIAL_BATCH),
                    "targets": json_example(TUTORIAL_TARGETS),
                    "mask": "padding",
                },
                {
                    "sequences": json_example(TUTORIAL_BATCH),
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
        "masked) such as the tutorials' -1e9, -1e10, -1e12. Under -inf a fully-masked query row "
        "gets weights 0; under a finite fill it is uniform, 1/L_k, as the tutorials compute it. "
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
        "it, softmax turns one-hot as d_k grows (tutorial 001 section 7).",
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
        "base64_float32 is about 1.7x smaller and 2-5x faster at L >= 512.",
    )
    display_size: int | None = Field(
        None,
        ge=8,
        le=MAX_DISPLAY_SIZE,
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
    mean_row_max: list[list[float]] = Field(
        description="(B, H) the mean over query rows (fully-masked rows left out) of each "
        "row's largest weight: 1 for a head whose every row is one-hot, 1/L_k for uniform "
        "rows. Under a causal mask max_weight is always 1 (row 0 sees one key); this varies."
    )
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
        description="(B, L_q) query rows whose every key is masked: their weights are all 0 "
        "under the -inf fill, uniform (1/L_k) under a finite one."
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


class Preset(BaseModel):
    """A named example request."""

    name: str = Field(description="Stable identifier, e.g. tutorial-padding-causal.")
    title: str
    description: str
    request: AttentionRequest

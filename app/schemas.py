"""Request and response models of the JSON API (/api/v1).

JSON is snake_case. Shapes use the engine's legend (:mod:`app.attention`).
The Literal choices come from the engine, so the API and the engine cannot drift.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StrictInt, StrictStr, field_validator

from app.attention.engine import DeviceName, DtypeName
from app.attention.masks import MaskName
from app.seed_data import SEED_BATCH, SEED_TARGETS

MAX_TOKENS: Final = 1024
"""The most tokens one sequence may have."""
MAX_BATCH: Final = 64
"""The most sequences one batch may have."""

MaskFill = Literal["-inf"] | Annotated[float, Field(le=0, allow_inf_nan=False)]
"""The string "-inf", or a finite number <= 0."""

SequenceIn = Annotated[
    list[StrictInt] | StrictStr,
    Field(
        description="Token ids (a list of integers) or words (a string split on whitespace; "
        "the word <pad> is the padding token).",
        examples=[[62, 13, 47, 39], "I love deep learning"],
    ),
]


def _json(batch: list[list[int]]) -> JsonValue:
    """A seed batch as a JSON value for the OpenAPI examples."""
    return cast(JsonValue, batch)


class AttentionRequest(BaseModel):
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
                },
                {"sequences": _json(SEED_BATCH), "targets": _json(SEED_TARGETS), "mask": "padding"},
            ]
        },
    )

    sequences: list[SequenceIn] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description="B source sequences, right-padded with pad_id to the longest (L). "
        "All sequences of a request are ids, or all are words.",
    )
    targets: list[SequenceIn] | None = Field(
        None,
        min_length=1,
        max_length=MAX_BATCH,
        description="Optional B target sequences for cross (encoder-decoder) attention: "
        "queries come from the targets (L_q = T_L), keys and values from `sequences` "
        "(L_k = S_L), with the source padding mask.",
    )
    d_model: int = Field(8, ge=1, le=1024, description="Model width; num_heads must divide it.")
    num_heads: int = Field(2, ge=1, le=64, description="H; d_k = d_model // num_heads.")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="Seeds every parameter.")
    mask: MaskName = Field(
        "padding",
        description="none | padding (keys that are pad_id) | causal (no-peak, tril) | "
        "padding_causal (both). Cross attention takes none or padding.",
    )
    pad_id: int = Field(0, ge=0, description="The padding token id; must be < vocab_size.")
    vocab_size: int = Field(
        100, ge=1, le=32768, description="Rows of the embedding table; ids lie in [0, vocab_size)."
    )
    device: DeviceName = Field("auto", description="auto (CUDA if available) | cpu | cuda.")
    dtype: DtypeName = Field("float32", description="Floating-point type of the computation.")
    mask_fill: MaskFill = Field(
        "-inf",
        description='Score given to masked entries before the softmax: "-inf" (default), or '
        "a finite number <= 0 such as the seeds' -1e9, -1e10, -1e12. Under -inf a fully-"
        "masked query row gets weights 0; under a finite fill it is uniform, 1/L_k, as the "
        "seeds compute it. Other rows are the same under both.",
        examples=["-inf", -1e9],
    )
    verify: bool = Field(
        False,
        description="Also run torch.nn.MultiheadAttention and "
        "torch.nn.functional.scaled_dot_product_attention with the same parameters and "
        "report the largest differences in `verification`.",
    )

    @field_validator("sequences", "targets")
    @classmethod
    def _bounded_lengths(cls, value: list[list[int] | str] | None) -> list[list[int] | str] | None:
        for i, seq in enumerate(value or []):
            n = len(seq.split()) if isinstance(seq, str) else len(seq)
            if n > MAX_TOKENS:
                raise ValueError(f"sequence {i} has {n} tokens; the limit is {MAX_TOKENS}")
        return value

    def weight_cells(self) -> int:
        """B * H * L_q * L_k: how many weights the response will carry."""

        def longest(batch: list[list[int] | str]) -> int:
            return max(len(s.split()) if isinstance(s, str) else len(s) for s in batch)

        len_k = longest(self.sequences)
        len_q = len_k if self.targets is None else longest(self.targets)
        return len(self.sequences) * self.num_heads * len_q * len_k


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
    tolerance: float = Field(description="1e-6 for float32, 1e-12 for float64.")
    matches: bool = Field(description="Every difference is at most `tolerance`.")
    torch_version: str


class AttentionResponse(BaseModel):
    """Every head's attention weights for every sequence, with what produced them."""

    attention: Literal["self", "cross"] = Field(description="Self- or cross attention.")
    shape: list[int] = Field(description="[B, H, L_q, L_k], the shape of `weights`.")
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
    weights: list[list[list[list[float]]]] = Field(
        description="(B, H, L_q, L_k) softmax weights; row i of head h is query i's "
        "distribution over the keys."
    )
    attn_mask: list[list[list[bool]]] = Field(
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

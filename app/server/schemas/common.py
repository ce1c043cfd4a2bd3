"""What every area of the API shares: strict requests, sequences, the seeded layer.

Also encoded arrays and the health answer.

JSON is snake_case. Shapes use the engine's legend (:mod:`attnviz.attention`).
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
    model_validator,
)

from ...attention.engine import FLOAT32_LOWEST, DeviceName, DtypeName, LayerConfig
from ...attention.tokens import token_count
from ..limits import (
    MAX_BATCH,
    MAX_D_MODEL,
    MAX_DECODING_TOKENS,
    MAX_NUM_HEADS,
    MAX_TOKENS,
    MAX_VOCAB_SIZE,
)

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

NonNegativeJsonInt = Annotated[int, Field(ge=0), BeforeValidator(_json_integer)]
"""A :data:`JsonInt` >= 0, documented as ``minimum: 0`` (the bound before the validator:
after it, pydantic would write a non-standard ``ge`` into the schema)."""


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
    """The type of one sequence of 1 to ``max_tokens`` tokens: ids or words.

    Token ids (a list of integers) or words (a string split on whitespace); every
    error is one plain message naming the sequence.
    """

    def validate(value: object) -> list[int] | str:
        if not isinstance(value, str | list):
            raise ValueError("must be a list of token ids or a string of words")
        count = token_count(value)
        if count == 0:
            kind = "word" if isinstance(value, str) else "token id"
            raise ValueError(f"the sequence is empty: give at least one {kind}")
        if count > max_tokens:
            raise ValueError(f"{count} tokens; the limit is {max_tokens}")
        if isinstance(value, str):
            return value
        try:
            return _IDS.validate_python(value, strict=True)
        except ValidationError as error:
            where = error.errors()[0]["loc"][0]
            raise ValueError(f"token {where} is not an integer id") from None

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


DEVICE_FIELD: Final[Any] = Field(
    "auto",
    description="auto (CUDA if available, else CPU) | cpu | cuda. cuda on a server "
    "without a CUDA device is a 422 naming device.",
)
"""The ``device`` field of every request that runs a computation."""


class StrictRequest(BaseModel):
    """Base of every request body: unknown fields are refused, and nothing is coerced.

    Strict mode: a boolean is not an integer (``"seed": false`` is a 422), a string
    is not a number, a number is not a boolean. Strings must be valid Unicode
    (lone UTF-16 surrogates are refused before validation, :mod:`attnviz.server.errors`).
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


def json_example(batch: list[list[int]]) -> JsonValue:
    """A tutorial batch as a JSON value for the OpenAPI examples."""
    return cast(JsonValue, batch)


class LayerRequest(StrictRequest):
    """A request for the seeded layer: its widths, seed, vocabulary and device."""

    d_model: int = Field(
        8,
        ge=1,
        le=MAX_D_MODEL,
        description="Model width. num_heads must divide it (else 422 naming num_heads).",
    )
    num_heads: int = Field(
        2,
        ge=1,
        le=MAX_NUM_HEADS,
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
        le=MAX_VOCAB_SIZE,
        description="Rows of the embedding table; ids lie in [0, vocab_size) (an id outside "
        "is a 422 naming it).",
    )
    device: DeviceName = DEVICE_FIELD

    def layer(self) -> LayerConfig:
        """The layer fields as the engine takes them, one typed object."""
        return LayerConfig(
            d_model=self.d_model,
            num_heads=self.num_heads,
            seed=self.seed,
            pad_id=self.pad_id,
            vocab_size=self.vocab_size,
            device=self.device,
        )


class BatchRequest(LayerRequest):
    """A source batch, an optional target batch, and the layer to run them through."""

    sequences: list[SequenceIn] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description="B source sequences, right-padded with pad_id to the longest (L). "
        "All sequences of a request are ids, or all are words (mixing them is a 422), and "
        f"each has at most {MAX_TOKENS} tokens (else 422).",
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

    def lengths(self) -> tuple[int, int, int]:
        """(B, L_q, L_k): L_k the longest source, L_q the longest target (or L_k)."""
        len_k = max(token_count(s) for s in self.sequences)
        len_q = len_k if self.targets is None else max(token_count(s) for s in self.targets)
        return len(self.sequences), len_q, len_k


Tensor4 = list[list[list[list[float | None]]]]
"""A 4-d array as nested lists; null marks a masked entry where one is documented."""


class EncodedArray(BaseModel):
    """An array as Plotly.js's typed-array spec (request ``encoding`` base64_*)."""

    dtype: Literal["f8", "f4", "f2", "u1"] = Field(
        description="float64, float32, float16 or uint8 (masks)."
    )
    bdata: str = Field(description="base64 of the little-endian bytes in C order.")
    shape: list[int]


class WorkState(BaseModel):
    """What the compute pool is doing (:func:`attnviz.server.executor.work_state`)."""

    queued: int = Field(description="Computations waiting for a worker of the compute pool.")
    computing: int = Field(description="Computations running on the compute pool now.")
    long_running: int = Field(
        description="Long computations (an atlas, a long input, a gradient method) holding "
        "one of their slots now (all compute workers but one)."
    )
    long_waiting: int = Field(
        description="Long computations waiting for a slot; one more than the slots is a 503."
    )
    finished: int = Field(description="Computations that ran to their end since the start.")
    stopped: int = Field(
        description="Computations given up before their end since the start: the client "
        "went away or the time budget ran out."
    )
    failed: int = Field(description="Computations that raised an error since the start.")


class HeldBytes(BaseModel):
    """What the caches hold now, in bytes.

    Their budgets: ATTNVIZ_RECORDING_CACHE_BYTES, ATTNVIZ_RESPONSE_CACHE_BYTES.
    """

    recordings: int = Field(description="Kept forward passes in memory (bytes).")
    recordings_on_disk: int = Field(description="Kept passes memory-mapped from disk (bytes).")
    responses: int = Field(description="Cached /api/v1/attention responses (bytes).")


class HealthResponse(BaseModel):
    """Liveness answer of GET /healthz, with what this process is computing."""

    status: Literal["ok"] = "ok"
    version: str
    torch: str
    cuda_available: bool
    work: WorkState
    held: HeldBytes

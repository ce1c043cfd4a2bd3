"""The zoom's tiles: POST /api/v1/models/attention/tiles (exact weights of a kept pass)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ...pretrained.blocks import Block
from ..transport import Encoding
from .common import EncodedArray, NonNegativeJsonInt, StrictRequest

__all__ = ["PretrainedTilesRequest", "PretrainedTilesResponse"]


class PretrainedTilesRequest(StrictRequest):
    """One zoom tile of one head's map, from a pass kept for tiles (POST .../attention/tiles).

    A one-input response whose pass was kept says so with its ``pass_key`` (the streamed
    grid's end line, POST /attention's ``pass_key``); a tile is then exact weights
    recomputed from the pass's q, k and each row's log-sum-exp, with no forward pass.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"pass_key": "3f1c0a9be2d44c7f8a51b6e0d9c2a417", "layer_index": 3,
                 "head_index": 5, "z": 0, "x": 0, "y": 0},
            ]
        },
    )  # fmt: skip

    pass_key: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[0-9a-f]+$",
        description="The pass_key of a one-input response. A pass no longer kept (evicted "
        "from ATTNVIZ_RECORDING_CACHE_BYTES, or from before a restart) is a 410 naming "
        "pass_key: ask for the grid again.",
    )
    block: Block | None = Field(
        None, description="The attention block (default the family's first), as in /attention."
    )
    layer_index: NonNegativeJsonInt = Field(description="The layer (else 422).")
    head_index: NonNegativeJsonInt = Field(description="The head (else 422).")
    z: NonNegativeJsonInt = Field(
        0,
        le=64,
        description="Zoom level: 0 is the whole map in one tile of at most 256 x 256 cells; "
        "each level halves the tokens per cell; at max_z a cell is one token.",
    )
    x: NonNegativeJsonInt = Field(
        0, le=2**31, description="The tile's column: keys x * 256 * factor and on."
    )
    y: NonNegativeJsonInt = Field(
        0, le=2**31, description="The tile's row: queries y * 256 * factor and on."
    )
    reduce: Literal["max", "mean"] = Field(
        "max",
        description="Each cell of factor x factor tokens: its largest weight (what stays "
        "visible of a sharp head) or its mean.",
    )
    encoding: Encoding = Field("json", description="As in the attention request.")


class PretrainedTilesResponse(BaseModel):
    """One zoom tile: exact weights of one head over its rows and columns, block-pooled."""

    pass_key: str
    model: str = Field(description="The model the pass ran on.")
    block: Block
    layer_index: int
    head_index: int
    z: int
    x: int
    y: int
    max_z: int = Field(description="The deepest level (one token per cell) of this map.")
    factor: int = Field(description="Tokens per cell side: 2 ** (max_z - z).")
    reduce: Literal["max", "mean"]
    query_length: int = Field(description="L_q of the whole map.")
    key_length: int = Field(description="L_k of the whole map.")
    rows: list[int] = Field(description="[start, stop) of the query rows the tile covers.")
    cols: list[int] = Field(description="[start, stop) of the key columns it covers.")
    weights: list[list[float]] | EncodedArray = Field(
        description="(ceil(rows / factor), ceil(cols / factor)) float32: each cell the max "
        "(or mean) of exp(score - lse) over its tokens."
    )
    query_tokens: list[str] | None = Field(
        description="The tokens of the rows, at factor 1 (one token per cell); else null."
    )
    key_tokens: list[str] | None = Field(description="The tokens of the columns, at factor 1.")
    compute_ms: float

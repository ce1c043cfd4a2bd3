"""The head atlas's endpoint: POST /api/v1/models/heads (and /heads/stream)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...attention.engine import DeviceName
from ...pretrained.blocks import Block
from ..limits import MAX_ATLAS_TEXTS, MAX_MODEL_NAME_CHARS
from .common import DEVICE_FIELD, StrictRequest
from .pretrained import TextIn


class HeadAtlasRequest(StrictRequest):
    """A model's head atlas: every head scored over a corpus (POST /api/v1/models/heads)."""

    model_config = ConfigDict(
        protected_namespaces=(),
        json_schema_extra={
            "examples": [
                {"model": "SmolLM2-135M-Instruct"},
                {"model": "all-MiniLM-L6-v2", "texts": ["The cat sat on the mat.", "It slept."]},
            ]
        },
    )

    model: str | None = Field(
        None,
        max_length=MAX_MODEL_NAME_CHARS,
        description="A text model from GET /api/v1/models; default the first. A speech or "
        "image model is a 422 naming model (no score is defined for it yet).",
    )
    texts: list[TextIn] | None = Field(
        None,
        min_length=1,
        max_length=MAX_ATLAS_TEXTS,
        description="Your own corpus for the natural-text scores (one forward pass per "
        "text, each cut to 256 tokens); default the corpus shipped with AttnViz "
        "(attnviz/corpus/head_atlas.txt, its paragraphs). The induction and duplicate-token "
        "scores always use seeded repeated random tokens.",
    )
    device: DeviceName = DEVICE_FIELD


class HeadScoreDefinition(BaseModel):
    """What one score of the atlas means."""

    name: str
    definition: str = Field(description="The formula, its queries and keys, in words.")
    source: str = Field(description="The paper it comes from.")
    inputs: Literal["natural text", "repeated random tokens"]
    unit: Literal["weight", "nats"]


class AtlasExample(BaseModel):
    """One passage where a head scores high on one score (attnviz.pretrained.atlas.shards)."""

    score: str
    layer: int
    head: int
    rank: int = Field(description="0 for the head's best passage on this score.")
    passage: int = Field(
        description="Its index: in the corpus (kind 'corpus'), else among the random sequences."
    )
    value: float = Field(description="The passage's own mean of the score.")
    position: int = Field(description="The counted query where the head's term peaks.")
    kind: Literal["corpus", "random tokens"]
    token: str = Field(description="The token at that position.")


class HeadAtlasResponse(BaseModel):
    """Every layer's and head's scores, their definitions, and what they were computed on."""

    model_config = ConfigDict(protected_namespaces=())

    model: str
    block: Block = Field(description="The scored block: a decoder's, else the encoder's.")
    num_layers: int
    num_heads: int = Field(description="Query heads per layer.")
    definition_version: int = Field(
        description="Bumped whenever a definition changes (cached atlases of an older "
        "version are recomputed)."
    )
    compute_ms: float = Field(description="How long the scores took when computed.")
    cached: bool = Field(description="Whether they came from the server's disk cache.")
    scores: dict[str, list[list[float]]] = Field(
        description="Score name -> (num_layers, num_heads): previous_token, induction, "
        "duplicate_token, first_token, self, entropy (nats)."
    )
    definitions: dict[str, HeadScoreDefinition]
    corpus: dict[str, Any] = Field(
        description="What they were computed on: the corpus's name, version and SHA-256, "
        "sequences, tokens, queries, max_tokens, the seed, repeat_length (R), "
        "induction_sequences and their tokens."
    )
    top_k: int | None = Field(None, description="Passages kept per head and score.")
    examples: list[AtlasExample] | None = Field(
        None,
        description="The examples behind the scores: for every head and score, the top_k "
        "passages where that head scores highest, best first (ties to the lower passage).",
    )
    passages: dict[str, str] | None = Field(
        None, description="The corpus passages the examples name, by passage index."
    )

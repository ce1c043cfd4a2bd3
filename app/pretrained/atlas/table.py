"""The head atlas's result: every head's scores, what they mean and what they were computed on."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..blocks import Block
from .definitions import DEFINITION_VERSION, ScoreDefinition


@dataclass(frozen=True)
class CorpusInfo:
    """What the scores were computed on (the response's ``corpus``).

    Attributes:
        name: :attr:`Corpus.name`.
        version: :attr:`Corpus.version`.
        sha256: :attr:`Corpus.sha256`.
        sequences: natural-text sequences (one forward pass each).
        tokens: their tokens, special tokens included, after cutting to ``max_tokens``.
        queries: the queries the natural-text scores average over.
        truncated: how many texts were cut to ``max_tokens``.
        max_tokens: tokens per natural-text sequence at most.
        seed: the seed of the random tokens.
        repeat_length: R.
        induction_sequences: repeated sequences.
        induction_tokens: their tokens, P and S included.
        induction_queries: the queries the repeated-token scores average over.
        definition_version: :data:`DEFINITION_VERSION`.
    """

    name: str
    version: str | None
    sha256: str
    sequences: int
    tokens: int
    queries: int
    truncated: int
    max_tokens: int
    seed: int
    repeat_length: int
    induction_sequences: int
    induction_tokens: int
    induction_queries: int
    definition_version: int = DEFINITION_VERSION

    @property
    def fingerprint(self) -> str:
        """Hex SHA-256 of what decides the scores besides the model (:func:`work_fingerprint`)."""
        return work_fingerprint(
            self.sha256,
            max_tokens=self.max_tokens,
            seed=self.seed,
            repeat_length=self.repeat_length,
            induction_sequences=self.induction_sequences,
            definition_version=self.definition_version,
        )


def work_fingerprint(
    corpus_sha256: str,
    *,
    max_tokens: int,
    seed: int,
    repeat_length: int,
    induction_sequences: int,
    definition_version: int = DEFINITION_VERSION,
) -> str:
    """Hex SHA-256 of what decides the scores besides the model: a cache key's part.

    The corpus's hash, ``max_tokens``, the seed, R, the repeated sequences and the
    definition version; known before the scores are computed.
    """
    parts = (
        corpus_sha256,
        max_tokens,
        seed,
        repeat_length,
        induction_sequences,
        definition_version,
    )
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


@dataclass(frozen=True)
class HeadScores:
    """Every head's scores, what they mean and what they were computed on.

    Attributes:
        scores: :data:`SCORES` name -> (N, H) float64 (N layers, H query heads of ``block``).
        definitions: name -> :class:`ScoreDefinition`.
        corpus: what they were computed on.
        num_layers: N.
        num_heads: H.
        model: the model's name.
        block: the scored block ("decoder", or "encoder" for encoders and encoder-decoders).
        compute_ms: wall time of the whole computation, in milliseconds.
        definition_version: :data:`DEFINITION_VERSION`.
        top_k: passages kept per head and score (:mod:`.shards`), None without examples.
        examples: one dict per kept passage, best first per head and score: score, layer,
            head, rank, passage, value, position, kind ("corpus" or "random tokens"),
            token (:func:`.shards.example_rows`); None when not kept.
        passages: the corpus passages the examples name, by index (as a string).
    """

    scores: dict[str, np.ndarray]
    definitions: Mapping[str, ScoreDefinition]
    corpus: CorpusInfo
    num_layers: int
    num_heads: int
    model: str
    block: Block
    compute_ms: float
    definition_version: int = DEFINITION_VERSION
    top_k: int | None = None
    examples: tuple[dict[str, Any], ...] | None = None
    passages: dict[str, str] | None = None

    def to_rows(self) -> list[dict[str, Any]]:
        """One row per head, layer-major: ``{"layer", "head", <score>: float, ...}``.

        ``pandas.DataFrame(scores.to_rows())`` is the table as a DataFrame; :meth:`to_csv`
        writes it as CSV.
        """
        return [
            {
                "layer": layer,
                "head": head,
                **{name: float(self.scores[name][layer, head]) for name in self.scores},
            }
            for layer in range(self.num_layers)
            for head in range(self.num_heads)
        ]

    def example_rows(self) -> list[dict[str, Any]]:
        """The examples with their passages' texts (:func:`examples_with_texts`)."""
        return examples_with_texts(self.examples or (), self.passages or {})

    def to_csv(self) -> str:
        """:meth:`to_rows` as CSV text, a header line first (layer, head, then the scores)."""
        buffer = io.StringIO()
        writer = csv.DictWriter(
            buffer, fieldnames=["layer", "head", *self.scores], lineterminator="\n"
        )
        writer.writeheader()
        writer.writerows(self.to_rows())
        return buffer.getvalue()

    def top(self, name: str, k: int = 5, *, lowest: bool = False) -> list[tuple[int, int, float]]:
        """The ``k`` heads with the highest (or ``lowest``) score ``name``: (layer, head, value).

        Ties keep layer-major order.

        Raises:
            KeyError: no such score.
        """
        flat = self.scores[name].reshape(-1)
        order = np.argsort(flat if lowest else -flat, kind="stable")[:k]
        return [(int(i) // self.num_heads, int(i) % self.num_heads, float(flat[i])) for i in order]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: scores as nested lists (N x H), definitions and corpus as objects.

        :meth:`from_dict` reads it back (a result cached on disk).
        """
        return {
            "model": self.model,
            "block": self.block,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "definition_version": self.definition_version,
            "compute_ms": self.compute_ms,
            "scores": {name: values.tolist() for name, values in self.scores.items()},
            "definitions": {name: asdict(d) for name, d in self.definitions.items()},
            "corpus": {**asdict(self.corpus), "fingerprint": self.corpus.fingerprint},
            **(
                {}
                if self.examples is None
                else {
                    "top_k": self.top_k,
                    "examples": list(self.examples),
                    "passages": self.passages or {},
                }
            ),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HeadScores:
        """The result :meth:`to_dict` wrote.

        Raises:
            KeyError, TypeError: ``data`` is not what :meth:`to_dict` writes.
        """
        corpus = {k: v for k, v in data["corpus"].items() if k != "fingerprint"}
        return cls(
            scores={k: np.asarray(v, dtype=np.float64) for k, v in data["scores"].items()},
            definitions={k: ScoreDefinition(**v) for k, v in data["definitions"].items()},
            corpus=CorpusInfo(**corpus),
            num_layers=int(data["num_layers"]),
            num_heads=int(data["num_heads"]),
            model=str(data["model"]),
            block=data["block"],
            compute_ms=float(data["compute_ms"]),
            definition_version=int(data["definition_version"]),
            top_k=None if data.get("top_k") is None else int(data["top_k"]),
            examples=None if data.get("examples") is None else tuple(data["examples"]),
            passages=None if data.get("passages") is None else dict(data["passages"]),
        )


def examples_with_texts(
    examples: Iterable[Mapping[str, Any]], passages: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Each example row with its ``text``.

    A corpus passage's text by its index in ``passages``; None for the random sequences
    (``kind`` "random tokens"), which have none.
    """
    return [
        {**r, "text": passages.get(str(r["passage"])) if r["kind"] == "corpus" else None}
        for r in examples
    ]

"""The head atlas's scores: what each one means and reads, and the defaults of the work.

See :mod:`attnviz.pretrained.atlas` for the queries and keys each kind of input counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

DEFINITION_VERSION: Final = 1
"""The version of the scores' definitions (:data:`DEFINITIONS`, the query and key sets of
the module docstring, the corpus's split). Bumped whenever any of them changes: results
cached under an older version are stale."""

SCORES: Final = ("previous_token", "induction", "duplicate_token", "first_token", "self", "entropy")
"""The scores, in the order of :meth:`HeadScores.to_rows`'s columns."""

CORPUS_NAME: Final = "head_atlas"
"""The shipped corpus: ``attnviz/corpus/head_atlas.txt``."""
CORPUS_VERSION: Final = "1"
"""The shipped corpus's version (its README.md); its SHA-256 is reported too."""
MAX_TOKENS: Final = 256
"""Tokens per natural-text sequence by default (a longer text is cut, special tokens kept)."""
REPEAT_LENGTH: Final = 40
"""R, the random tokens repeated twice in each induction sequence, by default: with
:data:`INDUCTION_SEQUENCES`, 640 second-copy queries, in 2 of SmolLM2's 35 passes (3 s
of its 16 s)."""
INDUCTION_SEQUENCES: Final = 16
"""How many repeated random sequences by default."""
INDUCTION_BATCH: Final = 8
"""Repeated sequences per forward pass (one length: no padding)."""
PROBE_TEXT: Final = "the"
"""The text whose tokenisation, with and without special tokens, shows what the tokenizer
adds around any text (:func:`special_affixes`)."""


@dataclass(frozen=True)
class ScoreDefinition:
    """What one score means.

    Attributes:
        name: its key in :attr:`HeadScores.scores`.
        definition: the formula, its queries and keys, in words.
        source: the paper it comes from.
        inputs: "natural text" or "repeated random tokens".
        unit: "weight" (a mean softmax weight, 0 to 1) or "nats".
    """

    name: str
    definition: str
    source: str
    inputs: Literal["natural text", "repeated random tokens"]
    unit: Literal["weight", "nats"] = "weight"


_NATURAL: Final = (
    "Natural text: each text tokenised alone (the tokenizer's special tokens included), cut "
    "to max_tokens, one forward pass each (no padding); queries: positions i >= 1 that are "
    "not special tokens; keys: every position, the weights as the model computed them; the "
    "mean is over every counted query of every text."
)
_REPEATED: Final = (
    "Repeated random tokens: sequences P + x + x + S, x being R tokens drawn without "
    "replacement from the vocabulary less special and added tokens (seeded), P and S the "
    "special tokens the tokenizer adds before and after a text; queries: the R positions "
    "i of the second copy; the mean is over every such query of every sequence."
)

DEFINITIONS: Final[Mapping[str, ScoreDefinition]] = {
    "previous_token": ScoreDefinition(
        "previous_token",
        f"Mean of A[i, i-1], the weight on the previous position. {_NATURAL}",
        "Elhage et al. 2021, A Mathematical Framework for Transformer Circuits "
        "(previous-token heads)",
        "natural text",
    ),
    "induction": ScoreDefinition(
        "induction",
        "Mean of A[i, i-R+1], the weight on the token that followed the current token's "
        f"first occurrence. {_REPEATED}",
        "Olsson et al. 2022, In-context Learning and Induction Heads (prefix matching on "
        "repeated random tokens)",
        "repeated random tokens",
    ),
    "duplicate_token": ScoreDefinition(
        "duplicate_token",
        f"Mean of A[i, i-R], the weight on the current token's first occurrence. {_REPEATED}",
        "Wang et al. 2022, Interpretability in the Wild: a Circuit for Indirect Object "
        "Identification in GPT-2 small (duplicate token heads)",
        "repeated random tokens",
    ),
    "first_token": ScoreDefinition(
        "first_token",
        "Mean of A[i, 0], the weight on the first position ([CLS] or BOS where the "
        f"tokenizer adds one, else the first word): an attention sink. {_NATURAL}",
        "Xiao et al. 2023, Efficient Streaming Language Models with Attention Sinks",
        "natural text",
    ),
    "self": ScoreDefinition(
        "self",
        f"Mean of A[i, i], the weight of a query on its own position. {_NATURAL}",
        "Clark et al. 2019, What Does BERT Look At? An Analysis of BERT's Attention "
        "(attention to the current token); Kovaleva et al. 2019 (diagonal pattern)",
        "natural text",
    ),
    "entropy": ScoreDefinition(
        "entropy",
        "Mean of the row's entropy -sum_j A[i, j] ln A[i, j] (0 ln 0 = 0) over every key, "
        "in nats: 0 for a head on one key, ln(i + 1) at most for a causal query at i. "
        f"{_NATURAL}",
        "Clark et al. 2019, What Does BERT Look At? An Analysis of BERT's Attention "
        "(entropy of each head's attention distribution)",
        "natural text",
        "nats",
    ),
}
"""Every score's definition and source, by name."""


@dataclass(frozen=True)
class Rule:
    """How one score reads a chunk of weights.

    Attributes:
        name: the score.
        kind: "offset" (A[i, i - value]), "position" (A[i, value]) or "entropy".
        value: the offset or the key position.
    """

    name: str
    kind: Literal["offset", "position", "entropy"]
    value: int = 0


def natural_rules() -> tuple[Rule, ...]:
    """The natural-text scores: previous token, first token, self, entropy."""
    return (
        Rule("previous_token", "offset", 1),
        Rule("first_token", "position", 0),
        Rule("self", "offset", 0),
        Rule("entropy", "entropy"),
    )


def repeated_rules(repeat_length: int) -> tuple[Rule, ...]:
    """The repeated-token scores: induction (i - R + 1) and duplicate token (i - R)."""
    return (
        Rule("induction", "offset", repeat_length - 1),
        Rule("duplicate_token", "offset", repeat_length),
    )

"""Head atlas: what every head of a text model does, scored over a corpus (issue 33).

For each layer and head of a text model's self-attention block, six numbers
(:data:`SCORES`), each a mean of the softmax weights A (or of their rows) over chosen
queries, as (N, H) float64 arrays: N layers, H query heads. Two kinds of input:

* natural text (``previous_token``, ``first_token``, ``self``, ``entropy``): the corpus
  shipped with the package (``attnviz/corpus/head_atlas.txt``, see its README.md) or the
  caller's own texts. Each text is tokenised alone, as the model's tokenizer does (its
  special tokens included: [CLS] ... [SEP] for BERT, BOS where the tokenizer adds one),
  cut to ``max_tokens``, and runs in a forward pass of its own (B = 1: no padding, so no
  padding key or query exists). The counted queries are the positions i >= 1 whose token
  is not a special token (the tokenizer's ``all_special_ids``: [CLS], [SEP], BOS, EOS,
  pad, unk); the keys are every position, special tokens included, with the weights as
  the model computed them (rows are not renormalised). A score is the mean over every
  counted query of every text (each query weighs the same).
* repeated random tokens (``induction``, ``duplicate_token``): ``induction_sequences``
  sequences ``P + x + x + S``, where x is R tokens drawn without replacement from the
  vocabulary less its special and added tokens (seeded, :func:`repeated_tokens`), and P
  and S are the special tokens the tokenizer puts before and after any text (BOS or
  [CLS]; [SEP] or EOS; none for SmolLM2). All have one length, so they run in batches
  without padding. The counted queries are the R positions of the second copy of x.

Which block: a decoder's layers, an encoder's, and an encoder-decoder's *encoder* (its
self-attention reads the text alone, as an encoder's does; the decoder then runs on its
start token only, unobserved). Speech and image models are refused
(:class:`HeadScoresUnavailableError`) until scores are defined for them.

The weights are never held for a whole layer: each pass runs with a
:class:`HeadScoreObserver` (:class:`.computing.AttentionObserver`), to which every layer
hands its weights in chunks of query rows, computed by the model's own eager attention;
the observer adds the sums each score needs, per head, in float64 on the layer's device
(a model placed by a device map hands each layer's weights on that layer's device), and
moves the (H,) sums to the CPU at the end of the layer.

The defaults (:data:`MAX_TOKENS`, :data:`REPEAT_LENGTH`, :data:`INDUCTION_SEQUENCES`)
keep the work small: SmolLM2-135M (30 layers x 9 heads, float32, 2 CPU cores) reads the
shipped corpus (33 sequences, 5,157 tokens) and 16 sequences of 2 x 40 random tokens in
35 passes, in about 16 s, 1.2 times the same passes without an observer
(benchmarks/head_atlas.py).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
import torch
from torch import nn

from ..attention.cancellation import Cancellation, cancellable, check_cancelled
from ..attention.errors import AttentionInputError
from .blocks import Block
from .computing import OBSERVED_CHUNK_FLOATS
from .display import MIN_CHUNK_ROWS
from .model import LoadedModel, PretrainedModel
from .tokens import TokenizedBatch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

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


class HeadScoresUnavailableError(AttentionInputError):
    """A model whose heads are not scored (speech, images): field ``model`` (the server's 422)."""


@dataclass(frozen=True)
class Corpus:
    """Natural texts to score heads on, and what identifies them for a cache.

    Attributes:
        texts: one sequence each (the shipped corpus: its paragraphs).
        name: "head_atlas" for the shipped corpus, "texts" for the caller's.
        version: the shipped corpus's :data:`CORPUS_VERSION`, else None.
        sha256: hex SHA-256 of the shipped file's bytes, or of the caller's texts as a
            JSON list.
    """

    texts: tuple[str, ...]
    name: str
    version: str | None
    sha256: str


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
        )


@cache
def shipped_corpus() -> Corpus:
    """The natural-text corpus shipped in the package: its paragraphs, one sequence each.

    Read once per process with importlib.resources from ``attnviz/corpus/head_atlas.txt``;
    paragraphs are separated by blank lines (:func:`paragraphs`).
    """
    package = __name__.rsplit(".", 2)[0]  # attnviz
    data = (resources.files(package) / "corpus" / f"{CORPUS_NAME}.txt").read_bytes()
    return Corpus(
        texts=tuple(paragraphs(data.decode("utf-8"))),
        name=CORPUS_NAME,
        version=CORPUS_VERSION,
        sha256=hashlib.sha256(data).hexdigest(),
    )


def paragraphs(text: str) -> list[str]:
    """The paragraphs of ``text``: runs of non-blank lines, joined by newlines, stripped.

    Lines holding only whitespace separate paragraphs as empty ones do; a paragraph keeps
    its inner line breaks (verse, code) and its lines' indentation.
    """
    found: list[str] = []
    lines: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.strip():
            lines.append(line.rstrip())
        elif lines:
            found.append("\n".join(lines).strip("\n"))
            lines = []
    return found


def texts_corpus(texts: Sequence[str]) -> Corpus:
    """The caller's texts as a :class:`Corpus` (name "texts", hashed as a JSON list).

    Raises:
        AttentionInputError: (field ``texts``) no text; (``texts[i]``) an empty text.
    """
    if not texts:
        raise AttentionInputError(
            "texts", "give at least one text (or none for the shipped corpus)"
        )
    for i, text in enumerate(texts):
        if not text.strip():
            raise AttentionInputError(f"texts[{i}]", "the text is empty")
    digest = hashlib.sha256(json.dumps(list(texts), ensure_ascii=False).encode()).hexdigest()
    return Corpus(texts=tuple(texts), name="texts", version=None, sha256=digest)


def text_model(model: LoadedModel) -> PretrainedModel:
    """``model`` as the text model whose heads are scored.

    Raises:
        HeadScoresUnavailableError: (field ``model``) a speech or image model (or any
            model without a tokenizer).
    """
    if model.modality != "text" or not isinstance(model, PretrainedModel):
        raise HeadScoresUnavailableError(
            "model",
            f"{model.name} reads {model.modality}: the head atlas scores the self-attention "
            f"of text models, and refuses a {model.modality} model until scores are defined "
            "for it",
        )
    return model


def scored_block(model: LoadedModel) -> Block:
    """The block whose self-attention is scored: a decoder's, else the encoder's.

    An encoder-decoder's encoder: its self-attention reads the text alone, as an
    encoder's does (its decoder's would need a target text besides).

    Raises:
        HeadScoresUnavailableError: (field ``model``) as :func:`text_model`.
    """
    return "decoder" if text_model(model).family == "decoder" else "encoder"


def special_affixes(tokenizer: PreTrainedTokenizerBase) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after any text (BOS or [CLS]; [SEP] or EOS).

    Found by tokenising :data:`PROBE_TEXT` with and without special tokens: with them,
    it is prefix + the text's ids + suffix. A tokenizer that does otherwise (the text's
    ids change) gets neither.

    Returns:
        (prefix, suffix) token ids; ([], []) for SmolLM2.
    """
    with_special = list(tokenizer(PROBE_TEXT)["input_ids"])
    plain = list(tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"])
    for start in range(len(with_special) - len(plain) + 1):
        if plain and with_special[start : start + len(plain)] == plain:
            return with_special[:start], with_special[start + len(plain) :]
    return [], []


def random_vocabulary(model: PretrainedModel) -> torch.Tensor:
    """The ids random tokens are drawn from, ascending: (V',) int64.

    Every id below both the tokenizer's length and the embedding's rows, less the special
    tokens and the tokenizer's added tokens (control tokens such as <|im_start|>).
    """
    size = min(len(model.tokenizer), model.vocab_size or len(model.tokenizer))
    excluded = set(model.special_ids) | {int(i) for i in model.tokenizer.get_added_vocab().values()}
    keep = torch.ones(size, dtype=torch.bool)
    keep[[i for i in excluded if 0 <= i < size]] = False
    return keep.nonzero().flatten()


def repeated_tokens(
    model: PretrainedModel, count: int, repeat_length: int, seed: int
) -> tuple[torch.Tensor, int]:
    """The induction sequences: ``count`` rows of P + x + x + S (module docstring).

    Row b's x is R = ``repeat_length`` distinct ids of :func:`random_vocabulary`, drawn by
    ``torch.randperm`` from one ``torch.Generator`` seeded with ``seed``, row after row.

    Returns:
        ids (count, len(P) + 2R + len(S)) int64 on the CPU, and len(P): the second copy
        is at columns len(P) + R .. len(P) + 2R - 1.

    Raises:
        AttentionInputError: (field ``repeat_length``) R below 2, over the vocabulary, or
            the sequence over the model's positions; (``induction_sequences``) count below 1.
    """
    if count < 1:
        raise AttentionInputError("induction_sequences", f"{count} is below 1")
    vocabulary = random_vocabulary(model)
    if not 2 <= repeat_length <= len(vocabulary):
        raise AttentionInputError(
            "repeat_length",
            f"{repeat_length} is not in 2..{len(vocabulary)} (the tokens it draws from)",
        )
    prefix, suffix = special_affixes(model.tokenizer)
    length = len(prefix) + 2 * repeat_length + len(suffix)
    if model.max_tokens is not None and length > model.max_tokens:
        raise AttentionInputError(
            "repeat_length",
            f"{repeat_length} makes sequences of {length} tokens; {model.name} takes at most "
            f"{model.max_tokens} (max_position_embeddings)",
        )
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(count):
        x = vocabulary[torch.randperm(len(vocabulary), generator=generator)[:repeat_length]]
        rows.append(torch.cat([torch.tensor(prefix), x, x, torch.tensor(suffix)]).long())
    return torch.stack(rows), len(prefix)


def natural_tokens(model: PretrainedModel, text: str, max_tokens: int) -> tuple[list[int], bool]:
    """One text's ids as the tokenizer gives them (special tokens included), cut to fit.

    Args:
        max_tokens: the most ids (the model's own positions bound it too); the tokenizer
            cuts the text, keeping its special tokens ([SEP] stays last).

    Returns:
        The ids, and whether the text was cut.
    """
    limit = max_tokens if model.max_tokens is None else min(max_tokens, model.max_tokens)
    whole = list(model.tokenizer(text)["input_ids"])
    if len(whole) <= limit:
        return whole, False
    return list(model.tokenizer(text, truncation=True, max_length=limit)["input_ids"]), True


def natural_queries(ids: torch.Tensor, special: torch.Tensor) -> torch.Tensor:
    """The counted queries of natural text: positions i >= 1 that are not special tokens.

    Args:
        ids: (B, L) int64.  special: (S,) int64, the special ids.

    Returns:
        (B, L) bool, True for a counted query.
    """
    counted = ~torch.isin(ids, special)
    counted[:, 0] = False
    return counted


def second_copy(ids: torch.Tensor, prefix_length: int, repeat_length: int) -> torch.Tensor:
    """The counted queries of repeated tokens: (B, L) bool, True on the second copy."""
    counted = torch.zeros(ids.shape, dtype=torch.bool)
    start = prefix_length + repeat_length
    counted[:, start : start + repeat_length] = True
    return counted


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


def _sum_dtype(device: torch.device) -> torch.dtype:
    """float64 where the device has it (MPS has not: float32 there)."""
    return torch.float32 if device.type == "mps" else torch.float64


class HeadScoreObserver:
    """The :class:`.computing.AttentionObserver` that adds up every head's scores.

    One observer serves many passes: :meth:`begin` before each (its counted queries and
    rules), :meth:`end` after it. During a pass each observed layer hands its weights in
    chunks of rows (:meth:`take`); per rule, the weights the score reads (A[i, i - d],
    A[i, 0], or each row's entropy) are taken at the counted queries of the chunk and
    summed over the batch and the rows, in float64 on the chunk's device, into (H,)
    sums, which move to the CPU when the layer is done (:meth:`layer_done`).

    Attributes:
        sums: score -> (N, H) float64, the sums over every counted query so far.
        counts: score -> the counted queries so far (the same for every layer and head).
    """

    def __init__(
        self,
        num_layers: int,
        num_heads: int,
        *,
        block: Block,
        block_of: Callable[[nn.Module], Block] | None = None,
    ) -> None:
        self.num_layers, self.num_heads = num_layers, num_heads
        self.block, self.block_of = block, block_of
        self.sums: dict[str, np.ndarray] = {}
        self.counts: dict[str, int] = {}
        self._rules: tuple[Rule, ...] = ()
        self._counted = torch.zeros(0, 0, dtype=torch.bool)
        self._on_device: dict[torch.device, torch.Tensor] = {}
        self._layer = -1
        self._layer_sums: dict[str, torch.Tensor] = {}

    def begin(self, counted: torch.Tensor, rules: Sequence[Rule]) -> None:
        """Start a pass.

        Args:
            counted: (B, L) bool, True at the queries the pass's scores average over.
            rules: the scores this pass adds to.

        Raises:
            ValueError: a counted query i has no key i - d for an offset rule (i < d).
        """
        for rule in rules:
            if rule.kind == "offset" and counted[:, : rule.value].any():
                raise ValueError(f"{rule.name}: a counted query comes before key i - {rule.value}")
        self._counted, self._rules = counted, tuple(rules)
        self._on_device = {}
        self._layer = -1
        for rule in rules:
            self.sums.setdefault(rule.name, np.zeros((self.num_layers, self.num_heads)))
            self.counts[rule.name] = self.counts.get(rule.name, 0) + int(counted.sum())

    def end(self) -> None:
        """Check that the pass observed every layer of the block.

        Raises:
            RuntimeError: it observed another number of attention calls.
        """
        if self._layer + 1 != self.num_layers:
            raise RuntimeError(
                f"the pass observed {self._layer + 1} attention calls of the {self.block} "
                f"block, not its {self.num_layers} layers"
            )

    def means(self) -> dict[str, np.ndarray]:
        """Score -> (N, H) float64 means: each sum over its counted queries.

        Raises:
            AttentionInputError: (field ``texts``) a score counted no query (every text
                too short).
        """
        means = {}
        for name, total in self.sums.items():
            if self.counts[name] == 0:
                raise AttentionInputError(
                    "texts",
                    f"no text has a query for {name!r}: each needs a token after its first "
                    "that is not a special token",
                )
            means[name] = total / self.counts[name]
        return means

    def wants(self, module: nn.Module) -> bool:
        """The scored block's calls, counted as its layers."""
        if self.block_of is not None and self.block_of(module) != self.block:
            return False
        self._layer += 1
        self._layer_sums = {}
        return True

    def row_chunks(self, length_q: int, length_k: int, num_heads: int) -> list[tuple[int, int]]:
        """Chunks of about OBSERVED_CHUNK_FLOATS weights of the whole batch.

        At most an eighth of the rows each (and at least MIN_CHUNK_ROWS), as
        :meth:`.display.WalkObserver.row_chunks`: a causal chunk computes its rows
        against every key up to its last row.

        Raises:
            RuntimeError: the call's queries are not the pass's positions.
        """
        batch, length = self._counted.shape
        if length_q != length:
            raise RuntimeError(f"an observed call has {length_q} queries, not {length}")
        rows = max(1, OBSERVED_CHUNK_FLOATS // max(1, batch * num_heads * length_k))
        rows = min(rows, max(MIN_CHUNK_ROWS, -(-length_q // 8)))
        return [(start, min(length_q, start + rows)) for start in range(0, length_q, rows)]

    def take(self, start: int, stop: int, weights: torch.Tensor) -> None:
        """Add one chunk's sums: weights (B, H, stop - start, L_k'), the model's dtype.

        Keys past L_k' have weight 0 in every row of the chunk (their entries read 0).

        Raises:
            RuntimeError: the chunk's heads are not the block's H.
        """
        _, num_heads, rows, length_k = weights.shape
        if num_heads != self.num_heads:
            raise RuntimeError(f"layer {self._layer} has {num_heads} heads, not {self.num_heads}")
        device = weights.device
        dtype = _sum_dtype(device)
        if device not in self._on_device:
            self._on_device[device] = self._counted.to(device)
        counted = self._on_device[device][:, start:stop].to(dtype)  # (B, rows)
        queries = torch.arange(start, stop, device=device)  # i, (rows,)
        for rule in self._rules:
            if rule.kind == "entropy":  # -sum_j A ln A over the row; xlogy makes 0 ln 0 = 0
                full = weights.float()  # bfloat16's logarithms in float32
                read = -torch.special.xlogy(full, full).sum(dim=-1, dtype=dtype)
            else:
                keys = (
                    queries - rule.value
                    if rule.kind == "offset"
                    else torch.full_like(queries, rule.value)
                )
                # A counted query's key is at most i, so within L_k' (row i sees key i); rows
                # before the offset are never counted, their clamped key read is multiplied by 0.
                picked = weights[
                    :, :, torch.arange(rows, device=device), keys.clamp(0, length_k - 1)
                ]
                read = picked.to(dtype)
            # read: (B, H, rows), one number per query row of each head
            total = torch.einsum("bhr,br->h", read, counted)  # (H,)
            before = self._layer_sums.get(rule.name)
            self._layer_sums[rule.name] = total if before is None else before + total

    def layer_done(self) -> None:
        """The layer's (H,) sums to the CPU, into :attr:`sums`."""
        for name, total in self._layer_sums.items():
            self.sums[name][self._layer] += total.cpu().double().numpy()
        self._layer_sums = {}


@dataclass(frozen=True)
class _Pass:
    """One forward pass to run: its ids, counted queries and rules."""

    ids: torch.Tensor
    counted: torch.Tensor
    rules: tuple[Rule, ...]


def head_scores(
    model: LoadedModel,
    texts: Sequence[str] | None = None,
    *,
    repeat_length: int = REPEAT_LENGTH,
    induction_sequences: int = INDUCTION_SEQUENCES,
    seed: int = 0,
    max_tokens: int = MAX_TOKENS,
    device: str = "auto",
    progress: Callable[[int, int], object] | None = None,
    cancel: Cancellation | None = None,
) -> HeadScores:
    """Score every head of ``model``'s self-attention (:data:`DEFINITIONS`).

    Args:
        model: a loaded text model (:class:`.model.PretrainedModel`).
        texts: the natural texts (one sequence each), or None for the shipped corpus
            (:func:`shipped_corpus`).
        repeat_length: R, random tokens per copy in the induction sequences.
        induction_sequences: how many induction sequences (run :data:`INDUCTION_BATCH`
            to a pass).
        seed: the seed of the random tokens (:func:`repeated_tokens`).
        max_tokens: tokens per natural-text sequence at most (longer texts are cut).
        device: "auto" (where the model lies), "cpu" or "cuda", as
            :meth:`.model.LoadedModel.device_for`.
        progress: called as ``progress(done, total)`` after each forward pass.
        cancel: the computation stops (ComputeCancelledError) at the next layer or chunk
            once it is cancelled; None: only an enclosing :func:`cancellable`'s.

    Returns:
        :class:`HeadScores` of the block :func:`scored_block` names.

    Raises:
        HeadScoresUnavailableError: (field ``model``) a speech or image model.
        AttentionInputError: (``texts``, ``texts[i]``, ``repeat_length``,
            ``induction_sequences``, ``max_tokens``, ``device``) as the checks above say.
        ComputeCancelledError: cancelled.
    """
    started = time.perf_counter()
    model = text_model(model)
    block = scored_block(model)
    if max_tokens < 2:
        raise AttentionInputError("max_tokens", f"{max_tokens} is below 2")
    corpus = shipped_corpus() if texts is None else texts_corpus(texts)
    special = torch.tensor(sorted(model.special_ids), dtype=torch.int64)
    passes: list[_Pass] = []
    tokens = truncated = 0
    for text in corpus.texts:
        ids, cut = natural_tokens(model, text, max_tokens)
        row = torch.tensor([ids], dtype=torch.int64)
        passes.append(_Pass(row, natural_queries(row, special), natural_rules()))
        tokens += len(ids)
        truncated += cut
    repeated, prefix = repeated_tokens(model, induction_sequences, repeat_length, seed)
    for first in range(0, induction_sequences, INDUCTION_BATCH):
        rows = repeated[first : first + INDUCTION_BATCH]
        counted = second_copy(rows, prefix, repeat_length)
        passes.append(_Pass(rows, counted, repeated_rules(repeat_length)))
    _, runner = model.placed_on(device)
    observer = HeadScoreObserver(
        model.block_layers(block),
        model.block_heads(block),
        block=block,
        block_of=model.block_of(runner) if model.family == "encoder-decoder" else None,
    )
    with cancellable(cancel) if cancel is not None else nullcontext():
        for done, work in enumerate(passes, start=1):
            check_cancelled()
            observer.begin(work.counted, work.rules)
            batch = unpadded_batch(model, work.ids)
            targets = (
                _decoder_start(model, len(work.ids)) if model.family == "encoder-decoder" else None
            )
            model.run(batch, targets, device=device, observer=observer, record=False)
            observer.end()
            if progress is not None:
                progress(done, len(passes))
    means = observer.means()
    info = CorpusInfo(
        name=corpus.name,
        version=corpus.version,
        sha256=corpus.sha256,
        sequences=len(corpus.texts),
        tokens=tokens,
        queries=observer.counts["first_token"],
        truncated=truncated,
        max_tokens=max_tokens,
        seed=seed,
        repeat_length=repeat_length,
        induction_sequences=induction_sequences,
        induction_tokens=int(repeated.numel()),
        induction_queries=observer.counts["induction"],
    )
    return HeadScores(
        scores={name: means[name] for name in SCORES},
        definitions=dict(DEFINITIONS),
        corpus=info,
        num_layers=observer.num_layers,
        num_heads=observer.num_heads,
        model=model.name,
        block=block,
        compute_ms=(time.perf_counter() - started) * 1000.0,
    )


def unpadded_batch(model: PretrainedModel, ids: torch.Tensor) -> TokenizedBatch:
    """(B, L) ids of one length as a batch without padding (segment 0, as one text)."""
    special = torch.isin(ids, torch.tensor(sorted(model.special_ids), dtype=torch.int64))
    return TokenizedBatch(
        tokens=[model.token_strings(row) for row in ids.tolist()],
        input_ids=ids,
        token_type_ids=torch.zeros_like(ids),
        attention_mask=torch.ones(ids.shape, dtype=torch.bool),
        special_tokens_mask=special,
    )


def _decoder_start(model: PretrainedModel, size: int) -> TokenizedBatch:
    """An encoder-decoder's decoder input of its start token alone, for ``size`` inputs.

    The encoder is what is scored; the decoder runs one position (unobserved).
    """
    start = getattr(model.config, "decoder_start_token_id", None)
    ids = torch.full((size, 1), model.pad_id if start is None else int(start), dtype=torch.int64)
    return unpadded_batch(model, ids)

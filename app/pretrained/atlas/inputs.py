"""What the head atlas runs: the corpus, the model's text block, the repeated random tokens.

Each natural text is tokenised alone (special tokens included) and cut to ``max_tokens``;
the induction sequences are P + x + x + S of seeded random tokens (:func:`repeated_tokens`).
The counted queries of each are here too (:func:`natural_queries`, :func:`second_copy`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Final

import torch

from ...attention.errors import AttentionInputError
from ..blocks import Block
from ..model import LoadedModel, PretrainedModel
from ..tokens import TokenizedBatch
from .definitions import CORPUS_NAME, CORPUS_VERSION, PROBE_TEXT

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


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


FIRST_PREFIX_CHARS: Final = 8
"""Characters per kept token of the first prefix :func:`natural_tokens` tokenises."""
PREFIX_MARGIN: Final = 16
"""Tokens past the kept ones a prefix must make before its first ones are taken as the
whole text's (the prefix's cut word lies past them)."""


@cache
def shipped_corpus() -> Corpus:
    """The natural-text corpus shipped in the package: its paragraphs, one sequence each.

    Read once per process with importlib.resources from ``attnviz/corpus/head_atlas.txt``;
    paragraphs are separated by blank lines (:func:`paragraphs`).
    """
    package = __name__.split(".")[0]  # attnviz
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
    return text_model(model).spec.scored_block


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
    model: PretrainedModel,
    count: int,
    repeat_length: int,
    seed: int,
    vocabulary: torch.Tensor | None = None,
) -> tuple[torch.Tensor, int]:
    """The induction sequences: ``count`` rows of P + x + x + S (module docstring).

    Row b's x is R = ``repeat_length`` distinct ids of :func:`random_vocabulary`, drawn by
    ``torch.randperm`` from one ``torch.Generator`` seeded with ``seed``, row after row
    (``vocabulary``: that of :func:`random_vocabulary`, when the caller has it already).

    Returns:
        ids (count, len(P) + 2R + len(S)) int64 on the CPU, and len(P): the second copy
        is at columns len(P) + R .. len(P) + 2R - 1.

    Raises:
        AttentionInputError: (field ``repeat_length``) R below 2, over the vocabulary, or
            the sequence over the model's positions; (``induction_sequences``) count below 1.
    """
    if count < 1:
        raise AttentionInputError("induction_sequences", f"{count} is below 1")
    vocabulary = random_vocabulary(model) if vocabulary is None else vocabulary
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

    A long text is tokenised by prefixes of :data:`FIRST_PREFIX_CHARS` x ``max_tokens``
    characters (cut before a whitespace, where no tokenizer's pre-tokenizer joins words),
    doubled until a prefix makes :data:`PREFIX_MARGIN` tokens more than it keeps (or is
    the whole text): the first ``max_tokens`` ids of such a prefix are the whole text's,
    and the tokenizer never gets a 60 MB passage at once (memory, and Ctrl-C waits for
    it: the tokenizer does not return to Python while it runs).

    Args:
        max_tokens: the most ids (the model's own positions bound it too); the tokenizer
            cuts the text, keeping its special tokens ([SEP] stays last).

    Returns:
        The ids, and whether the text was cut.
    """
    limit = max_tokens if model.max_tokens is None else min(max_tokens, model.max_tokens)
    size = FIRST_PREFIX_CHARS * limit
    while True:
        prefix = text[:size]
        if len(prefix) < len(text):
            space = max(prefix.rfind(" "), prefix.rfind("\n"), prefix.rfind("\t"))
            # a prefix of one word: cut within it (the margin keeps the cut past the ids)
            prefix = prefix[:space] if space > len(prefix) // 2 else prefix
        whole = list(model.tokenizer(prefix)["input_ids"])
        if len(prefix) == len(text):  # the whole text
            if len(whole) <= limit:
                return whole, False
            break
        if len(whole) > limit + PREFIX_MARGIN:
            break
        size *= 2
    return list(model.tokenizer(prefix, truncation=True, max_length=limit)["input_ids"]), True


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


def decoder_start(model: PretrainedModel, size: int) -> TokenizedBatch:
    """An encoder-decoder's decoder input of its start token alone, for ``size`` inputs.

    The encoder is what is scored; the decoder runs one position (unobserved).
    """
    start = getattr(model.config, "decoder_start_token_id", None)
    ids = torch.full((size, 1), model.pad_id if start is None else int(start), dtype=torch.int64)
    return unpadded_batch(model, ids)

"""From user sequences to a right-padded (B, L) id batch with axis labels.

A sequence is either a list of token ids or a string of words split on
whitespace. All sequences of one request (source and target) must be of the same
kind. Words get ids from a per-request vocabulary in first-seen order, skipping
``pad_id``; the word ``<pad>`` is the padding token itself. Padding follows tutorial
000 section 7.2: every sequence is right-padded with ``pad_id`` to L, the longest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import torch

from .errors import AttentionInputError

PAD_LABEL: Final = "<pad>"
"""The label of a padding position, and the word that means ``pad_id``."""

SequenceInput = Sequence[int] | str
"""One input sequence: token ids, or words separated by whitespace."""


def token_count(sequence: SequenceInput) -> int:
    """How many tokens ``sequence`` is: its ids, or its whitespace-separated words."""
    return len(sequence.split()) if isinstance(sequence, str) else len(sequence)


@dataclass(frozen=True)
class TokenBatch:
    """A right-padded batch of token ids with one label per position.

    Attributes:
        ids: (B, L) int64 on the CPU, right-padded with pad_id.
        labels: B lists of L strings: the word, or the id as text; "<pad>" for padding.
        lengths: the B unpadded lengths.
    """

    ids: torch.Tensor
    labels: list[list[str]]
    lengths: list[int]


def _is_words(sequences: Sequence[SequenceInput]) -> bool:
    return isinstance(sequences[0], str)


def _check_batch(field: str, sequences: Sequence[SequenceInput], words: bool) -> None:
    if len(sequences) == 0:
        raise AttentionInputError(field, "the batch is empty; give at least one sequence")
    for i, seq in enumerate(sequences):
        if isinstance(seq, str) != words:
            raise AttentionInputError(
                f"{field}[{i}]",
                "mixes words and token ids; give every sequence of the request as words "
                "(a string) or every one as a list of ids",
            )
        if token_count(seq) == 0:
            raise AttentionInputError(f"{field}[{i}]", "the sequence is empty")


def _pad(rows: list[list[int]], labels: list[list[str]], pad_id: int) -> TokenBatch:
    length = max(len(row) for row in rows)
    lengths = [len(row) for row in rows]
    padded = [row + [pad_id] * (length - len(row)) for row in rows]
    padded_labels = [lab + [PAD_LABEL] * (length - len(lab)) for lab in labels]
    return TokenBatch(torch.tensor(padded, dtype=torch.int64), padded_labels, lengths)


def encode_batches(
    batches: dict[str, Sequence[SequenceInput]],
    *,
    pad_id: int,
    vocab_size: int,
) -> dict[str, TokenBatch]:
    """Encode and right-pad one or more batches that share one vocabulary.

    Args:
        batches: field name -> sequences, e.g. ``{"sequences": [...], "targets": [...]}``;
            the names are used in error messages. Words are numbered across all
            batches in the order given.
        pad_id: the padding id, 0 <= pad_id < vocab_size.
        vocab_size: the embedding table's size; every id must lie in [0, vocab_size).

    Returns:
        field name -> :class:`TokenBatch`, each padded to its own longest sequence.

    Raises:
        AttentionInputError: an empty batch or sequence, words mixed with ids,
            an id outside [0, vocab_size) (field ``sequences[i]``), pad_id outside
            [0, vocab_size) (field ``pad_id``), or more distinct words than
            vocab_size - 1 ids (field ``vocab_size``).
    """
    if not 0 <= pad_id < vocab_size:
        raise AttentionInputError("pad_id", f"{pad_id} is outside [0, vocab_size={vocab_size})")
    first = next(iter(batches.values()))
    if len(first) == 0:
        raise AttentionInputError(next(iter(batches)), "the batch is empty")
    words = _is_words(first)
    for field, sequences in batches.items():
        _check_batch(field, sequences, words)

    vocab: dict[str, int] = {PAD_LABEL: pad_id}
    encoded: dict[str, TokenBatch] = {}
    for field, sequences in batches.items():
        rows: list[list[int]] = []
        labels: list[list[str]] = []
        for i, seq in enumerate(sequences):
            if isinstance(seq, str):
                tokens = seq.split()
                for token in tokens:
                    if token not in vocab:
                        vocab[token] = _next_word_id(len(vocab) - 1, pad_id)
                rows.append([vocab[t] for t in tokens])
                labels.append([PAD_LABEL if vocab[t] == pad_id else t for t in tokens])
            else:
                ids = list(seq)
                bad = [t for t in ids if not 0 <= t < vocab_size]
                if bad:
                    raise AttentionInputError(
                        f"{field}[{i}]",
                        f"token id {bad[0]} is outside [0, vocab_size={vocab_size})",
                    )
                rows.append(ids)
                labels.append([PAD_LABEL if t == pad_id else str(t) for t in ids])
        encoded[field] = _pad(rows, labels, pad_id)

    if words and len(vocab) > vocab_size:
        raise AttentionInputError(
            "vocab_size",
            f"{len(vocab) - 1} distinct words and the pad token need vocab_size >= "
            f"{len(vocab)}, got {vocab_size}",
        )
    return encoded


def _next_word_id(n_words: int, pad_id: int) -> int:
    """The id of the (n_words + 1)-th distinct word: 0, 1, 2, ... skipping pad_id."""
    return n_words if n_words < pad_id else n_words + 1


def encode_source_target(
    sequences: Sequence[SequenceInput],
    targets: Sequence[SequenceInput] | None,
    *,
    pad_id: int,
    vocab_size: int,
) -> tuple[TokenBatch, TokenBatch | None]:
    """Encode a source batch and an optional target batch with one vocabulary.

    Returns:
        (source, target), target None when ``targets`` is None.

    Raises:
        AttentionInputError: as :func:`encode_batches`, or (field ``targets``) a
            target batch whose size differs from the source batch.
    """
    if targets is None:
        return encode_batches({"sequences": sequences}, pad_id=pad_id, vocab_size=vocab_size)[
            "sequences"
        ], None
    if len(targets) != len(sequences):
        raise AttentionInputError(
            "targets",
            f"the target batch has {len(targets)} sequences but the source batch has "
            f"{len(sequences)}; they pair one to one",
        )
    encoded = encode_batches(
        {"sequences": sequences, "targets": targets}, pad_id=pad_id, vocab_size=vocab_size
    )
    return encoded["sequences"], encoded["targets"]

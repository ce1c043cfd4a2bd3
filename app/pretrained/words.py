"""One input's shown tokens, and word pieces merged into words (``merge_words``).

The pieces of one word, as the tokenizer's pre-tokenizer splits the text
(:attr:`.tokens.TokenizedBatch.word_ids`), become one row and one column of a map: a
word's column is the SUM over its key pieces (the attention the word gets) and its row
the MEAN over its query pieces, so rows still sum to 1 (:mod:`.display`).
"""

from __future__ import annotations

import torch

from .tokens import TokenizedBatch


def shown_tokens(
    batch: TokenizedBatch, keep: torch.Tensor | None
) -> tuple[list[str], list[int], list[int], list[bool]]:
    """One input's tokens, ids, segments and special flags; only ``keep``'s when given."""
    tokens, ids = batch.tokens[0], batch.input_ids[0].tolist()
    types, special = batch.token_type_ids[0].tolist(), batch.special_tokens_mask[0].tolist()
    if keep is None:
        return tokens, ids, types, special
    positions = keep.nonzero().flatten().tolist()
    return (
        [tokens[i] for i in positions],
        [ids[i] for i in positions],
        [types[i] for i in positions],
        [special[i] for i in positions],
    )


def word_groups(words: list[int]) -> list[list[int]]:
    """Positions grouped by word: runs of equal word numbers (:attr:`TokenizedBatch.word_ids`)."""
    groups: list[list[int]] = []
    for position, word in enumerate(words):
        if groups and words[groups[-1][0]] == word:
            groups[-1].append(position)
        else:
            groups.append([position])
    return groups


def joined_piece(piece: str, first: bool) -> str:
    """A piece as part of its word's label: WordPiece's continuation "##" dropped."""
    return piece[2:] if not first and piece.startswith("##") and len(piece) > 2 else piece


class WordMerge:
    """The merge of one side's shown tokens into words (``merge_words``).

    A merged map is M[a, b] = (1 / |A|) sum_{i in A} sum_{j in B} W[i, j]: a word's
    column sums its key pieces, its row averages its query pieces, computed by index
    sums (O(L_q x L_k), no L x W matrix).

    Attributes:
        groups: the shown positions of each word's pieces.
        word_of: (L',) long, each shown position's word.
        sizes: (W,) float32, each word's pieces.
    """

    def __init__(self, batch: TokenizedBatch, keep: torch.Tensor | None) -> None:
        words = batch.words(0)
        positions = list(range(len(words))) if keep is None else keep.nonzero().flatten().tolist()
        self.groups = word_groups([words[i] for i in positions])
        self.word_of = torch.tensor([w for w, group in enumerate(self.groups) for _ in group])
        self.sizes = torch.tensor([len(group) for group in self.groups], dtype=torch.float32)

    def keys(self, maps: torch.Tensor) -> torch.Tensor:
        """(..., K) maps over the shown keys summed into their words: (..., W)."""
        merged = maps.new_zeros((*maps.shape[:-1], len(self.groups)))
        return merged.index_add_(-1, self.word_of.to(maps.device), maps)

    def queries(self, maps: torch.Tensor, first: int, last: int) -> tuple[int, torch.Tensor]:
        """(..., R, C) maps of shown rows first .. last - 1, averaged into their words.

        The rows must be whole words (``first`` a word's first piece, ``last`` past a
        word's last). Returns the first word's index and (..., U, C), U words.
        """
        word = self.word_of[first:last]
        u0, u1 = int(word[0]), int(word[-1]) + 1
        if first > 0 and int(self.word_of[first - 1]) == u0:
            raise ValueError(f"shown row {first} is inside a word, not at its first piece")
        merged = maps.new_zeros((*maps.shape[:-2], u1 - u0, maps.shape[-1]))
        merged.index_add_(-2, (word - u0).to(maps.device), maps)
        return u0, merged / self.sizes[u0:u1, None].to(maps.device, maps.dtype)

    def tokens(
        self, shown: tuple[list[str], list[int], list[int], list[bool]]
    ) -> tuple[list[str], list[int], list[int], list[bool]]:
        """Words from the shown tokens, with the ids and segments of their first pieces.

        A word is special when all its pieces are.
        """
        tokens, ids, types, special = shown
        return (
            ["".join(joined_piece(tokens[i], i == g[0]) for i in g) for g in self.groups],
            [ids[g[0]] for g in self.groups],
            [types[g[0]] for g in self.groups],
            [all(special[i] for i in g) for g in self.groups],
        )

"""Texts as a model takes them: tokenised, paired, chat-wrapped, padded, words kept.

:class:`TokenizedBatch` is what every pass takes; :class:`TokenizerMixin` gives
:class:`.model.PretrainedModel` its tokenisation (the tokenizer's special tokens, the pad
id, the chat template, sentence pairs, an encoder-decoder's decoder input, a prompt with
what was generated after it). Shapes: B inputs, L tokens (padded to the longest).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..attention.errors import AttentionInputError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from .families import FamilySpec
    from .image_tokens import ImageTokens


@dataclass(frozen=True)
class TokenizedBatch:
    """Texts as the model takes them, right-padded to the longest (L).

    Attributes:
        tokens: B lists of L tokens as the tokenizer writes them (WordPiece ``##``
            pieces, BPE ``Ġ`` spaces, special tokens, padding).
        input_ids: (B, L) int64.
        token_type_ids: (B, L) int64, 0 for sentence A, 1 for sentence B (0 for models
            without segments).
        attention_mask: (B, L) bool, True for real tokens, False for padding.
        special_tokens_mask: (B, L) bool, True for the tokenizer's special tokens
            ([CLS], [SEP], <|im_start|>, BOS, ...) and padding, typed ones included.
        word_ids: B lists of L word numbers (0, 1, ... in order): the pieces of one word
            as the tokenizer's pre-tokenizer splits the text (fast tokenizers'
            ``word_ids()``, per sentence of a pair) share one; special tokens, padding,
            generated tokens and tokens of a tokenizer without word ids have their own.
            None: every token its own word.
        model_inputs: the forward's other inputs from a vision-language model's processor
            (``pixel_values``, ``image_grid_thw``, ``image_sizes``, ...): tensors of the
            images, or of shape (B, L) per token (``mm_token_type_ids``); empty for text.
        images: each image's tokens and the rectangles of the image they cover
            (:class:`.image_tokens.ImageTokens`, B = 1); empty for text.
    """

    tokens: list[list[str]]
    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    attention_mask: torch.Tensor
    special_tokens_mask: torch.Tensor
    word_ids: list[list[int]] | None = None
    model_inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    images: list[ImageTokens] = field(default_factory=list)

    def words(self, index: int) -> list[int]:
        """Input ``index``'s word numbers (:attr:`word_ids`, or one word per token)."""
        length = len(self.tokens[index])
        if self.word_ids is None:
            return list(range(length))
        return self.word_ids[index][:length]

    @property
    def lengths(self) -> list[int]:
        """(B,) the real tokens of each input."""
        return [int(n) for n in self.attention_mask.sum(dim=1)]

    def select(self, index: int) -> TokenizedBatch:
        """Input ``index`` alone: B = 1, its real tokens only (the padding cut off)."""
        length = self.lengths[index]
        return TokenizedBatch(
            tokens=[self.tokens[index][:length]],
            input_ids=self.input_ids[index : index + 1, :length],
            token_type_ids=self.token_type_ids[index : index + 1, :length],
            attention_mask=self.attention_mask[index : index + 1, :length],
            special_tokens_mask=self.special_tokens_mask[index : index + 1, :length],
            word_ids=[self.words(index)[:length]],
            model_inputs=self.per_token_inputs(lambda t: t[index : index + 1, :length]),
            images=self.images,
        )

    def per_token_inputs(
        self, change: Callable[[torch.Tensor], torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """:attr:`model_inputs` with ``change`` applied to those of shape (B, L), per token."""
        shape = tuple(self.input_ids.shape)
        return {
            name: change(value) if tuple(value.shape) == shape else value
            for name, value in self.model_inputs.items()
        }


def word_numbers(
    words: Sequence[tuple[int, int] | None], special: Sequence[bool], length: int
) -> list[int]:
    """:attr:`TokenizedBatch.word_ids` of one input, padded to ``length``.

    Consecutive tokens of one (sentence, word) share a number; tokens without a word
    (None), special tokens and the padding after them get one each.
    """
    numbers: list[int] = []
    previous: tuple[int, int] | None = None
    for word, is_special in zip(words, special, strict=True):
        same = bool(numbers) and not is_special and word is not None and word == previous
        numbers.append(numbers[-1] if same else (numbers[-1] + 1 if numbers else 0))
        previous = None if is_special else word
    while len(numbers) < length:
        numbers.append(numbers[-1] + 1 if numbers else 0)
    return numbers


class TokenizerMixin:
    """Tokenisation for :class:`.model.PretrainedModel`, from its ``tokenizer``.

    The host class gives ``name``, ``spec``, ``tokenizer``, ``config``, ``described``
    and ``max_tokens``.
    """

    if TYPE_CHECKING:
        name: str
        tokenizer: PreTrainedTokenizerBase

        @property
        def spec(self) -> FamilySpec: ...  # noqa: D102

        @property
        def config(self) -> Any: ...  # noqa: D102

        @property
        def described(self) -> str: ...  # noqa: D102

        @property
        def max_tokens(self) -> int | None: ...  # noqa: D102

    @property
    def chat_template(self) -> bool:
        """Whether the tokenizer has a chat template (prompts can be wrapped as a user turn)."""
        return bool(getattr(self.tokenizer, "chat_template", None))

    @functools.cached_property
    def special_ids(self) -> frozenset[int]:
        """Ids of the tokenizer's special tokens ([CLS], [SEP], <|im_start|>, BOS, EOS, pad)."""
        return frozenset(int(i) for i in self.tokenizer.all_special_ids)

    @functools.cached_property
    def pad_id(self) -> int:
        """The id that pads a batch: the tokenizer's pad token, else EOS, else 0."""
        for token_id in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id):
            if token_id is not None:
                return int(token_id)
        return 0

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """The tokens of ``ids`` as the tokenizer writes them (``##`` pieces, ``Ġ`` spaces)."""
        return [str(t) for t in self.tokenizer.convert_ids_to_tokens(list(ids))]

    def tokenize(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str | None] | None = None,
        *,
        chat: bool = False,
        field_name: str = "texts",
    ) -> TokenizedBatch:
        """Tokenise B texts (or sentence pairs) and right-pad them to the longest.

        Args:
            texts: B strings.
            text_pairs: None, or B entries: sentence B of each input, or None (encoders).
            chat: wrap each text as a user message in the model's chat template, with
                the template's special tokens and the assistant turn's opening.
            field_name: the request field ``texts`` is reported as (``targets`` for an
                encoder-decoder's decoder input).

        Returns:
            A :class:`TokenizedBatch`.

        Raises:
            AttentionInputError: (field ``texts[i]`` / ``text_pairs[i]`` / ``text_pairs``
                / ``chat``) an empty text, pairs not matching the texts in number, pairs
                for a model that does not take them, a chat prompt for a model without
                a chat template, or an input over the model's positions.
        """
        pairs = self._pairs(texts, text_pairs)
        if chat and not self.chat_template:
            raise AttentionInputError("chat", f"model {self.name!r} has no chat template")
        for name, values in ((field_name, texts), ("text_pairs", pairs)):
            for i, text in enumerate(values):
                if text is not None and not text.strip():
                    raise AttentionInputError(f"{name}[{i}]", "the text is empty")
        encoded = [self._encode(text, pair, chat) for text, pair in zip(texts, pairs, strict=True)]
        for i, (ids, _, _) in enumerate(encoded):
            if self.max_tokens is not None and len(ids) > self.max_tokens:
                raise AttentionInputError(
                    f"{field_name}[{i}]",
                    f"{len(ids)} tokens; {self.name} takes at most {self.max_tokens} "
                    "(max_position_embeddings)",
                )
        length = max(len(ids) for ids, _, _ in encoded)
        input_ids = torch.full((len(encoded), length), self.pad_id, dtype=torch.int64)
        token_type_ids = torch.zeros((len(encoded), length), dtype=torch.int64)
        attention_mask = torch.zeros((len(encoded), length), dtype=torch.bool)
        for b, (ids, types, _) in enumerate(encoded):
            input_ids[b, : len(ids)] = torch.tensor(ids, dtype=torch.int64)
            token_type_ids[b, : len(types)] = torch.tensor(types, dtype=torch.int64)
            attention_mask[b, : len(ids)] = True
        special = ~attention_mask
        for token_id in self.special_ids:
            special |= input_ids == token_id
        word_ids = [
            word_numbers(words, special[b, : len(words)].tolist(), length)
            for b, (_, _, words) in enumerate(encoded)
        ]
        return TokenizedBatch(
            tokens=[self.token_strings(row) for row in input_ids.tolist()],
            input_ids=input_ids,
            token_type_ids=token_type_ids,
            attention_mask=attention_mask,
            special_tokens_mask=special,
            word_ids=word_ids,
        )

    def _pairs(
        self, texts: Sequence[str], text_pairs: Sequence[str | None] | None
    ) -> list[str | None]:
        if text_pairs is None:
            return [None] * len(texts)
        if not self.spec.text_pairs:
            raise AttentionInputError(
                "text_pairs", f"sentence pairs are for encoders; {self.name} is {self.described}"
            )
        if len(text_pairs) != len(texts):
            raise AttentionInputError(
                "text_pairs",
                f"{len(text_pairs)} entries for {len(texts)} texts; give one per text "
                "(null for a single sentence)",
            )
        return list(text_pairs)

    def _encode(
        self, text: str, pair: str | None, chat: bool
    ) -> tuple[list[int], list[int], list[tuple[int, int] | None]]:
        """Ids, segments and each token's (sentence, word) of the pre-tokenizer, or None."""
        if chat:
            rendered = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
            encoding = self.tokenizer(str(rendered), add_special_tokens=False)
        else:
            encoding = self.tokenizer(text, pair, return_token_type_ids=True)
        ids = list(encoding["input_ids"])
        types = list(encoding.get("token_type_ids") or [0] * len(ids))
        words: list[tuple[int, int] | None] = [None] * len(ids)
        if getattr(encoding, "is_fast", False):
            sentences = encoding.sequence_ids()
            for i, word in enumerate(encoding.word_ids()):
                if word is not None:
                    words[i] = (sentences[i] or 0, word)
        return ids, types, words

    def decoder_inputs(self, targets: Sequence[str]) -> TokenizedBatch:
        """An encoder-decoder's decoder input: ``decoder_start_token_id`` + each target's tokens.

        As transformers' ``shift_tokens_right``: the decoder is teacher-forced on the
        target, each position predicting the next target token.

        Raises:
            AttentionInputError: (field ``targets``) a model of another family;
                (``targets[i]``) as :meth:`tokenize`.
        """
        if not self.spec.targets:
            raise AttentionInputError(
                "targets", f"targets are for encoder-decoders; {self.name} is {self.described}"
            )
        batch = self.tokenize(targets, field_name="targets")
        start = getattr(self.config, "decoder_start_token_id", None)
        if start is None:
            start = self.pad_id
        for i, length in enumerate(batch.lengths):
            if self.max_tokens is not None and length + 1 > self.max_tokens:
                raise AttentionInputError(
                    f"targets[{i}]",
                    f"{length} tokens and the decoder start token; {self.name} takes at most "
                    f"{self.max_tokens} (max_position_embeddings)",
                )
        size = batch.input_ids.shape[0]
        first = torch.full((size, 1), int(start), dtype=torch.int64)
        input_ids = torch.cat([first, batch.input_ids], dim=1)
        ones = torch.ones((size, 1), dtype=torch.bool)
        attention_mask = torch.cat([ones, batch.attention_mask], dim=1)
        special = torch.cat([ones, batch.special_tokens_mask], dim=1)
        return TokenizedBatch(
            tokens=[self.token_strings(row) for row in input_ids.tolist()],
            input_ids=input_ids,
            token_type_ids=torch.zeros_like(input_ids),
            attention_mask=attention_mask,
            special_tokens_mask=special,
            # The start token is a word of its own.
            word_ids=[[0] + [w + 1 for w in batch.words(b)] for b in range(size)],
        )

    def extended(self, batch: TokenizedBatch, new_ids: Sequence[int]) -> TokenizedBatch:
        """One input (B = 1) with ``new_ids`` appended: a prompt and what was generated."""
        added = torch.tensor([list(new_ids)], dtype=torch.int64)
        input_ids = torch.cat([batch.input_ids, added], dim=1)
        special = torch.zeros_like(added, dtype=torch.bool)
        for token_id in self.special_ids:
            special |= added == token_id
        words = batch.words(0)
        after = (max(words) + 1) if words else 0
        return TokenizedBatch(
            tokens=[batch.tokens[0] + self.token_strings(new_ids)],
            input_ids=input_ids,
            token_type_ids=torch.zeros_like(input_ids),
            attention_mask=torch.ones_like(input_ids, dtype=torch.bool),
            special_tokens_mask=torch.cat([batch.special_tokens_mask, special], dim=1),
            # Each generated token is a word of its own.
            word_ids=[words + list(range(after, after + len(new_ids)))],
            # per-token inputs (a VLM's token types) are 0 for the text generated
            model_inputs=batch.per_token_inputs(
                lambda t: torch.cat([t, t.new_zeros((t.shape[0], len(new_ids)))], dim=1)
            ),
            images=batch.images,
        )

"""One loaded transformers model, any family: tokenise, run while recording, heads on demand.

transformers is the runtime for every pretrained model AttnViz shows, the packaged
all-MiniLM-L6-v2 and SmolLM2-135M-Instruct included. The model runs with AttnViz's
recording attention (:mod:`.recorder`): each attention layer's query and key states,
the mask the model built and its scaling are kept, and the weights of any head are
computed afterwards by the model's own eager attention, to 1e-5 of transformers'
``output_attentions`` (``attn_implementation="eager"``). Memory then grows as
layers x L x d_model during the pass, and one layer's L x L maps at a time after it.

Families and their attention blocks:

* ``"encoder"`` (BERT, RoBERTa, DistilBERT, ...): block ``"encoder"``, bidirectional;
* ``"decoder"`` (GPT-2, Llama, Qwen2, Mistral, SmolLM2, ...): block ``"decoder"``, causal;
* ``"encoder-decoder"`` (T5, BART, Marian): ``"encoder"`` self-attention over the source,
  ``"decoder"`` causal self-attention over the target, ``"cross"`` attention from
  target queries to source keys.

Shapes: N layers of a block, B inputs, H query heads, H_kv key/value heads, L tokens
(padded to the longest), L_q x L_k for a block's maps (L_t x L_s for cross attention).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal

import torch
from torch import nn

from ..attention.cancellation import check_cancelled
from ..attention.engine import resolve_device
from ..attention.errors import AttentionInputError
from .placement import (
    Placement,
    home_device,
    layers_per_device,
    model_dtype,
    parameter_bytes,
    spread,
)
from .recorder import (
    AttentionObserver,
    AttentionRecording,
    Neuron,
    StepwiseRecording,
    ablate_heads,
    eager_attention,
    neuron,
    observe_attention,
    record_attention,
    use_recorder,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

Family = Literal["encoder", "decoder", "encoder-decoder"]
Block = Literal["encoder", "decoder", "cross"]
BLOCKS: Final[dict[Family, tuple[Block, ...]]] = {
    "encoder": ("encoder",),
    "decoder": ("decoder",),
    "encoder-decoder": ("encoder", "decoder", "cross"),
}
"""The attention blocks of each family, in the order the model runs them."""
CROSS_MODULES: Final = frozenset({"encoder_attn", "EncDecAttention", "crossattention"})
"""Module names transformers gives cross attention (BART/Marian, T5, BERT as a decoder)."""
ALIBI_TYPES: Final = frozenset({"bloom", "mpt", "falcon"})
"""Model types with ALiBi position bias (Press et al. 2022); transformers computes it inside
their own attention modules, outside the attention interface."""
POSITIONS_AFTER_PADDING: Final = frozenset(
    {
        "roberta",
        "xlm-roberta",
        "xlm-roberta-xl",
        "camembert",
        "data2vec-text",
        "roberta-prelayernorm",
    }
)
"""Model types whose position ids start after ``pad_token_id`` (transformers'
``create_position_ids_from_input_ids``): roberta-base's 514 positions take 512 tokens."""
ROLLOUT_FLOAT64_TOKENS: Final = 512
"""Rollouts up to this many tokens are computed in float64, longer ones in float32."""
HEAD_CHUNK_FLOATS: Final = 4 * 2**20
"""The most weights (16 MB of float32) one eager call of a layer walk computes, past one
group of heads. With the whole layer at once (38 MB for SmolLM2 at 1024 tokens) the
streamed grid took 4.9 s to its end, a group at a time 3.5 s (benchmarks/decoder.py);
the likely cause: glibc maps blocks over 32 MB afresh from the system for every layer."""
MAX_ROLLOUT_TOKENS: Final = 2048
"""Views of longer inputs leave rollout out: N products of L^3 (30 x 137 GFLOP at 4096)."""
TOP_K: Final = 10
"""How many next-token candidates a decoder's result keeps per position."""
WARM_UP_TEXT: Final = "Attention is all you need."
"""The short input :meth:`PretrainedModel.warm_up` runs through a text model."""
_LOGIT_CHUNK: Final = 256  # positions per chunk when turning hidden states into top-k


class ModelFormatError(ValueError):
    """A model AttnViz cannot load or show; the message names the file and what is missing."""


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
    """

    tokens: list[list[str]]
    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    attention_mask: torch.Tensor
    special_tokens_mask: torch.Tensor
    word_ids: list[list[int]] | None = None

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
        )


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


@dataclass(frozen=True)
class NextTokens:
    """A decoder's most likely next tokens at each position: softmax of the logits.

    Attributes:
        ids: (B, L, k) int64 token ids, most likely first.
        probabilities: (B, L, k) float32.
    """

    ids: torch.Tensor
    probabilities: torch.Tensor


@dataclass(frozen=True)
class DecoderHead:
    """A decoder's final hidden states and its output head, for next tokens on demand.

    Attributes:
        hidden: (B, L, d_model) the backbone's last hidden states, on the model's device.
        head: the output embedding (d_model -> vocab logits).
    """

    hidden: torch.Tensor
    head: nn.Module

    def divergence(self, other: DecoderHead) -> torch.Tensor:
        """KL(this ‖ other) of the next-token distributions at each position, in nats.

        Returns:
            (B, L) float32 on the CPU, chunked as :meth:`top`.
        """
        parts = []
        with torch.inference_mode():
            for mine, theirs in zip(
                torch.split(self.hidden, _LOGIT_CHUNK, dim=1),
                torch.split(other.hidden, _LOGIT_CHUNK, dim=1),
                strict=True,
            ):
                check_cancelled()
                p = torch.log_softmax(self.head(mine).float(), dim=-1)
                q = torch.log_softmax(other.head(theirs).float(), dim=-1)
                parts.append((p.exp() * (p - q)).sum(dim=-1).clamp_min(0).cpu())
        return torch.cat(parts, dim=1)

    def top(self) -> NextTokens:
        """Softmax of the logits, its top :data:`TOP_K` per position, 256 positions at a time.

        The full (B, L, vocab) logits would be 800 MB for SmolLM2 at 4096 tokens.
        """
        ids, values = [], []
        with torch.inference_mode():
            for chunk in torch.split(self.hidden, _LOGIT_CHUNK, dim=1):
                check_cancelled()
                probabilities = torch.softmax(self.head(chunk).float(), dim=-1)
                top = probabilities.topk(min(TOP_K, probabilities.shape[-1]), dim=-1)
                ids.append(top.indices.cpu())
                values.append(top.values.cpu())
        return NextTokens(ids=torch.cat(ids, dim=1), probabilities=torch.cat(values, dim=1))


@dataclass(frozen=True)
class PretrainedAttentions:
    """One batch through a model: its attention recorded per layer, weights on demand.

    Attributes:
        batch: the input (the source, for an encoder-decoder).
        targets: an encoder-decoder's decoder input (``decoder_start`` + target), else None.
        recording: every attention call of the pass (:class:`.recorder.AttentionRecording`).
        block_calls: for each block of the family, the indices of its calls in
            ``recording.calls``, layer 0 first.
        decoder_head: a decoder's final hidden states (an encoder-decoder's logits over its
            targets), which :attr:`next_tokens` turns into next-token probabilities when
            first asked; None for encoders.
        compute_ms: wall time of the forward pass, in ms (a decoder's output head, which
            no map needs, not included).
        device: where it ran, "cpu" or "cuda".
        memo: maps derived from the whole recording (a view's averages), kept for the
            next view of the same pass (:class:`.display.LayerWalk`).
        method: what the maps hold: "attention" (the softmax weights) or another method
            of :mod:`.methods` (:func:`.methods.with_method`).
        final_hidden: an encoder's last hidden states (B, L, d_model) float32 on the CPU,
            else None (head ablation compares them).
    """

    batch: TokenizedBatch
    targets: TokenizedBatch | None
    recording: AttentionRecording
    block_calls: dict[Block, list[int]]
    decoder_head: DecoderHead | None
    compute_ms: float
    device: str
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    method: str = "attention"
    final_hidden: torch.Tensor | None = None

    @property
    def next_tokens(self) -> NextTokens | None:
        """A decoder's top-:data:`TOP_K` next tokens per position (None for other families).

        Computed from the kept final hidden states on first use, then kept: the output
        head (L x d_model x vocab: 58 GFLOP for SmolLM2 at 1024 tokens) is paid only by
        the views that show next tokens.
        """
        if self.decoder_head is None:
            return None
        if "next_tokens" not in self.memo:
            self.memo["next_tokens"] = self.decoder_head.top()
        return self.memo["next_tokens"]  # type: ignore[no-any-return]

    @property
    def first_block(self) -> Block:
        """The family's first block, the default of every view."""
        return next(iter(self.block_calls))

    def num_layers(self, block: Block) -> int:
        """N, the layers of ``block``."""
        return len(self._calls(block))

    def queries(self, block: Block) -> TokenizedBatch:
        """The tokens whose queries ``block`` has (the targets, for decoder and cross)."""
        return self.targets if block != "encoder" and self.targets is not None else self.batch

    def keys(self, block: Block) -> TokenizedBatch:
        """The tokens whose keys ``block`` has (the source, for cross attention)."""
        return self.batch if block == "cross" else self.queries(block)

    def layer_weights(self, block: Block, layer: int) -> torch.Tensor:
        """Every head of one layer: (B, H, L_q, L_k) float32 on the CPU, rows summing to 1.

        Raises:
            AttentionInputError: (field ``layer_index``) no such layer.
        """
        return self.recording.layer_weights(self._call(block, layer))

    def head_groups(self, block: Block, layer: int) -> Iterator[tuple[int, torch.Tensor]]:
        """One layer's weights a few heads at a time, as :meth:`layer_weights` in pieces.

        Yields (first head, (B, G, L_q, L_k) float32): whole groups of the query heads
        that share a key/value head (a head each without grouped-query attention), as
        many as fit in :data:`HEAD_CHUNK_FLOATS` numbers (at least one group) per call of
        the model's eager attention. SmolLM2 at 4096 tokens: one group of 3 heads, 201 MB,
        where its layer is 604 MB; MiniLM's 12 heads of a sentence: one call.

        Raises:
            AttentionInputError: (field ``layer_index``) no such layer.
        """
        call = self._call(block, layer)
        recorded = self.recording.calls[call]
        batch, _, length, _ = recorded.query.shape
        group = batch * recorded.group_size * length * recorded.key.shape[2]
        per_call = max(1, HEAD_CHUNK_FLOATS // group)
        for first in range(0, recorded.num_key_value_heads, per_call):
            count = min(per_call, recorded.num_key_value_heads - first)
            weights = self.recording.groups_weights(call, first, count)
            yield first * recorded.group_size, weights

    def num_heads(self, block: Block, layer: int) -> int:
        """H, the query heads of one layer.

        Raises:
            AttentionInputError: (field ``layer_index``) no such layer.
        """
        return self.recording.calls[self._call(block, layer)].num_heads

    def query_rows(self, block: Block, query: int) -> torch.Tensor:
        """The row of one query position in every layer and head: (N, B, H, L_k) float32.

        Costs N x H x L_k, not N x H x L_q x L_k: only that query is recomputed.

        Raises:
            AttentionInputError: (field ``query_index``) no such position.
        """
        length = int(self.queries(block).input_ids.shape[1])
        if not 0 <= query < length:
            raise AttentionInputError("query_index", f"{query} is not below {length}")
        rows = [self.recording.layer_weights(i, query=query) for i in self._calls(block)]
        return torch.stack(rows)[:, :, :, 0]

    def neuron(self, block: Block, layer: int, head: int, query: int) -> Neuron:
        """Query position ``query``'s q, k, scores and weights in one head (input 0).

        Raises:
            AttentionInputError: (field ``layer_index`` / ``head_index`` / ``query_index``)
                no such layer, head or position.
        """
        call = self._call(block, layer)
        heads = self.num_heads(block, layer)
        if not 0 <= head < heads:
            raise AttentionInputError("head_index", f"{head} is not below {heads}")
        length = int(self.queries(block).input_ids.shape[1])
        if not 0 <= query < length:
            raise AttentionInputError("query_index", f"{query} is not below {length}")
        return neuron(self.recording, call, head, query)

    def _calls(self, block: Block) -> list[int]:
        if block not in self.block_calls:
            raise AttentionInputError(
                "block", f"{block!r}: this model's blocks are {', '.join(self.block_calls)}"
            )
        return self.block_calls[block]

    def _call(self, block: Block, layer: int) -> int:
        calls = self._calls(block)
        if not 0 <= layer < len(calls):
            raise AttentionInputError("layer_index", f"{layer} is not below {len(calls)}")
        return calls[layer]


@dataclass(frozen=True)
class Generation:
    """Tokens a decoder added to one prompt, with the attention of every step.

    Attributes:
        prompt_length: L, the prompt's tokens.
        new_ids: the added token ids, in order.
        new_tokens: the same as the tokenizer writes them.
        num_layers: N.
        recording: N calls for the prompt pass, then N per fed-back token.
        compute_ms: wall time of the whole generation, in ms.
        result: with ``record_pass``, the recorded causal pass over prompt + new tokens
            taken while generating (:class:`PretrainedAttentions`), else None.
    """

    prompt_length: int
    new_ids: list[int]
    new_tokens: list[str]
    num_layers: int
    recording: AttentionRecording
    compute_ms: float
    result: PretrainedAttentions | None = None

    def step_row(self, step: int, layer: int, head: int) -> torch.Tensor:
        """The attention row of the query fed at ``step`` (1 = the first added token).

        That token sits at position L + step - 1 and attends to every position up to
        its own, through the key/value cache: returns (L + step,) float32 summing to 1.

        Raises:
            IndexError: no such step (the last added token is never fed back), layer
                or head.
        """
        if not 1 <= step < len(self.new_ids):
            raise IndexError(f"step {step} is not in 1..{len(self.new_ids) - 1}")
        if not 0 <= layer < self.num_layers:
            raise IndexError(f"layer {layer} is not in 0..{self.num_layers - 1}")
        return self.recording.head_weights(step * self.num_layers + layer, head)[0, -1]


def unrecorded_message(name: str, model: nn.Module) -> str:
    """Why a model whose attention layers called no attention function is refused."""
    modules = sorted(
        {type(m).__name__ for m in model.modules() if type(m).__name__.endswith("Attention")}
    )
    config = getattr(model, "config", None)
    alibi = getattr(config, "alibi", False) or getattr(config, "model_type", "") in ALIBI_TYPES
    feature = " (its ALiBi position bias is computed inside them)" if alibi else ""
    return (
        f"{name} ({type(model).__name__}): its attention layers "
        f"({', '.join(modules) or 'none found'}) compute attention themselves{feature}, not "
        "through transformers' attention interface, so AttnViz cannot record or reproduce "
        "their weights and refuses the model rather than draw them wrong"
    )


def check_reproducible(recording: AttentionRecording) -> None:
    """Refuse a recording whose attention modules have no eager function to recompute with.

    Raises:
        ModelFormatError: naming the module class and its modeling file.
    """
    for call in recording.calls:
        try:
            eager_attention(call.module)
        except TypeError as error:
            raise ModelFormatError(
                f"AttnViz cannot reproduce this model's attention: {error}"
            ) from error


def _same_device(a: torch.device, b: torch.device) -> bool:
    """Whether two devices are one ("cuda" is "cuda:0")."""
    return a.type == b.type and (a.index or 0) == (b.index or 0)


def _config_value(config: Any, *names: str) -> int | None:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


@dataclass
class PretrainedModel:
    """A loaded transformers model (eval mode, recording attention) and its tokenizer.

    The model is in the dtype and on the devices its :class:`.placement.Placement` chose
    (float32 on the CPU by default).

    Attributes:
        name: what requests name it by.
        source: where it came from (a package and its version, a directory, a GGUF file).
        path: the directory (or GGUF file) it was loaded from.
        family: "encoder", "decoder" or "encoder-decoder".
        model: the transformers model, set to AttnViz's recording attention.
        tokenizer: its tokenizer (with the chat template, when the model has one).
        load_s: how long loading took, in seconds.
        placement: how it was loaded (dtype, device map, memory caps, offload folder).
        reload: loads the same model anew onto one device (from its files), for a
            request that asks for a device the model is not on; None when it cannot be
            (a model handed over from Python).
    """

    name: str
    source: str
    path: Path
    family: Family
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    load_s: float
    placement: Placement = field(default_factory=Placement)
    reload: Callable[[torch.device], PreTrainedModel] | None = field(default=None, repr=False)
    _copies: dict[str, PreTrainedModel] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    modality: ClassVar[str] = "text"
    """What the model reads: "text", "speech" (:mod:`.speech`) or "image" (:mod:`.vision`)."""

    def require(self, modality: str, where: str) -> None:
        """Refuse this model where a model reading ``modality`` is needed.

        Args:
            modality: "text", "speech" or "image".
            where: what to do instead (the route or view this model's input goes to),
                at the end of the message.

        Raises:
            AttentionInputError: (field ``model``) the model reads another modality.
        """
        if self.modality != modality:
            raise AttentionInputError(
                "model", f"{self.name} reads {self.modality}, not {modality}: {where}"
            )

    def warm_up(self) -> None:
        """One short input through the model once it is loaded (torch's lazy start-up).

        It also checks that every attention layer can be reproduced: each recorded call's
        module has an eager attention function AttnViz computes its weights with.

        Raises:
            ModelFormatError: the model's attention is not reproducible (as :meth:`run`,
                or a layer without ``eager_attention_forward``), the message says which.
        """
        warm = self.tokenize([WARM_UP_TEXT])
        targets = self.decoder_inputs([WARM_UP_TEXT]) if self.family == "encoder-decoder" else None
        check_reproducible(self.run(warm, targets, device="auto").recording)

    @property
    def config(self) -> Any:
        """The model's transformers config."""
        return self.model.config

    @property
    def architecture(self) -> str:
        """The config's ``model_type`` ("bert", "llama", "gpt2", "t5", ...)."""
        return str(self.config.model_type)

    @property
    def described(self) -> str:
        """The family with its article, for messages: "an encoder", "a decoder"."""
        return f"{'an' if self.family.startswith('e') else 'a'} {self.family}"

    @property
    def blocks(self) -> tuple[Block, ...]:
        """The attention blocks of the family (:data:`BLOCKS`)."""
        return BLOCKS[self.family]

    @property
    def num_layers(self) -> int:
        """N, the layers (of the encoder, for an encoder-decoder)."""
        return int(self.config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        """H, the query heads of every layer."""
        return int(self.config.num_attention_heads)

    @property
    def num_key_value_heads(self) -> int:
        """H_kv, the key/value heads the query heads share (H without grouped-query attention)."""
        return _config_value(self.config, "num_key_value_heads") or self.num_heads

    @property
    def d_model(self) -> int:
        """The hidden size."""
        return int(self.config.hidden_size)

    @property
    def d_ff(self) -> int | None:
        """The feed-forward's hidden width, where the config says it."""
        return _config_value(
            self.config, "intermediate_size", "n_inner", "d_ff", "encoder_ffn_dim", "hidden_dim"
        ) or (4 * self.d_model if self.architecture == "gpt2" else None)

    @property
    def vocab_size(self) -> int:
        """Rows of the token embedding."""
        return int(self.config.vocab_size)

    @property
    def max_tokens(self) -> int | None:
        """The most tokens one input may have (learned positions), or None (relative positions)."""
        value = _config_value(self.config, "max_position_embeddings", "n_positions")
        if value is None or value <= 0:  # XLNet says -1
            return None
        if self.architecture in POSITIONS_AFTER_PADDING:
            value -= int(self.config.pad_token_id) + 1
        return value

    @functools.cached_property
    def num_parameters(self) -> int:
        """Scalar parameters of the model (tied weights counted once)."""
        return sum(p.numel() for p in self.model.parameters())

    @property
    def chat_template(self) -> bool:
        """Whether the tokenizer has a chat template (prompts can be wrapped as a user turn)."""
        return bool(getattr(self.tokenizer, "chat_template", None))

    @property
    def can_generate(self) -> bool:
        """Whether the model continues text (a decoder or an encoder-decoder)."""
        return self.family != "encoder"

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

    @functools.cached_property
    def home(self) -> torch.device:
        """Where the model's inputs go: its (first) device; the CPU for a model on disk."""
        return home_device(self.model)

    @property
    def placed(self) -> bool:
        """Whether a device map placed the model: it then runs only where it lies."""
        return self.placement.mapped or spread(self.model)

    @functools.cached_property
    def dtype(self) -> torch.dtype:
        """The dtype of the model's weights."""
        return model_dtype(self.model)

    @functools.cached_property
    def parameter_bytes(self) -> int:
        """Bytes of the model's parameters in their dtype (tied weights counted once)."""
        return parameter_bytes(self.model)

    def layers_per_device(self) -> dict[str, int]:
        """How many transformer blocks lie on each device: "cuda:0", "cpu", "disk", ..."""
        return layers_per_device(self.model)

    def device_for(self, device: str) -> torch.device:
        """The device a request's ``device`` ("auto", "cpu", "cuda") runs this model on.

        "auto" is where the model lies (:attr:`home`); another device is that device,
        where the model is loaded once more (:meth:`on`), unless a device map placed it.

        Raises:
            AttentionInputError: (field ``device``) an unknown device, CUDA where torch
                sees none, or a device other than the model's own for a model placed by
                a device map or handed over from Python.
        """
        if device == "auto":
            return self.home
        wanted = resolve_device(device)
        if _same_device(wanted, self.home):
            return self.home
        if self.placed or self.reload is None:
            raise self._stays_where_it_lies()
        return wanted

    def _stays_where_it_lies(self) -> AttentionInputError:
        where = ", ".join(self.layers_per_device()) or str(self.home)
        how = "a device map (ATTNVIZ_DEVICE_MAP)" if self.placed else "the caller"
        return AttentionInputError(
            "device",
            f"{self.name} was placed by {how} on {where} and runs where it lies; "
            "send device 'auto'",
        )

    def on(self, device: torch.device) -> PreTrainedModel:
        """The model to run on ``device``: itself where it lies, else a copy loaded there once.

        The copy is loaded from the model's files straight onto the device (no float32
        copy in memory first); it goes through the recorder as the model does.

        Raises:
            AttentionInputError: (field ``device``) as :meth:`device_for`.
        """
        if _same_device(device, self.home):
            return self.model
        if self.placed or self.reload is None:
            raise self._stays_where_it_lies()
        key = str(device)
        with self._lock:
            if key not in self._copies:
                copy_on = self.reload(device)
                copy_on.train(False)
                use_recorder(copy_on)
                self._copies[key] = copy_on
            return self._copies[key]

    def placed_on(self, device: str) -> tuple[torch.device, PreTrainedModel]:
        """:meth:`device_for` and :meth:`on` together: where inputs go, and the model to run."""
        run_on = self.device_for(device)
        return run_on, self.on(run_on)

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
        if self.family != "encoder":
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
        if self.family != "encoder-decoder":
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
        )

    def attention(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str | None] | None = None,
        *,
        chat: bool = False,
        targets: Sequence[str] | None = None,
        device: str = "auto",
    ) -> PretrainedAttentions:
        """Tokenise (:meth:`tokenize`) and run (:meth:`run`).

        Raises:
            AttentionInputError: as :meth:`tokenize` and :meth:`run`.
        """
        batch = self.tokenize(texts, text_pairs, chat=chat)
        return self.run(
            batch, None if targets is None else self.decoder_inputs(targets), device=device
        )

    def run(
        self,
        batch: TokenizedBatch,
        targets: TokenizedBatch | None = None,
        *,
        device: str = "auto",
        ablate: dict[int, tuple[int, ...]] | None = None,
        observer: AttentionObserver | None = None,
        record: bool = True,
    ) -> PretrainedAttentions:
        """One forward pass, recording every attention layer.

        Args:
            batch: from :meth:`tokenize` (the source, for an encoder-decoder).
            targets: an encoder-decoder's decoder input (:meth:`decoder_inputs`);
                required for that family, refused for the others.
            device: "auto" (CUDA when available), "cpu" or "cuda".
            ablate: heads switched off, ``id(attention module)`` -> query heads
                (:func:`.recorder.ablate_heads`), or None.
            observer: the layers it wants compute their weights during the pass and hand
                them over (:class:`.recorder.AttentionObserver`), or None.
            record: keep every call's query, key and value states (for views computed
                after the pass); False keeps none (what the observer builds is the view).

        Returns:
            A :class:`PretrainedAttentions` (its recording empty without ``record``).

        Raises:
            AttentionInputError: (field ``device``) as
                :func:`attnviz.attention.engine.resolve_device`; (``targets``) missing for an
                encoder-decoder or given to another family.
            ModelFormatError: the model's attention layers do not go through
                transformers' attention interface (nothing was recorded).
        """
        run_on, model = self.placed_on(device)
        inputs = self.forward_inputs(batch, targets, run_on)
        start = time.perf_counter()
        final_hidden = None
        recording = AttentionRecording()
        with (
            torch.inference_mode(),
            record_attention(recording) if record else nullcontext(),
            ablate_heads(ablate),
            observe_attention(observer),
        ):
            try:
                if self.family == "decoder":
                    decoder_head = self._decode(model, inputs)
                else:
                    outputs = model(**inputs, use_cache=False)
                    decoder_head = None
                    if self.family == "encoder":
                        final_hidden = outputs.last_hidden_state.float().cpu()
                    else:  # the logits (B, L_t, vocab): the targets' next tokens
                        decoder_head = DecoderHead(outputs.logits, nn.Identity())
            except IndexError as error:  # an id or a position beyond an embedding's rows
                raise AttentionInputError(
                    "texts",
                    f"{self.name} cannot take this input ({error}): a token id beyond its "
                    "vocabulary or more tokens than its positions",
                ) from error
            if run_on.type == "cuda":
                torch.cuda.synchronize(run_on)
        compute_ms = (time.perf_counter() - start) * 1000.0
        if record and not recording.calls:
            raise ModelFormatError(unrecorded_message(self.name, model))
        return PretrainedAttentions(
            batch=batch,
            targets=targets,
            recording=recording,
            block_calls=(
                self.block_calls(model, recording)
                if record
                else {b: list(range(self.block_layers(b))) for b in self.blocks}
            ),
            decoder_head=decoder_head,
            compute_ms=compute_ms,
            device=str(run_on),
            final_hidden=final_hidden,
        )

    def forward_inputs(
        self, batch: TokenizedBatch, targets: TokenizedBatch | None, device: torch.device
    ) -> dict[str, torch.Tensor]:
        """The keyword arguments of the model's forward pass for ``batch`` (and ``targets``).

        Raises:
            AttentionInputError: (field ``targets``) missing for an encoder-decoder or given
                to another family.
        """
        if (targets is None) == (self.family == "encoder-decoder"):
            raise AttentionInputError(
                "targets",
                "an encoder-decoder needs the decoder's text (targets)"
                if targets is None
                else f"targets are for encoder-decoders; {self.name} is {self.described}",
            )
        inputs: dict[str, torch.Tensor] = {
            "input_ids": batch.input_ids.to(device),
            "attention_mask": batch.attention_mask.to(device).long(),
        }
        if self.family == "encoder" and "token_type_ids" in self._forward_arguments:
            inputs["token_type_ids"] = batch.token_type_ids.to(device)
        if targets is not None:
            inputs["decoder_input_ids"] = targets.input_ids.to(device)
            inputs["decoder_attention_mask"] = targets.attention_mask.to(device).long()
        return inputs

    @functools.cached_property
    def _forward_arguments(self) -> frozenset[str]:
        import inspect

        return frozenset(inspect.signature(self.model.forward).parameters)

    def _decode(self, model: PreTrainedModel, inputs: dict[str, torch.Tensor]) -> DecoderHead:
        """Run a decoder's backbone; its hidden states and output head for next tokens later.

        A model without a separate backbone and head runs whole: its logits become the
        "hidden states" of an identity head.
        """
        backbone = model.base_model
        head = model.get_output_embeddings()  # type: ignore[no-untyped-call]
        if backbone is model or head is None:
            return DecoderHead(model(**inputs, use_cache=False).logits, nn.Identity())
        return DecoderHead(backbone(**inputs, use_cache=False).last_hidden_state, head)

    def block_calls(
        self, model: PreTrainedModel, recording: AttentionRecording
    ) -> dict[Block, list[int]]:
        """Split the recorded calls into the family's blocks by the modules that made them."""
        if self.family != "encoder-decoder":
            return {self.blocks[0]: list(range(len(recording.calls)))}
        names = {id(module): name for name, module in model.named_modules()}
        split: dict[Block, list[int]] = {block: [] for block in self.blocks}
        for i, call in enumerate(recording.calls):
            parts = set(names.get(id(call.module), "").split("."))
            if parts & CROSS_MODULES:
                split["cross"].append(i)
            elif "encoder" in parts:
                split["encoder"].append(i)
            else:
                split["decoder"].append(i)
        return split

    def block_of(self, model: PreTrainedModel) -> Callable[[nn.Module], Block]:
        """The block each attention module of ``model`` is in, by name (as :meth:`block_calls`)."""
        if self.family != "encoder-decoder":
            only = self.blocks[0]
            return lambda module: only
        names = {id(module): name for name, module in model.named_modules()}

        def block(module: nn.Module) -> Block:
            parts = set(names.get(id(module), "").split("."))
            if parts & CROSS_MODULES:
                return "cross"
            return "encoder" if "encoder" in parts else "decoder"

        return block

    def generate(
        self,
        batch: TokenizedBatch,
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        seed: int = 0,
        device: str = "auto",
        record_steps: bool = True,
        record_pass: bool = False,
    ) -> Generation:
        """Continue one prompt token by token with the key/value cache, recording each step.

        The prompt runs in one pass; then each new token is fed alone, its query
        attending to the cached keys of every earlier token (the tutorials' step-by-step
        decoding, tutorial 002 section 3.4, on a real model). Generation stops early at
        the tokenizer's end-of-sequence token. Only the last position's logits are
        computed (``logits_to_keep``, where the model takes it): the prompt's whole
        (L, vocab) logits would be 0.8 GB for SmolLM2 at 4096 tokens.

        Args:
            batch: one prompt (B = 1) from :meth:`tokenize`.
            max_new_tokens: how many tokens to add, at least 1.
            temperature: 0 picks the most likely token (greedy); above 0 samples from
                softmax(logits / temperature).
            seed: the RNG seed of the sampling.
            device: as :meth:`run`.
            record_steps: keep every step's attention calls (:meth:`Generation.step_row`).
                Each step's call holds the whole key/value cache, so this costs
                N * steps * L * d numbers (11 GB for SmolLM2 at 4,000 + 64 tokens):
                the server passes False and records one pass over prompt + new tokens
                instead (``record_pass``).
            record_pass: record, while generating, what one causal pass over prompt +
                new tokens records (:class:`.recorder.StepwiseRecording`: the prompt's
                calls, then each step's query row and new key), so that the maps of the
                generated text cost no second forward pass; the last token is fed once
                more for its query and key. Not with ``record_steps``; a model without a
                separate backbone and output head gives no pass.

        Returns:
            A :class:`Generation` (its recording empty without ``record_steps``; its
            ``result`` the recorded pass with ``record_pass``, else None).

        Raises:
            AttentionInputError: (field ``max_new_tokens``) a model that does not
                generate, or a batch of more than one prompt; ``max_new_tokens`` below
                1 or ``temperature`` below 0.
        """
        if self.family != "decoder":
            raise AttentionInputError(
                "max_new_tokens", f"{self.name} is {self.described}; generation is for decoders"
            )
        if batch.input_ids.shape[0] != 1:
            raise AttentionInputError("max_new_tokens", "generation continues one prompt")
        if max_new_tokens < 1:
            raise AttentionInputError("max_new_tokens", f"must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise AttentionInputError("temperature", f"must be >= 0, got {temperature}")
        run_on, model = self.placed_on(device)
        generator = torch.Generator().manual_seed(seed)
        stop = self.tokenizer.eos_token_id
        new_ids: list[int] = []
        start = time.perf_counter()
        from transformers import DynamicCache

        backbone, head = model.base_model, model.get_output_embeddings()  # type: ignore[no-untyped-call]
        joining = record_pass and not record_steps and backbone is not model and head is not None
        recording: AttentionRecording = StepwiseRecording() if joining else AttentionRecording()
        hidden: list[torch.Tensor] = []
        last = {"logits_to_keep": 1} if "logits_to_keep" in self._forward_arguments else {}

        def keep_hidden(module: nn.Module, args: Any, output: Any) -> None:
            hidden.append(output[0])  # the backbone's last hidden states (1, L, d_model)

        def forward(ids: torch.Tensor, cache: Any) -> tuple[torch.Tensor, Any]:
            """The model's own next-token logits (vocab,) after ``ids``, and the cache.

            The logits are the model's (its final softcapping or scaling included); each
            pass is marked in a joined recording.
            """
            out = model(ids, past_key_values=cache, use_cache=True, **last)
            if isinstance(recording, StepwiseRecording):
                recording.end_pass()
            return out.logits[0, -1], out.past_key_values

        hook = backbone.register_forward_hook(keep_hidden) if joining else None
        try:
            with (
                torch.inference_mode(),
                record_attention(recording) if record_steps or joining else nullcontext(),
            ):
                # A cache without the model's config keeps every key, also beyond a sliding
                # window (the mask still hides the old ones): each step's row then covers
                # every earlier position, as one causal pass does.
                logits, cache = forward(batch.input_ids.to(run_on), DynamicCache())
                for step in range(max_new_tokens):
                    check_cancelled()
                    logits = logits.float().cpu()
                    if temperature == 0:
                        token = int(logits.argmax())
                    else:
                        probabilities = torch.softmax(logits / temperature, dim=-1)
                        token = int(torch.multinomial(probabilities, 1, generator=generator))
                    new_ids.append(token)
                    done = token == stop or step + 1 == max_new_tokens
                    if done and not joining:
                        break  # the last token is never fed back
                    logits, cache = forward(torch.tensor([[token]], device=run_on), cache)
                    if done:  # fed once more: its query, key and state complete the pass
                        break
                del cache  # the key/value cache goes before the pass is joined
        finally:
            if hook is not None:
                hook.remove()
        compute_ms = (time.perf_counter() - start) * 1000.0
        result = None
        if isinstance(recording, StepwiseRecording) and recording.complete:
            joined = recording.finish()
            recording = AttentionRecording()
            result = PretrainedAttentions(
                batch=self.extended(batch, new_ids),
                targets=None,
                recording=joined,
                block_calls=self.block_calls(model, joined),
                decoder_head=DecoderHead(torch.cat(hidden, dim=1), head),
                compute_ms=compute_ms,
                device=str(run_on),
            )
        return Generation(
            prompt_length=int(batch.input_ids.shape[1]),
            new_ids=new_ids,
            new_tokens=self.token_strings(new_ids),
            num_layers=self.num_layers,
            recording=recording if record_steps else AttentionRecording(),
            compute_ms=compute_ms,
            result=result,
        )

    def weight_cells(self, batch: TokenizedBatch, targets: TokenizedBatch | None = None) -> int:
        """Attention numbers of every block's maps for ``batch``: N * B * H * L_q * L_k, summed."""
        size, source = (int(n) for n in batch.input_ids.shape)
        target = source if targets is None else int(targets.input_ids.shape[1])
        areas = {"encoder": source * source, "decoder": target * target, "cross": target * source}
        if self.family == "decoder":
            areas["decoder"] = source * source
        return size * sum(
            self.block_layers(block) * self.block_heads(block) * areas[block]
            for block in self.blocks
        )

    def block_layers(self, block: Block) -> int:
        """N of one block: an encoder-decoder's decoder may have another depth (T5, BART)."""
        if self.family == "encoder-decoder" and block != "encoder":
            return _config_value(self.config, "num_decoder_layers", "decoder_layers") or (
                self.num_layers
            )
        return self.num_layers

    def block_heads(self, block: Block) -> int:
        """H of one block (BART's encoder and decoder may have different head counts)."""
        if self.family == "encoder-decoder":
            name = "encoder_attention_heads" if block == "encoder" else "decoder_attention_heads"
            return _config_value(self.config, name, "num_heads") or self.num_heads
        return self.num_heads


def attention_rollout(head_means: torch.Tensor) -> torch.Tensor:
    """Attention rollout across layers (Abnar & Zuidema 2020, "Quantifying Attention Flow").

    Per layer, the head-averaged attention A_l plus the residual connection,
    Â_l = 0.5 A_l + 0.5 I, rows renormalised; then R = Â_N ... Â_2 Â_1. Row i of R
    says how much of token i's final representation flows from each input token.

    Args:
        head_means: (N, B, L, L) float, each layer's mean over heads, rows summing to 1.

    Returns:
        (B, L, L) float32, computed in float64. Every row sums to 1. A real token
        gives padding keys exactly 0: no layer lets it attend to them.
    """
    rollout = None
    for mean in head_means:
        rollout = rollout_step(rollout, mean)
    if rollout is None:
        raise ValueError("attention_rollout needs at least one layer")
    return rollout.to(torch.float32)


def rollout_step(rollout: torch.Tensor | None, head_mean: torch.Tensor) -> torch.Tensor:
    """Fold one more layer into a rollout: Â_l @ R, Â_l = 0.5 A_l + 0.5 I renormalised.

    Computed in float64 up to :data:`ROLLOUT_FLOAT64_TOKENS` tokens; beyond, in float32
    (each step is an L^3 product, 2 GFLOP at L = 1024, 8x that in float64 on a CPU).
    A causal model's maps are lower triangular, and so is every product of them: those
    are multiplied block by block (:func:`lower_triangular_product`), a third of the work.

    Args:
        rollout: (B, L, L) of the layers below, or None before the first.
        head_mean: (B, L, L) this layer's mean over heads.

    Returns:
        (B, L, L) float64 (float32 beyond ROLLOUT_FLOAT64_TOKENS).
    """
    dtype = torch.float64 if head_mean.shape[-1] <= ROLLOUT_FLOAT64_TOKENS else torch.float32
    mean = head_mean.to(dtype)
    eye = torch.eye(mean.shape[-1], dtype=dtype, device=mean.device)
    augmented = 0.5 * mean + 0.5 * eye
    augmented = augmented / augmented.sum(dim=-1, keepdim=True)
    if rollout is None:
        return augmented
    if _lower_triangular(augmented) and _lower_triangular(rollout):
        return lower_triangular_product(augmented, rollout)
    return augmented @ rollout


def _lower_triangular(matrices: torch.Tensor) -> bool:
    return not bool(torch.triu(matrices, diagonal=1).any())


LOWER_PRODUCT_BLOCK: Final = 256
"""Below this size :func:`lower_triangular_product` multiplies whole matrices."""


def lower_triangular_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for lower-triangular (..., n, n) matrices, skipping the zero blocks.

    With the halves of each side, [[A11, 0], [A21, A22]] [[B11, 0], [B21, B22]] =
    [[A11 B11, 0], [A21 B11 + A22 B21, A22 B22]]: two dense half-size products and two
    lower-triangular ones, recursively; n^3 * 2/3 multiply-adds instead of 2 n^3. Equal to
    ``a @ b`` up to the order of the float sums.
    """
    n = a.shape[-1]
    if n <= LOWER_PRODUCT_BLOCK:
        return a @ b
    h = n // 2
    out = torch.zeros_like(a)
    out[..., :h, :h] = lower_triangular_product(a[..., :h, :h], b[..., :h, :h])
    out[..., h:, h:] = lower_triangular_product(a[..., h:, h:], b[..., h:, h:])
    out[..., h:, :h] = a[..., h:, :h] @ b[..., :h, :h] + a[..., h:, h:] @ b[..., h:, :h]
    return out

"""What a pass through a pretrained model gives: recorded attention, next tokens, generation.

Shapes: N layers of a block, B inputs, H query heads, H_kv key/value heads, L tokens
(padded to the longest), L_q x L_k for a block's maps (L_t x L_s for cross attention).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

import torch
from torch import nn

from ..attention.cancellation import check_cancelled
from ..attention.errors import AttentionInputError
from .blocks import Block
from .calls import AttentionRecording
from .computing import AttentionObserver, replay_kept, replayed
from .neuron import Neuron, neuron, neuron_from_tiles
from .tiles import KeptPass, TileError, TileReduce, tile
from .tokens import TokenizedBatch

HEAD_CHUNK_FLOATS: Final = 4 * 2**20
"""The most weights (16 MB of float32) one eager call of
:meth:`PretrainedAttentions.head_groups` computes, past one group of heads (a layer walk
computes chunks of rows instead, :class:`.display.WalkObserver`). With a whole layer at once
(38 MB for SmolLM2 at 1024 tokens) the streamed grid took 4.9 s to its end, a group at a
time 3.5 s (benchmarks/decoder.py); the likely cause: glibc maps blocks over 32 MB afresh
from the system for every layer."""
TOP_K: Final = 10
"""How many next-token candidates a decoder's result keeps per position."""
_LOGIT_CHUNK: Final = 256  # positions per chunk when turning hidden states into top-k


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
class Averages:
    """A walk's sums over every layer of one block (:class:`.display.LayerWalk`), kept.

    Attributes:
        layer_sum: (A_q, A_k) the sum of every layer's head mean (shown tokens, words).
        rollout: (L, L) attention rollout of every token, or None (cross attention, a
            method other than the weights, an input over the rollout bound).
        share_sum: the hidden special tokens' share, summed over layers, heads and rows.
        share_count: how many rows ``share_sum`` adds up.
    """

    layer_sum: torch.Tensor | None
    rollout: torch.Tensor | None
    share_sum: float
    share_count: int


@dataclass
class Memo:
    """What is derived from one recorded pass, kept for the next view of the same pass.

    Attributes:
        next_tokens: a decoder's top next tokens (:attr:`PretrainedAttentions.next_tokens`).
        averages: (block, hide_special_tokens, merge_words) -> that walk's :class:`Averages`.
        methods: a per-head method's name -> its recording (norm's: :mod:`.methods`) and
            the memo of the pass drawn with it.
        value_zeroing: block -> value zeroing's (N, L_q, L_k) maps (:mod:`.zeroing`).
    """

    next_tokens: NextTokens | None = None
    averages: dict[tuple[Block, bool, bool], Averages] = field(default_factory=dict)
    methods: dict[str, tuple[AttentionRecording, Memo]] = field(default_factory=dict)
    value_zeroing: dict[Block, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class PassInputs:
    """What a forward pass runs on, known before it runs: its tokens and each block's layers.

    Attributes:
        batch: the input (the source, for an encoder-decoder).
        targets: an encoder-decoder's decoder input, else None.
        layers: the layers of each block of the family, the first block first.
    """

    batch: TokenizedBatch
    targets: TokenizedBatch | None
    layers: dict[Block, int]

    @property
    def first_block(self) -> Block:
        """The family's first block, the default of every view."""
        return next(iter(self.layers))

    def num_layers(self, block: Block) -> int:
        """N, the layers of ``block``.

        Raises:
            AttentionInputError: (field ``block``) a block the model does not have.
        """
        if block not in self.layers:
            raise AttentionInputError(
                "block", f"{block!r}: this model's blocks are {', '.join(self.layers)}"
            )
        return self.layers[block]

    def queries(self, block: Block) -> TokenizedBatch:
        """The tokens whose queries ``block`` has (the targets, for decoder and cross)."""
        return self.targets if block != "encoder" and self.targets is not None else self.batch

    def keys(self, block: Block) -> TokenizedBatch:
        """The tokens whose keys ``block`` has (the source, for cross attention)."""
        return self.batch if block == "cross" else self.queries(block)


@dataclass(frozen=True)
class PretrainedAttentions:
    """One batch through a model: its attention recorded per layer, weights on demand.

    Attributes:
        batch: the input (the source, for an encoder-decoder).
        targets: an encoder-decoder's decoder input (``decoder_start`` + target), else None.
        recording: every attention call of the pass (:class:`.calls.AttentionRecording`).
        block_calls: for each block of the family, the indices of its calls in
            ``recording.calls``, layer 0 first.
        decoder_head: a decoder's final hidden states (an encoder-decoder's logits over its
            targets), which :attr:`next_tokens` turns into next-token probabilities when
            first asked; None for encoders.
        compute_ms: wall time of the forward pass, in ms (a decoder's output head, which
            no map needs, not included).
        device: where it ran, "cpu" or "cuda".
        memo: what is derived from the whole recording (a view's averages, next tokens, a
            method's maps), kept for the next view of the same pass (:class:`Memo`).
        method: what the maps hold: "attention" (the softmax weights) or another method
            of :mod:`.methods` (:func:`.methods.with_method`).
        final_hidden: an encoder's last hidden states (B, L, d_model) float32 on the CPU,
            else None (head ablation compares them).
        kept: what exact tiles of every map are recomputed from (:mod:`.tiles`), one
            layer per call in the order of ``recording.calls``, for a pass run with
            ``keep``; else None.
    """

    batch: TokenizedBatch
    targets: TokenizedBatch | None
    recording: AttentionRecording
    block_calls: dict[Block, list[int]]
    decoder_head: DecoderHead | None
    compute_ms: float
    device: str
    memo: Memo = field(default_factory=Memo, compare=False, repr=False)
    method: str = "attention"
    final_hidden: torch.Tensor | None = None
    kept: KeptPass | None = field(default=None, compare=False, repr=False)

    def tile(
        self,
        block: Block,
        layer: int,
        heads: Sequence[int] | None = None,
        rows: range | None = None,
        cols: range | None = None,
        reduce: TileReduce = "max",
        factor: tuple[int, int] = (1, 1),
    ) -> torch.Tensor:
        """Exact weights of one layer of ``block`` over rows x columns: :func:`.tiles.tile`.

        Returns:
            (B, H', R', C') float32 on the CPU, as :func:`.tiles.tile`.

        Raises:
            TileError: the pass was not kept (run it with ``keep``), or the layer's
                attention is not reproduced by tiles (its class named).
            IndexError: no such layer, head, row or column.
        """
        if self.kept is None:
            raise TileError("this pass was not kept for tiles: run it with keep=True")
        return tile(self.kept, self._call(block, layer), heads, rows, cols, reduce, factor)

    @property
    def next_tokens(self) -> NextTokens | None:
        """A decoder's top-:data:`TOP_K` next tokens per position (None for other families).

        Computed from the kept final hidden states on first use, then kept: the output
        head (L x d_model x vocab: 58 GFLOP for SmolLM2 at 1024 tokens) is paid only by
        the views that show next tokens.
        """
        if self.decoder_head is None:
            return None
        if self.memo.next_tokens is None:
            self.memo.next_tokens = self.decoder_head.top()
        return self.memo.next_tokens

    @property
    def first_block(self) -> Block:
        """The family's first block, the default of every view."""
        return next(iter(self.block_calls))

    def num_layers(self, block: Block) -> int:
        """N, the layers of ``block``."""
        return len(self._calls(block))

    @property
    def inputs(self) -> PassInputs:
        """What the pass ran on: its tokens and each block's layers."""
        return PassInputs(
            self.batch,
            self.targets,
            {block: len(calls) for block, calls in self.block_calls.items()},
        )

    def queries(self, block: Block) -> TokenizedBatch:
        """The tokens whose queries ``block`` has (the targets, for decoder and cross)."""
        return self.inputs.queries(block)

    def keys(self, block: Block) -> TokenizedBatch:
        """The tokens whose keys ``block`` has (the source, for cross attention)."""
        return self.inputs.keys(block)

    def layer_weights(self, block: Block, layer: int) -> torch.Tensor:
        """Every head of one layer: (B, H, L_q, L_k) float32 on the CPU, rows summing to 1.

        Raises:
            AttentionInputError: (field ``layer_index``) no such layer.
        """
        if self.tiles_only:
            return self.tile(block, layer)
        return self.recording.layer_weights(self._call(block, layer))

    @property
    def tiles_only(self) -> bool:
        """Whether the pass was kept for tiles only (no recorded states: no value states).

        Its maps, rows and views come from :meth:`tile`, the neuron view from its q, k and
        each row's LSE; the methods and ablation need a recorded pass
        (:class:`.recordings.RecordingCache` runs one).
        """
        return self.kept is not None and not self.recording.calls

    def replay(self, block: Block, layer: int, observer: AttentionObserver) -> None:
        """One layer's maps handed to ``observer`` in row chunks (:func:`.computing.replayed`).

        Raises:
            AttentionInputError: (field ``layer_index``) no such layer.
            ComputeCancelledError: the computation was cancelled (between chunks).
        """
        index = self._call(block, layer)
        kept = self.kept
        # the weights themselves from q, k and the LSE; a method's maps (norm's per-key
        # scale) and a layer tiles do not reproduce replay the recording
        if kept is not None and (
            self.tiles_only
            or (self.recording.key_scale(index) is None and kept.layers[index].refusal is None)
        ):
            replay_kept(observer, kept, index)
            return
        replayed(observer, self.recording, index)

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
        if self.tiles_only:  # the same groups, as tiles of the kept pass
            assert self.kept is not None
            batch, heads, length, key_length = self.kept.layers[call].shape
            size = self.kept.layers[call].group_size
        else:
            recorded = self.recording.calls[call]
            batch, heads, length = (int(n) for n in recorded.query.shape[:3])
            key_length, size = int(recorded.key.shape[2]), recorded.group_size
        per_call = max(1, HEAD_CHUNK_FLOATS // (batch * size * length * key_length))
        for first in range(0, heads // size, per_call):
            count = min(per_call, heads // size - first)
            if self.tiles_only:
                weights = self.tile(block, layer, heads=range(first * size, (first + count) * size))
            else:
                weights = self.recording.groups_weights(call, first, count)
            yield first * size, weights

    def num_heads(self, block: Block, layer: int) -> int:
        """H, the query heads of one layer.

        Raises:
            AttentionInputError: (field ``layer_index``) no such layer.
        """
        if self.tiles_only:
            assert self.kept is not None
            return self.kept.layers[self._call(block, layer)].num_heads
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
        if self.tiles_only:
            row = range(query, query + 1)
            rows = [self.tile(block, n, rows=row) for n in range(self.num_layers(block))]
        else:
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
        if self.tiles_only:  # q, k and the row's LSE of the kept pass: no second pass
            assert self.kept is not None
            return neuron_from_tiles(self.kept.layers[call], head, query)
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

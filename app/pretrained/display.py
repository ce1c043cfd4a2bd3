"""One input's attention maps as the page shows them, computed one layer at a time.

The page works on one input at a time. It runs alone (no padding), so every map is
L_q x L_k over its real tokens. Each layer goes through one pipeline
(:class:`WalkObserver`) in chunks of query rows, replayed from a recording
(:class:`.results.PretrainedAttentions`) or observed while the pass runs, so memory
holds one chunk of a layer's weights at a time, plus what is kept. The display choices,
all optional:

* hide the special tokens ([CLS], [SEP], <|im_start|>, BOS, ...): their rows and
  columns are removed and every remaining row is divided by its sum, so it sums to 1
  again (BertViz does the same). The head and layer means are then means of these
  renormalised maps; rollout is computed with every token (as Abnar & Zuidema define
  it) and then renormalised the same way. ``special_share`` says how much of each row
  the hidden tokens took.
* merge word pieces into words (``merge_words``, :class:`.words.WordMerge`): a word's
  column sums its key pieces, its row averages its query pieces, so rows still sum to 1.
  Special tokens stay words of their own. The merge follows the hiding above; means and
  rollout are merged the same way.
* one layer only (``layer_index``), and one head of it (``head_index``).
* block-max pooling of the layers x heads maps to at most ``display_size`` per side,
  for thumbnails of long inputs (:func:`attnviz.attention.summary.block_pool`). The
  layer mean and rollout are pooled only beyond :data:`MAX_AVERAGE_SIZE` per side.
"""

from __future__ import annotations

import contextvars
import math
import threading
from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch.nn import functional

from ..attention.cancellation import ComputeCancelledError, check_cancelled
from ..attention.errors import AttentionInputError
from ..attention.pooling import block_factor
from ..attention.rollout import MAX_ROLLOUT_TOKENS, rollout_step
from .blocks import Block
from .computing import chunk_rows, observed_chunk_floats
from .maps import (
    FULL_SUM_CELLS,
    MAX_AVERAGE_SIZE,
    LayerMaps,
    Pooling,
    SequenceView,
    ViewSummary,
    block_rows,
    block_sizes,
    pooled,
    renormalised,
)
from .methods import method_spec
from .results import Averages, PassInputs, PretrainedAttentions
from .streaming import ProgressBudget, ThreadFeed
from .tokens import TokenizedBatch
from .words import WordMerge, shown_tokens

__all__ = [
    "MAX_AVERAGE_SIZE",
    "LayerMaps",
    "LayerWalk",
    "Pooling",
    "SequenceView",
    "ViewSummary",
    "WalkObserver",
    "pooled",
    "renormalised",
    "sequence_view",
]


class LayerWalk:
    """The display choices of the module docstring, applied one layer at a time.

    :meth:`layers` computes each layer in turn and yields the shown ones; :meth:`view`
    then gives the whole :class:`SequenceView`. Whether the layers come from a kept
    recording (replayed) or from a forward pass observed while it runs, they go through
    one pipeline, :class:`WalkObserver`, in chunks of query rows: memory holds one
    chunk of a layer's H x rows x L_k weights at a time, plus what is kept. The server
    streams the layers as they come.

    Raises:
        AttentionInputError: (field ``layer_index`` / ``head_index`` / ``block``) a
            layer, head or block the model does not have, or (``hide_special_tokens``)
            an input made only of special tokens.
        ValueError: ``result`` holds more than one input.
    """

    def __init__(
        self,
        source: PretrainedAttentions | PassInputs,
        *,
        block: Block | None = None,
        hide_special_tokens: bool = False,
        layer_index: int | None = None,
        head_index: int | None = None,
        display_size: int | None = None,
        merge_words: bool = False,
        pending: Callable[[WalkObserver], PretrainedAttentions] | None = None,
        block_of: Callable[[nn.Module], Block | None] | None = None,
        deadline: ProgressBudget | None = None,
    ) -> None:
        inputs = source.inputs if isinstance(source, PretrainedAttentions) else source
        if inputs.batch.input_ids.shape[0] != 1:
            raise ValueError("sequence_view takes the result of one input")
        if pending is None and not isinstance(source, PretrainedAttentions):
            raise ValueError("a walk of a pass not run yet needs the pass (pending)")
        self.result: PretrainedAttentions | None = (
            source if isinstance(source, PretrainedAttentions) and pending is None else None
        )
        self.method = "attention" if self.result is None else self.result.method
        self.block: Block = block or inputs.first_block
        self.num_layers = inputs.num_layers(self.block)
        if layer_index is not None and not 0 <= layer_index < self.num_layers:
            raise AttentionInputError(
                "layer_index", f"{layer_index} is not below {self.num_layers}"
            )
        self.queries, self.keys = inputs.queries(self.block), inputs.keys(self.block)
        self.length_q = int(self.queries.input_ids.shape[1])
        self.length_k = int(self.keys.input_ids.shape[1])
        self.keep_q: torch.Tensor | None = None
        self.keep_k: torch.Tensor | None = None
        if hide_special_tokens:
            self.keep_q = ~self.queries.special_tokens_mask[0]
            self.keep_k = ~self.keys.special_tokens_mask[0]
            if not self.keep_q.any() or not self.keep_k.any():
                raise AttentionInputError(
                    "hide_special_tokens", "the input has only special tokens"
                )
        self.hide_special_tokens = hide_special_tokens
        self.merge_q: WordMerge | None = None
        self.merge_k: WordMerge | None = None
        if merge_words:
            self.merge_q = WordMerge(self.queries, self.keep_q)
            self.merge_k = WordMerge(self.keys, self.keep_k)
        self.merge_words = merge_words
        keep = self.keep_q
        if keep is None:
            keep = torch.ones(self.length_q, dtype=torch.bool)
        # shown tokens before each token, and the shown row (token or word) of each
        self.shown_before = torch.cat([torch.zeros(1, dtype=torch.long), keep.long().cumsum(0)])
        self.shown_positions: list[int] = keep.nonzero().flatten().tolist()
        self.unit_of_shown: list[int] = (
            list(range(len(self.shown_positions)))
            if self.merge_q is None
            else self.merge_q.word_of.tolist()
        )
        self.units = self.unit_of_shown[-1] + 1 if self.unit_of_shown else 0
        self.key_units = len(self.shown(self.keys, self.keep_k)[0])
        self.sum_factors = (1, 1)  # tokens per cell of layer_sum (FULL_SUM_CELLS)
        if self.units * self.key_units > FULL_SUM_CELLS:
            self.sum_factors = (
                block_factor(self.units, MAX_AVERAGE_SIZE),
                block_factor(self.key_units, MAX_AVERAGE_SIZE),
            )
        self.layer_index, self.head_index, self.display_size = (
            layer_index,
            head_index,
            display_size,
        )
        self.kept: list[LayerMaps] = []
        self.layer_sum: torch.Tensor | None = None
        self.rollout: torch.Tensor | None = None
        self.share_sum, self.share_count = 0.0, 0
        self.pooling = Pooling(1, 1)
        self.pending = pending
        self.block_of = block_of
        self.context = contextvars.copy_context()
        self.deadline = deadline

    def shown(
        self, batch: TokenizedBatch, keep: torch.Tensor | None
    ) -> tuple[list[str], list[int], list[int], list[bool]]:
        """:func:`.words.shown_tokens` of :attr:`queries` or :attr:`keys`.

        Merged into words with ``merge_words``.
        """
        tokens = shown_tokens(batch, keep)
        merge = self.merge_q if batch is self.queries else self.merge_k
        return tokens if merge is None else merge.tokens(tokens)

    def shown_rows(
        self, raw: torch.Tensor, start: int, stop: int
    ) -> tuple[int, torch.Tensor] | None:
        """Rows start..stop of (H, rows, L_k') maps as shown, and the first shown row's index.

        The hidden tokens' rows and columns removed and each row renormalised, then the
        rows merged into words (``merge_words``): (H, U, K) for the shown rows (tokens or
        words) u0 .. u0 + U - 1 that these tokens make. ``start`` must begin a word. None
        when every row is hidden. Without hiding or merging, L_k' may be short of L_k
        (keys no row sees) and the maps keep their L_k' columns.
        """
        shown = raw
        if self.keep_q is not None and self.keep_k is not None:
            rows, keep_k = self.keep_q[start:stop].to(raw.device), self.keep_k.to(raw.device)
            shown = renormalised(raw, rows, keep_k)
        first, last = int(self.shown_before[start]), int(self.shown_before[stop])
        if last <= first:
            return None
        if self.merge_q is None or self.merge_k is None:
            return first, shown
        return self.merge_q.queries(self.merge_k.keys(shown), first, last)

    def factors(self, length: int, key_length: int) -> tuple[int, int]:
        """Tokens per pooled row and column for maps of ``length`` x ``key_length``."""
        if (size := self.display_size) is None:
            return 1, 1
        return block_factor(length, size), block_factor(key_length, size)

    @property
    def with_rollout(self) -> bool:
        """Whether rollout is computed.

        It is of the weights (not another method's maps), of square blocks, up to
        :data:`attnviz.attention.rollout.MAX_ROLLOUT_TOKENS` tokens.
        """
        return (
            not method_spec(self.method).per_head
            and self.block != "cross"
            and self.length_q <= MAX_ROLLOUT_TOKENS
        )

    @property
    def _memo_key(self) -> tuple[Block, bool, bool]:
        return (self.block, self.hide_special_tokens, self.merge_words)

    def _keep_averages(self) -> None:
        """The averages into the result's memo, for the next walk of the same pass."""
        assert self.result is not None
        self.result.memo.averages[self._memo_key] = Averages(
            self.layer_sum, self.rollout, self.share_sum, self.share_count
        )

    def check_deadline(self) -> None:
        """Raise ComputeCancelledError once the stream's :attr:`deadline` budget has ended."""
        if self.deadline is not None:
            self.deadline.check()

    @property
    def observed(self) -> bool:
        """Whether :meth:`layers` runs the pass (``pending``) itself, observing it.

        So with a ``display_size`` or a ``head_index``; :attr:`result` is None until then.
        """
        pooled_or_head = self.display_size is not None or self.head_index is not None
        return self.pending is not None and pooled_or_head

    def layers(self) -> Iterator[LayerMaps]:
        """Compute the layers in order; yield the shown ones (all, or layer_index's).

        Every layer is computed for the averages (layer mean, rollout) the first time;
        once a walk of the same recording has kept them (``result.memo``), a walk with
        a layer_index computes that layer alone. A kept recording is replayed into a
        :class:`WalkObserver`; an :attr:`observed` walk runs the forward pass in a
        thread of its own and yields each layer as soon as the pass has computed it
        (:meth:`observed_layers`).
        """
        if self.observed:
            yield from self.observed_layers()
            return
        if self.pending is not None:  # not observed: run the pass, then walk it
            self.result = self.pending(None)  # type: ignore[arg-type]
            self.pending = None
        assert self.result is not None
        averages = self.result.memo.averages.get(self._memo_key)
        every = range(self.num_layers)
        if averages is not None:
            self.layer_sum, self.rollout = averages.layer_sum, averages.rollout
            self.share_sum, self.share_count = averages.share_sum, averages.share_count
            if self.layer_index is not None:
                every = range(self.layer_index, self.layer_index + 1)
        shown: list[LayerMaps] = []
        observer = WalkObserver(self, shown.append, sums=averages is None)
        for layer in every:
            check_cancelled()
            num_heads = self.result.num_heads(self.block, layer)
            if self.head_index is not None and not 0 <= self.head_index < num_heads:
                raise AttentionInputError(
                    "head_index", f"{self.head_index} is not below {num_heads}"
                )
            observer.start_layer(layer)
            self.result.replay(self.block, layer, observer)
            yield from shown
            shown.clear()
        observer.finish()
        if averages is None:
            self._keep_averages()

    def observed_layers(self) -> Iterator[LayerMaps]:
        """Run the pending pass in a thread, observed; yield each shown layer as it comes.

        The pass runs in this walk's context (its cancellation, set where the walk was
        made). Closing the iterator early (a client gone) stops the pass at its next
        chunk and waits for the thread.

        Raises:
            whatever the pass raises (:meth:`.model.PretrainedModel.run`).
        """
        assert self.pending is not None
        run, self.pending = self.pending, None
        feed: ThreadFeed[LayerMaps] = ThreadFeed()
        observer = WalkObserver(self, feed.put)
        self.result = yield from feed.run(
            lambda: run(observer),
            context=self.context,
            name="attnviz-observed-pass",
            stop=observer.stopped.set,
        )
        observer.finish()
        self._keep_averages()

    def summary(self) -> ViewSummary:
        """The whole view and the pass walked, once :meth:`layers` has run to the end.

        Runs the layers first if they have not run (for a one-shot answer).
        """
        view = self.view()
        assert self.result is not None  # the layers ran
        return ViewSummary(view, self.result)

    def view(self) -> SequenceView:
        """The whole view, once :meth:`layers` has run to the end (it runs it if not)."""
        if self.layer_sum is None:
            for _ in self.layers():
                pass
        assert self.layer_sum is not None  # every model has a layer
        if self.sum_factors == (1, 1):
            layer_mean, average_pooling = pooled(self.layer_sum / self.num_layers, MAX_AVERAGE_SIZE)
        else:  # block sums: each block's mean over the cells it has
            (factor_q, factor_k), sums = self.sum_factors, self.layer_sum
            cells = torch.outer(
                block_sizes(self.units, factor_q, sums.shape[0]),
                block_sizes(self.key_units, factor_k, sums.shape[1]),
            )
            layer_mean = sums / (self.num_layers * cells)
            average_pooling = Pooling(factor_q, factor_k, "mean")
        rollout = None
        if self.rollout is not None:  # with every token: hidden and merged as a map is
            rows = self.shown_rows(self.rollout.float()[None], 0, self.length_q)
            assert rows is not None  # some token is shown
            rollout = pooled(rows[1][0], MAX_AVERAGE_SIZE)[0]
        tokens, ids, types, special = self.shown(self.queries, self.keep_q)
        return SequenceView(
            tokens=tokens,
            key_tokens=self.shown(self.keys, self.keep_k)[0],
            input_ids=ids,
            token_type_ids=types,
            special_tokens_mask=special,
            attentions=torch.stack([k.attentions for k in self.kept]),
            head_mean=torch.stack([k.head_mean for k in self.kept]),
            layer_mean=layer_mean,
            rollout=rollout,
            hidden_special_tokens=self.hide_special_tokens,
            special_share=self.share_sum / self.share_count if self.share_count else None,
            pooling=self.pooling,
            average_pooling=average_pooling,
        )


class WalkObserver:
    """The one pipeline of a :class:`LayerWalk`, an :class:`.computing.AttentionObserver`.

    It takes each layer of the walk's block in chunks of query rows, during a forward
    pass or replayed from a recording (:meth:`.results.PretrainedAttentions.replay`): per
    chunk, the hidden tokens' share, the rows as shown (:meth:`LayerWalk.shown_rows`:
    renormalised without hidden tokens, merged into words), each head block-max pooled to
    the display size, the head mean (pooled, and summed at full size for the layer mean),
    and the raw head mean for rollout. The chunks start at a word's first token (no word
    is split between two chunks); a pooled block may span chunks (:meth:`_pool_into`).
    At the end of a layer the shown maps go to ``sink``; its rollout step is folded when
    the next layer starts (or at :meth:`finish`), so a streamed layer does not wait for it.

    Args:
        walk: the walk whose choices apply and whose sums are kept.
        sink: called with each shown layer's :class:`LayerMaps`.
        sums: add each layer to the walk's sums (layer mean, rollout, hidden share);
            False when they are known already (a later view of a kept pass).

    Attributes:
        stopped: set to give up the pass: the next chunk raises ComputeCancelledError.
    """

    def __init__(
        self, walk: LayerWalk, sink: Callable[[LayerMaps], None], *, sums: bool = True
    ) -> None:
        self.walk, self.sink, self.sums = walk, sink, sums
        self.stopped = threading.Event()
        self.layer = -1
        units, key_units = walk.units, walk.key_units
        self.factor_q, self.factor_k = walk.factors(units, key_units)
        # a head clicked at full size has its layer's mean pooled to MAX_AVERAGE_SIZE
        self.mean_q, self.mean_k = self.factor_q, self.factor_k
        if walk.display_size is None and walk.head_index is not None:
            self.mean_q = block_factor(units, MAX_AVERAGE_SIZE)
            self.mean_k = block_factor(key_units, MAX_AVERAGE_SIZE)
        # where a chunk may start: the first token of each shown row (a word's first piece)
        unit = walk.unit_of_shown
        self.starts = [
            0,
            *(p for i, p in enumerate(walk.shown_positions) if i and unit[i] != unit[i - 1]),
        ]
        self.device: torch.device | None = None  # where the sums are built: the first chunk's
        self.raw_mean: torch.Tensor | None = None
        self.folding: torch.Tensor | None = None  # the last layer's raw mean, to fold
        self.attentions: torch.Tensor | None = None
        self.head_mean: torch.Tensor | None = None

    def start_layer(self, layer: int) -> None:
        """Begin layer ``layer``; fold the previous layer's rollout step."""
        self._fold()
        self.layer = layer
        self.raw_mean = None
        self.attentions = self.head_mean = None

    def wants(self, module: nn.Module) -> bool:
        """The walk's block's calls, counted as its layers."""
        block_of = self.walk.block_of
        if block_of is not None and block_of(module) != self.walk.block:
            return False
        self.start_layer(self.layer + 1)
        return True

    def row_chunks(
        self, length_q: int, length_k: int, num_heads: int, device: torch.device
    ) -> list[tuple[int, int]]:
        """Chunks of :func:`.computing.chunk_rows` rows, to the next of :attr:`starts`.

        Where every token is a shown row (nothing hidden or merged), a chunk's rows are a
        multiple of the pooling factor, so that each chunk pools whole blocks (no block
        straddles two chunks, no chunk is padded to its block: a third of a long layer's
        time at 4,096 tokens).
        """
        if length_q != self.walk.length_q:
            raise RuntimeError(f"an observed call has {length_q} queries, not {self.walk.length_q}")
        rows = chunk_rows(length_q, num_heads * length_k, observed_chunk_floats(device))
        if self.walk.keep_q is None and self.walk.merge_q is None and rows > self.factor_q:
            rows -= rows % (self.factor_q * self.mean_q // math.gcd(self.factor_q, self.mean_q))
            rows = max(rows, self.factor_q)
        chunks, start = [], 0
        for boundary in [*self.starts[1:], length_q]:
            if boundary - start >= rows or boundary == length_q:
                if boundary > start:
                    chunks.append((start, boundary))
                start = boundary
        return chunks

    @property
    def _shown_layer(self) -> bool:
        return self.walk.layer_index is None or self.layer == self.walk.layer_index

    def take(self, start: int, stop: int, weights: torch.Tensor) -> None:
        """One chunk of rows (B = 1, H, rows, L_k' <= L_k) into the walk's sums and maps."""
        if self.stopped.is_set():
            raise ComputeCancelledError("the stream's client is gone")
        walk = self.walk
        walk.check_deadline()
        raw = weights[0].float()
        if self.device is None:
            self.device = raw.device
        raw = raw.to(self.device)  # a model spread over devices: the sums stay on one
        if raw.shape[-1] < walk.length_k and (walk.keep_k is not None or walk.merge_k is not None):
            raw = functional.pad(raw, (0, walk.length_k - raw.shape[-1]))
        # Without hiding or merging, the keys no row of the chunk sees (weight 0) are left
        # out: every sum and block max below is the same without them (weights >= 0).
        num_heads, device = raw.shape[0], raw.device
        if self.sums and walk.with_rollout:
            if self.raw_mean is None:
                self.raw_mean = torch.zeros(walk.length_q, walk.length_k, device=device)
            self.raw_mean[start:stop, : raw.shape[-1]] = raw.mean(dim=0)
        if self.sums and walk.keep_q is not None and walk.keep_k is not None:
            rows = walk.keep_q[start:stop].to(device)
            hidden = raw[:, rows][..., ~walk.keep_k.to(device)].sum(dim=-1)
            walk.share_sum += float(hidden.sum())
            walk.share_count += hidden.numel()
        shown_rows = walk.shown_rows(raw, start, stop)
        if shown_rows is None:
            return  # only hidden rows
        u0, shown = shown_rows
        mean = shown.sum(dim=0) / num_heads
        if self.sums:
            sum_q, sum_k = walk.sum_factors
            if walk.layer_sum is None:
                side = (-(-walk.units // sum_q), -(-walk.key_units // sum_k))
                walk.layer_sum = torch.zeros(side, device=device)
            if walk.sum_factors == (1, 1):
                walk.layer_sum[u0 : u0 + mean.shape[0], : mean.shape[-1]] += mean
            else:
                self._sum_into(walk.layer_sum, mean, u0, walk.sum_factors)
        if not self._shown_layer:
            return
        heads = shown
        if walk.head_index is not None:
            heads = shown[walk.head_index : walk.head_index + 1]
        if self.attentions is None or self.head_mean is None:
            self.attentions = self._blocks(heads.shape[0], self.factor_q, self.factor_k, device)
            self.head_mean = self._blocks(None, self.mean_q, self.mean_k, device)
        self._pool_into(self.attentions, heads, u0, (self.factor_q, self.factor_k))
        self._pool_into(self.head_mean, mean, u0, (self.mean_q, self.mean_k))

    def _blocks(
        self, heads: int | None, factor_q: int, factor_k: int, device: torch.device
    ) -> torch.Tensor:
        """Zeros for a layer's maps pooled by these factors: ([heads,] P_q, P_k)."""
        side = (-(-self.walk.units // factor_q), -(-self.walk.key_units // factor_k))
        return torch.zeros(side if heads is None else (heads, *side), device=device)

    @staticmethod
    def _pool_into(
        target: torch.Tensor, maps: torch.Tensor, u0: int, factors: tuple[int, int]
    ) -> None:
        """Shown rows from row ``u0``, block-max pooled by ``factors``, into ``target``.

        A chunk may begin or end inside a block: its rows take their place in the block
        (zeros before them change no maximum: maps are >= 0), and a block keeps the
        maximum of what every chunk gave it.
        """
        for b0, part in block_rows(maps, u0, factors, "max"):
            region = target[..., b0 : b0 + part.shape[-2], : part.shape[-1]]
            region.copy_(torch.maximum(region, part))

    @staticmethod
    def _sum_into(
        target: torch.Tensor, maps: torch.Tensor, u0: int, factors: tuple[int, int]
    ) -> None:
        """Shown rows from row ``u0``, block-sum pooled by ``factors``, added to ``target``.

        As :meth:`_pool_into`, with sums: the zeros before a chunk that begins inside a
        block add nothing, and a block spanning chunks gets each chunk's part.
        """
        for b0, part in block_rows(maps, u0, factors, "sum"):
            target[..., b0 : b0 + part.shape[-2], : part.shape[-1]] += part

    def layer_done(self) -> None:
        """The layer's shown maps to the sink; its rollout step waits for the next layer."""
        walk = self.walk
        if walk.deadline is not None:
            walk.deadline.progressed()
        if self._shown_layer and self.attentions is not None and self.head_mean is not None:
            walk.pooling = Pooling(self.factor_q, self.factor_k)
            maps = LayerMaps(self.layer, self.attentions.cpu(), self.head_mean.cpu())
            walk.kept.append(maps)
            self.sink(maps)
        self.folding, self.raw_mean = self.raw_mean, None
        self.attentions = self.head_mean = None

    def _fold(self) -> None:
        if self.folding is not None:
            self.walk.rollout = rollout_step(self.walk.rollout, self.folding)
            self.folding = None

    def finish(self) -> None:
        """After the last layer: its rollout step, and the sums moved to the CPU.

        The sums were built where the model ran (a GPU's); the view is the CPU's.
        """
        self._fold()
        walk = self.walk
        if walk.layer_sum is not None:
            walk.layer_sum = walk.layer_sum.cpu()
        if walk.rollout is not None:
            walk.rollout = walk.rollout.cpu()


def sequence_view(
    result: PretrainedAttentions,
    *,
    block: Block | None = None,
    hide_special_tokens: bool = False,
    layer_index: int | None = None,
    head_index: int | None = None,
    display_size: int | None = None,
    merge_words: bool = False,
) -> SequenceView:
    """Apply the display choices of the module docstring to a one-input result.

    Args:
        result: :meth:`attnviz.pretrained.model.PretrainedModel.run` of one input (B = 1,
            no padding).
        block, hide_special_tokens, layer_index, head_index, display_size, merge_words:
            as :class:`LayerWalk` takes them (the module docstring).

    Raises:
        AttentionInputError: as :class:`LayerWalk`.
        ValueError: ``result`` holds more than one input.
    """
    return LayerWalk(
        result,
        block=block,
        hide_special_tokens=hide_special_tokens,
        layer_index=layer_index,
        head_index=head_index,
        display_size=display_size,
        merge_words=merge_words,
    ).view()

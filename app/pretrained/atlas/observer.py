"""The observer that adds up every head's scores during the atlas's forward passes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from ...attention.errors import AttentionInputError
from ..blocks import Block
from ..computing import chunk_rows, observed_chunk_floats
from .definitions import Rule


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

    With ``examples``, each pass also keeps, per input of its batch, the sums of its own
    counted queries and the query where each head's term is largest (:meth:`pass_stats`:
    the atlas's examples, :mod:`.shards`).

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
        block_of: Callable[[nn.Module], Block | None] | None = None,
        examples: bool = False,
    ) -> None:
        self.num_layers, self.num_heads = num_layers, num_heads
        self.examples = examples
        # With examples: the pass's (B, N, H) sums and peak positions per score, its (B,)
        # counted queries, and the layer's (B, H) sums, peak terms and positions so far.
        self._pass: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._pass_counted = np.zeros(0, dtype=np.int64)
        self._layer_pass: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
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
        if self.examples:
            shape = (counted.shape[0], self.num_layers, self.num_heads)
            self._pass = {
                rule.name: (np.zeros(shape), np.zeros(shape, dtype=np.int64)) for rule in rules
            }
            self._pass_counted = counted.sum(dim=1).numpy().astype(np.int64)

    def pass_stats(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The last pass's score ``name`` per input (with ``examples``).

        Returns:
            (B, N, H) float64 sums over each input's counted queries, (B, N, H) int64 the
            counted query where each head's term is largest (the first of equals), and
            (B,) int64 the counted queries of each input.

        Raises:
            KeyError: the pass did not add to ``name``, or the observer keeps no examples.
        """
        sums, positions = self._pass[name]
        return sums, positions, self._pass_counted

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

    def row_chunks(
        self, length_q: int, length_k: int, num_heads: int, device: torch.device
    ) -> list[tuple[int, int]]:
        """Chunks of about :func:`..computing.observed_chunk_floats` weights of the whole batch.

        :func:`..computing.chunk_rows` rows each, as :meth:`.display.WalkObserver.row_chunks`.

        Raises:
            RuntimeError: the call's queries are not the pass's positions.
        """
        batch, length = self._counted.shape
        if length_q != length:
            raise RuntimeError(f"an observed call has {length_q} queries, not {length}")
        rows = chunk_rows(length_q, batch * num_heads * length_k, observed_chunk_floats(device))
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
            if self.examples:
                self._take_examples(rule.name, read, counted, start)

    def _take_examples(
        self, name: str, read: torch.Tensor, counted: torch.Tensor, start: int
    ) -> None:
        """Each input's (B, H) sum and peak over the chunk's counted rows, kept for the layer."""
        per_input = torch.einsum("bhr,br->bh", read, counted)
        masked = read.masked_fill(counted[:, None, :] == 0, float("-inf"))
        peak, where = masked.max(dim=-1)  # (B, H); a chunk with no counted row: -inf
        where = where + start
        before = self._layer_pass.get(name)
        if before is None:
            self._layer_pass[name] = (per_input, peak, where)
            return
        sums, best, at = before
        higher = peak > best  # an equal peak keeps the earlier query
        self._layer_pass[name] = (
            sums + per_input,
            torch.where(higher, peak, best),
            torch.where(higher, where, at),
        )

    def layer_done(self) -> None:
        """The layer's (H,) sums to the CPU, into :attr:`sums`."""
        for name, total in self._layer_sums.items():
            self.sums[name][self._layer] += total.cpu().double().numpy()
        self._layer_sums = {}
        for name, (sums, _, where) in self._layer_pass.items():
            kept_sums, kept_positions = self._pass[name]
            kept_sums[:, self._layer] = sums.cpu().double().numpy()
            kept_positions[:, self._layer] = where.cpu().numpy()
        self._layer_pass = {}

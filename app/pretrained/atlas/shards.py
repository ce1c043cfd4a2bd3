"""The atlas over a large corpus in shards: sufficient statistics, an exact reduction, examples.

A plan's passes (:func:`.plan.plan_atlas`: one per passage of the corpus, then the
repeated random sequences in batches) split into shards of pass indices, each run on its
own (one process here; a worker of a pool elsewhere) into an :class:`AtlasShard`: per
score, the (N, H) float64 sums over its counted queries and their count (the sufficient
statistics of the means: :meth:`.observer.HeadScoreObserver.means`), and each head's
:class:`TopExamples`, the ``k`` passages where it scores highest with the query position
where it peaks. Shards merge by adding their sums and counts and by keeping the ``k``
best of both example lists, so the merged atlas is the one-process atlas of the same
passes, whatever the split (summed in another order: equal to about 1e-15 relative), and
each head's examples the brute-force ranking of every passage (ties to the lower
passage).

A passage's value for a score is its own mean (its sum over its counted queries divided
by their count; none counted: not ranked); its peak is the counted query whose term is
largest (A[i, i - 1] for previous_token, the row's entropy for entropy). Natural-text
scores rank the corpus's passages (by index in the corpus); induction and
duplicate_token rank the random sequences (by index among them), as they are defined
there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from ...attention.cancellation import Cancellation, cancellable, check_cancelled
from ...attention.errors import AttentionInputError
from ..model import LoadedModel
from .definitions import (
    DEFINITIONS,
    INDUCTION_BATCH,
    INDUCTION_SEQUENCES,
    MAX_TOKENS,
    REPEAT_LENGTH,
    SCORES,
)
from .inputs import decoder_start, unpadded_batch
from .observer import HeadScoreObserver
from .plan import AtlasPlan, plan_atlas
from .table import HeadScores

TOP_EXAMPLES: Final = 8
"""Passages kept per head and score (``attnviz atlas --top-k``)."""
REPEATED_SCORES: Final = frozenset(
    name for name, d in DEFINITIONS.items() if d.inputs == "repeated random tokens"
)
"""The scores measured on the random sequences, whose examples are those sequences."""


@dataclass(frozen=True)
class TopExamples:
    """The ``k`` passages where each head scores highest on one score, best first.

    Attributes:
        values: (N, H, k) float64, each passage's own mean score; -inf where unfilled.
        passages: (N, H, k) int64, the passage's index (in the corpus, or among the
            random sequences); -1 where unfilled.
        positions: (N, H, k) int64, the counted query where the head's term peaks.
    """

    values: np.ndarray
    passages: np.ndarray
    positions: np.ndarray

    @classmethod
    def empty(cls, num_layers: int, num_heads: int, k: int) -> TopExamples:
        """No passage yet: k unfilled slots per head."""
        shape = (num_layers, num_heads, k)
        return cls(np.full(shape, -np.inf), np.full(shape, -1, np.int64), np.zeros(shape, np.int64))

    @property
    def k(self) -> int:
        """Passages kept per head."""
        return int(self.values.shape[-1])

    def merged(
        self, values: np.ndarray, passages: np.ndarray, positions: np.ndarray
    ) -> TopExamples:
        """The ``k`` best of these and of (N, H, B) more: by value, then lower passage first.

        Unranked passages (value -inf) never displace a ranked one.
        """
        all_values = np.concatenate([self.values, values], axis=-1)
        all_passages = np.concatenate([self.passages, passages], axis=-1)
        all_positions = np.concatenate([self.positions, positions], axis=-1)
        # Unfilled and unranked slots sort last; among equal values the lower passage first.
        tie = np.where(all_passages < 0, np.iinfo(np.int64).max, all_passages)
        order = np.lexsort((tie, -all_values), axis=-1)[..., : self.k]
        kept = np.take_along_axis(all_values, order, -1)
        unranked = ~np.isfinite(kept)
        return TopExamples(
            np.where(unranked, -np.inf, kept),
            np.where(unranked, -1, np.take_along_axis(all_passages, order, -1)),
            np.where(unranked, 0, np.take_along_axis(all_positions, order, -1)),
        )

    def __add__(self, other: TopExamples) -> TopExamples:
        """Both lists merged: the ``k`` best of the two (an exact, order-free reduction)."""
        return self.merged(other.values, other.passages, other.positions)

    def rows(self, score: str) -> Iterator[dict[str, Any]]:
        """One dict per kept passage: score, layer, head, rank, passage, value, position."""
        layers, heads, k = self.values.shape
        for layer in range(layers):
            for head in range(heads):
                for rank in range(k):
                    if self.passages[layer, head, rank] < 0:
                        break
                    yield {
                        "score": score,
                        "layer": layer,
                        "head": head,
                        "rank": rank,
                        "passage": int(self.passages[layer, head, rank]),
                        "value": float(self.values[layer, head, rank]),
                        "position": int(self.positions[layer, head, rank]),
                    }


@dataclass
class AtlasShard:
    """What a run of some of a plan's passes adds to the atlas: sums, counts, examples.

    Attributes:
        sums: score -> (N, H) float64 sum over the counted queries of the shard's passes.
        counts: score -> their number.
        examples: score -> :class:`TopExamples` of the shard's passages.
        passes: the plan's pass indices run.
    """

    sums: dict[str, np.ndarray]
    counts: dict[str, int]
    examples: dict[str, TopExamples]
    passes: list[int] = field(default_factory=list)

    def __add__(self, other: AtlasShard) -> AtlasShard:
        """Both shards as one: sums and counts added, examples merged.

        Raises:
            ValueError: the two shards ran a pass in common (it would count twice).
        """
        common = set(self.passes) & set(other.passes)
        if common:
            raise ValueError(f"passes {sorted(common)[:5]} are in both shards")
        names = sorted(set(self.sums) | set(other.sums), key=SCORES.index)
        zero = next(iter(self.sums.values() or other.sums.values()))
        return AtlasShard(
            sums={n: self.sums.get(n, 0 * zero) + other.sums.get(n, 0 * zero) for n in names},
            counts={n: self.counts.get(n, 0) + other.counts.get(n, 0) for n in names},
            examples={
                n: self.examples[n] + other.examples[n]
                if n in self.examples and n in other.examples
                else self.examples.get(n) or other.examples[n]
                for n in names
            },
            passes=sorted(self.passes + other.passes),
        )

    def means(self) -> dict[str, np.ndarray]:
        """Score -> (N, H) float64 means, as :meth:`.observer.HeadScoreObserver.means`.

        Raises:
            AttentionInputError: (``texts``) a score counted no query.
        """
        means = {}
        for name in SCORES:
            if not self.counts.get(name):
                raise AttentionInputError(
                    "texts",
                    f"no text has a query for {name!r}: each needs a token after its first "
                    "that is not a special token",
                )
            means[name] = self.sums[name] / self.counts[name]
        return means


def run_shard(
    plan: AtlasPlan,
    passes: Iterable[int],
    *,
    top_k: int = TOP_EXAMPLES,
    progress: Callable[[int], object] | None = None,
    cancel: Cancellation | None = None,
) -> AtlasShard:
    """Run the plan's passes ``passes`` (indices into ``plan.passes``) into a shard.

    Args:
        plan: the checked plan (:func:`.plan.plan_atlas`).
        passes: which of its passes; each at most once.
        top_k: passages kept per head and score.
        progress: called with 1 after each pass.
        cancel: stops the run at the next layer or chunk (ComputeCancelledError).

    Raises:
        IndexError: a pass index outside the plan.
        ValueError: a pass index given twice.
    """
    indices = list(passes)
    if len(set(indices)) != len(indices):
        raise ValueError("a pass index is given twice")
    model, block = plan.model, plan.block
    _, runner = model.placed_on(plan.device)
    observer = HeadScoreObserver(
        model.block_layers(block),
        model.block_heads(block),
        block=block,
        block_of=model.block_of(runner),
        examples=True,
    )
    examples = {
        name: TopExamples.empty(observer.num_layers, observer.num_heads, top_k) for name in SCORES
    }
    natural = plan.info.sequences  # the corpus's passes come first, one per passage
    with cancellable(cancel) if cancel is not None else nullcontext():
        for index in indices:
            work = plan.passes[index]
            check_cancelled()
            observer.begin(work.counted, work.rules)
            batch = unpadded_batch(model, work.ids)
            targets = decoder_start(model, len(work.ids)) if model.spec.targets else None
            model.run(batch, targets, device=plan.device, observer=observer, record=False)
            observer.end()
            first = index if index < natural else (index - natural) * INDUCTION_BATCH
            ids = np.arange(first, first + len(work.ids), dtype=np.int64)
            for rule in work.rules:
                sums, peaks, counted = observer.pass_stats(rule.name)  # (B, N, H) x2, (B,)
                per_input = counted[:, None, None]
                with np.errstate(invalid="ignore", divide="ignore"):
                    values = np.where(per_input > 0, sums / per_input, -np.inf)
                move = (1, 2, 0)  # (B, N, H) -> (N, H, B)
                examples[rule.name] = examples[rule.name].merged(
                    values.transpose(move),
                    np.broadcast_to(ids, values.shape[1:] + ids.shape).copy(),
                    peaks.transpose(move),
                )
            if progress is not None:
                progress(1)
    return AtlasShard(
        sums={n: observer.sums[n].copy() for n in observer.sums},
        counts=dict(observer.counts),
        examples={n: examples[n] for n in observer.sums},
        passes=indices,
    )


def shards(count: int, total: int) -> list[list[int]]:
    """``total`` pass indices dealt into ``count`` shards, round robin (balanced lengths)."""
    if count < 1:
        raise ValueError("at least one shard")
    return [list(range(first, total, count)) for first in range(min(count, total))]


def atlas_of(plan: AtlasPlan, shard: AtlasShard, compute_ms: float) -> HeadScores:
    """The :class:`.table.HeadScores` of a shard that ran every pass of ``plan``.

    With its examples (:func:`example_rows`, less the texts) and the corpus passages they
    name (``passages``).

    Raises:
        ValueError: the shard did not run every pass exactly once.
    """
    if shard.passes != list(range(len(plan.passes))):
        raise ValueError(
            f"the shards ran {len(shard.passes)} of the plan's {len(plan.passes)} passes"
        )
    means = shard.means()
    rows = example_rows(plan, shard)
    return HeadScores(
        scores={name: means[name] for name in SCORES},
        definitions=dict(DEFINITIONS),
        corpus=plan.info,
        num_layers=plan.model.block_layers(plan.block),
        num_heads=plan.model.block_heads(plan.block),
        model=plan.model.name,
        block=plan.block,
        compute_ms=compute_ms,
        top_k=next(iter(shard.examples.values())).k,
        examples=tuple({k: v for k, v in row.items() if k != "text"} for row in rows),
        passages={str(r["passage"]): r["text"] for r in rows if r["text"] is not None},
    )


def example_rows(plan: AtlasPlan, shard: AtlasShard) -> list[dict[str, Any]]:
    """Every kept example as a row (``pandas.DataFrame(rows)``), best first per head.

    Each row: score, layer, head, rank, passage, value, position, and what the passage
    is: ``kind`` ("corpus" or "random tokens"), the token at ``position`` and, for the
    corpus, the passage's ``text``.
    """
    rows = []
    natural = plan.info.sequences
    for name in SCORES:
        repeated = name in REPEATED_SCORES
        for row in shard.examples[name].rows(name):
            p = row["passage"]
            if repeated:
                work = plan.passes[natural + p // INDUCTION_BATCH]
                ids = work.ids[p % INDUCTION_BATCH]
            else:
                ids = plan.passes[p].ids[0]
            token = plan.model.token_strings([int(ids[row["position"]])])[0]
            rows.append(
                {
                    **row,
                    "kind": "random tokens" if repeated else "corpus",
                    "token": token,
                    "text": None if repeated else plan.corpus.texts[p],
                }
            )
    return rows


def merged(parts: Sequence[AtlasShard]) -> AtlasShard:
    """Every shard as one (:meth:`AtlasShard.__add__`, in order)."""
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


def head_scores(
    plan: AtlasPlan | LoadedModel,
    texts: Sequence[str] | None = None,
    *,
    repeat_length: int | None = REPEAT_LENGTH,
    induction_sequences: int = INDUCTION_SEQUENCES,
    seed: int = 0,
    max_tokens: int = MAX_TOKENS,
    device: str = "auto",
    progress: Callable[[int, int], object] | None = None,
    cancel: Cancellation | None = None,
    top_k: int = 8,
) -> HeadScores:
    """Score every head of a model's self-attention (:data:`.definitions.DEFINITIONS`).

    Args:
        plan: a plan (:func:`.plan.plan_atlas`), or a loaded text model to plan for with the
            arguments below (as :func:`.plan.plan_atlas`'s; ignored with a plan).
        progress: called as ``progress(done, total)`` after each forward pass.
        cancel: the computation stops (ComputeCancelledError) at the next layer or chunk
            once it is cancelled; None: only an enclosing :func:`cancellable`'s.
        top_k: the passages kept per head and score, the examples behind the scores
            (each head's best passages and where it peaks).

    Returns:
        :class:`.table.HeadScores` of the plan's block: (N, H) float64 per score.

    Raises:
        As :func:`.plan.plan_atlas`, before any pass; ComputeCancelledError: cancelled.
    """
    started = time.perf_counter()
    if not isinstance(plan, AtlasPlan):
        plan = plan_atlas(
            plan, texts, repeat_length=repeat_length, induction_sequences=induction_sequences,
            seed=seed, max_tokens=max_tokens, device=device,
        )  # fmt: skip
    done = 0

    def counted(step: int) -> None:
        nonlocal done
        done += step
        if progress is not None:
            progress(done, len(plan.passes))

    shard = run_shard(plan, range(len(plan.passes)), top_k=top_k, progress=counted, cancel=cancel)
    return atlas_of(plan, shard, (time.perf_counter() - started) * 1000.0)

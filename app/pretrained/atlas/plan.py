"""An atlas request checked once, as a plan of forward passes, and the run of that plan.

:func:`plan_atlas` checks everything an atlas depends on before any pass runs (the model
is a text model, the texts, R, the sequences, the device, that every score will count a
query) and builds every pass once: the corpus, its tokens, the random vocabulary and the
repeated sequences. The plan's :attr:`AtlasPlan.key` names what decides its scores (the
model's weights, the work), the cache key of :mod:`.cache`. :func:`.shards.head_scores` runs a plan.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ...attention.errors import AttentionInputError
from ..blocks import Block
from ..model import LoadedModel, PretrainedModel
from .definitions import (
    INDUCTION_BATCH,
    INDUCTION_SEQUENCES,
    MAX_TOKENS,
    REPEAT_LENGTH,
    Rule,
    natural_rules,
    repeated_rules,
)
from .inputs import (
    Corpus,
    natural_queries,
    natural_tokens,
    random_vocabulary,
    repeated_tokens,
    scored_block,
    second_copy,
    shipped_corpus,
    text_model,
    texts_corpus,
)
from .table import CorpusInfo, work_fingerprint


@dataclass(frozen=True)
class Pass:
    """One forward pass of a plan.

    Attributes:
        ids: (B, L) int64 token ids, one length (no padding).
        counted: (B, L) bool, the queries its scores average over.
        rules: the scores it adds to.
    """

    ids: torch.Tensor
    counted: torch.Tensor
    rules: tuple[Rule, ...]


@dataclass(frozen=True)
class AtlasPlan:
    """What one atlas computes, checked: the model, its block, every pass, and the cache key.

    Attributes:
        model: the text model whose heads are scored.
        block: the scored block (:func:`.inputs.scored_block`).
        corpus: the natural texts.
        passes: the natural texts' passes (one text each), then the repeated sequences'
            (:data:`.definitions.INDUCTION_BATCH` to a pass).
        info: what the scores are computed on (the response's ``corpus``), counts included.
        device: where the passes run ("auto", "cpu" or "cuda"; checked).
        key: hex SHA-256 of the model's fingerprint (:func:`model_fingerprint`) and the
            work's (:func:`.table.work_fingerprint`): the disk cache's key.
    """

    model: PretrainedModel
    block: Block
    corpus: Corpus
    passes: tuple[Pass, ...]
    info: CorpusInfo
    device: str
    key: str


def model_fingerprint(model: LoadedModel) -> str:
    """Hex SHA-256 of what identifies ``model``'s weights and how they were loaded.

    Its name, source, path, the size and modification time (ns) of every file in its
    folder (or of the file itself, a GGUF), and its dtype: a model whose files changed
    (a retrained checkpoint in the same folder) gets another fingerprint.
    """
    files: list[tuple[str, int, int]] = []
    path = Path(model.path)
    if path.is_dir():
        for entry in sorted(path.iterdir()):
            if entry.is_file():
                stat = entry.stat()
                files.append((entry.name, stat.st_size, stat.st_mtime_ns))
    elif path.is_file():
        stat = path.stat()
        files.append((path.name, stat.st_size, stat.st_mtime_ns))
    parts = [model.name, model.source, str(path), files, str(model.model.dtype)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def repeat_length(model: PretrainedModel) -> int:
    """R of ``model``'s induction sequences by default: :data:`.definitions.REPEAT_LENGTH` at most.

    Fewer when its vocabulary (less special and added tokens) has fewer distinct tokens to
    draw (a tiny test model's).
    """
    return _most_repeated(random_vocabulary(model))


def _most_repeated(vocabulary: torch.Tensor) -> int:
    return max(2, min(REPEAT_LENGTH, len(vocabulary)))


def plan_atlas(
    model: LoadedModel,
    texts: Sequence[str] | None = None,
    *,
    repeat_length: int | None = REPEAT_LENGTH,
    induction_sequences: int = INDUCTION_SEQUENCES,
    seed: int = 0,
    max_tokens: int = MAX_TOKENS,
    device: str = "auto",
    progress: Callable[[int], object] | None = None,
) -> AtlasPlan:
    """Check an atlas request and build its passes (the module docstring).

    Args:
        model: a loaded text model (:class:`.model.PretrainedModel`).
        texts: the natural texts (one sequence each), or None for the shipped corpus
            (:func:`.inputs.shipped_corpus`).
        repeat_length: R, random tokens per copy in the induction sequences; None for
            :data:`.definitions.REPEAT_LENGTH` or fewer where the model's vocabulary (less
            special and added tokens) has fewer to draw (a tiny test model's), as the
            server and ``attnviz.head_scores`` do.
        induction_sequences: how many induction sequences.
        seed: the seed of the random tokens (:func:`.inputs.repeated_tokens`).
        max_tokens: tokens per natural-text sequence at most (longer texts are cut).
        device: "auto" (where the model lies), "cpu" or "cuda", as
            :meth:`.model.LoadedModel.device_for`.
        progress: called with 1 after each natural text is tokenised (a bar's update).

    Raises:
        HeadScoresUnavailableError: (field ``model``) a speech or image model.
        AttentionInputError: (``texts``, ``texts[i]``) no text or an empty one, or no text
            with a query for a natural-text score; (``repeat_length``,
            ``induction_sequences``, ``max_tokens``, ``device``) out of range or unavailable.
    """
    text = text_model(model)
    block = scored_block(text)
    text.device_for(device)
    if max_tokens < 2:
        raise AttentionInputError("max_tokens", f"{max_tokens} is below 2")
    corpus = shipped_corpus() if texts is None else texts_corpus(texts)
    special = torch.tensor(sorted(text.special_ids), dtype=torch.int64)
    passes: list[Pass] = []
    tokens = truncated = queries = 0
    for one in corpus.texts:
        ids, cut = natural_tokens(text, one, max_tokens)
        row = torch.tensor([ids], dtype=torch.int64)
        counted = natural_queries(row, special)
        passes.append(Pass(row, counted, natural_rules()))
        if progress is not None:
            progress(1)
        tokens, truncated, queries = (
            tokens + len(ids),
            truncated + cut,
            queries + int(counted.sum()),
        )
    if queries == 0:
        raise AttentionInputError(
            "texts",
            f"no text has a query for {natural_rules()[0].name!r}: each needs a token after "
            "its first that is not a special token",
        )
    vocabulary = random_vocabulary(text)
    if repeat_length is None:
        repeat_length = _most_repeated(vocabulary)
    repeated, prefix = repeated_tokens(
        text, induction_sequences, repeat_length, seed, vocabulary=vocabulary
    )
    induction_queries = 0
    for first in range(0, induction_sequences, INDUCTION_BATCH):
        rows = repeated[first : first + INDUCTION_BATCH]
        counted = second_copy(rows, prefix, repeat_length)
        passes.append(Pass(rows, counted, repeated_rules(repeat_length)))
        induction_queries += int(counted.sum())
    info = CorpusInfo(
        name=corpus.name,
        version=corpus.version,
        sha256=corpus.sha256,
        sequences=len(corpus.texts),
        tokens=tokens,
        queries=queries,
        truncated=truncated,
        max_tokens=max_tokens,
        seed=seed,
        repeat_length=repeat_length,
        induction_sequences=induction_sequences,
        induction_tokens=int(repeated.numel()),
        induction_queries=induction_queries,
    )
    work = work_fingerprint(
        corpus.sha256,
        max_tokens=max_tokens,
        seed=seed,
        repeat_length=repeat_length,
        induction_sequences=induction_sequences,
    )
    key = hashlib.sha256(json.dumps([model_fingerprint(text), work]).encode()).hexdigest()
    return AtlasPlan(text, block, corpus, tuple(passes), info, device, key)

"""The head atlas on disk: :func:`.heads.head_scores` computed once per model and corpus.

A model's scores depend on its weights, its dtype, the corpus and the score definitions;
:func:`atlas_key` names them all, and :func:`cached_head_scores` keeps each result as
one JSON file (:meth:`.heads.HeadScores.to_dict`) under ``<cache_dir>/head-atlas/``. A
second request for the same model and corpus reads the file (milliseconds instead of a
minute); a new :data:`.heads.DEFINITION_VERSION`, another corpus or a model's changed
files make a new key. A cache directory that cannot be written (a read-only container)
only costs the reuse: the scores are computed and returned all the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import numpy as np

from ..attention.cancellation import Cancellation
from .heads import (
    DEFINITION_VERSION,
    INDUCTION_SEQUENCES,
    MAX_TOKENS,
    REPEAT_LENGTH,
    SCORES,
    HeadScores,
    head_scores,
    random_vocabulary,
    scored_block,
    shipped_corpus,
    texts_corpus,
    work_fingerprint,
)
from .model import LoadedModel, PretrainedModel

logger = logging.getLogger(__name__)

ATLAS_FOLDER: Final = "head-atlas"
"""The cache directory's subfolder of the atlas files."""
PYTHON_SOURCE: Final = "loaded in Python"
"""The source of a model :func:`.loading.wrap_model` wrapped (not cached: see
:func:`cached_head_scores`)."""


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
    """R of ``model``'s induction sequences: :data:`.heads.REPEAT_LENGTH` at most.

    Fewer when its vocabulary (less special and added tokens) has fewer distinct tokens to
    draw (a tiny test model's).
    """
    return max(2, min(REPEAT_LENGTH, len(random_vocabulary(model))))


def atlas_key(model: LoadedModel, texts: Sequence[str] | None, seed: int = 0) -> str:
    """The cache key of ``model``'s scores on ``texts`` (None: the shipped corpus).

    Hex SHA-256 of the model's fingerprint and :func:`.heads.work_fingerprint` (the
    corpus's SHA-256, :data:`.heads.MAX_TOKENS`, :func:`repeat_length`,
    :data:`.heads.INDUCTION_SEQUENCES`, the seed and :data:`.heads.DEFINITION_VERSION`).
    """
    assert isinstance(model, PretrainedModel)  # scored_block refused the others
    corpus = shipped_corpus() if texts is None else texts_corpus(texts)
    work = work_fingerprint(
        corpus.sha256,
        max_tokens=MAX_TOKENS,
        seed=seed,
        repeat_length=repeat_length(model),
        induction_sequences=INDUCTION_SEQUENCES,
    )
    return hashlib.sha256(json.dumps([model_fingerprint(model), work]).encode()).hexdigest()


def atlas_path(cache_dir: Path, model: LoadedModel, key: str) -> Path:
    """Where the scores of ``key`` are kept: ``<cache_dir>/head-atlas/<name>-<key[:24]>.json``.

    The model's name is kept readable (letters, digits, ``-``, ``_``, ``.``; others ``_``).
    """
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model.name)[:80]
    return cache_dir / ATLAS_FOLDER / f"{safe}-{key[:24]}.json"


def read_cached(path: Path) -> HeadScores | None:
    """The scores kept at ``path``, or None.

    None when absent, unreadable, of another version, or not an atlas (another shape): the
    scores are then computed and the file written again.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        scores = HeadScores.from_dict(data)
        shape = (scores.num_layers, scores.num_heads)
        if set(scores.scores) != set(SCORES) or any(
            np.shape(values) != shape for values in scores.scores.values()
        ):
            raise ValueError(f"not every score of {shape} heads")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
        if path.exists():
            logger.warning("head atlas cache %s ignored: %s", path, error)
        return None
    return scores if scores.definition_version == DEFINITION_VERSION else None


def write_cached(path: Path, scores: HeadScores) -> bool:
    """Keep ``scores`` at ``path`` (written whole or not at all); False when it cannot be."""
    partial: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=path.parent, suffix=".partial", delete=False
        ) as handle:
            partial = handle.name
            json.dump(scores.to_dict(), handle)
        os.replace(partial, path)
    except OSError as error:
        logger.warning("head atlas not cached in %s: %s", path.parent, error)
        if partial is not None:
            with contextlib.suppress(OSError):
                os.unlink(partial)
        return False
    return True


def cached_head_scores(
    model: LoadedModel,
    texts: Sequence[str] | None,
    cache_dir: Path,
    *,
    device: str = "auto",
    progress: Callable[[int, int], object] | None = None,
    cancel: Cancellation | None = None,
) -> tuple[HeadScores, bool]:
    """``model``'s head scores on ``texts`` (None: the shipped corpus), from disk if kept.

    Args:
        model: a loaded text model.
        texts: the caller's corpus (one sequence each), or None.
        cache_dir: the cache directory (the server's ATTNVIZ_CACHE_DIR).
        device: as :func:`.heads.head_scores`.
        progress: ``progress(done, total)`` after each forward pass (not called when the
            scores come from disk).
        cancel: as :func:`.heads.head_scores`.

    Returns:
        (the scores, whether they came from disk).

    Raises:
        As :func:`.heads.head_scores` (HeadScoresUnavailableError for a speech or image
        model, before any cache lookup).
    """
    scored_block(model)  # a speech or image model is refused first
    assert isinstance(model, PretrainedModel)
    # A model handed over from Python has no files that identify its weights (an edited or
    # fine-tuned model in memory keeps its name): never read from or kept on disk.
    cacheable = model.source != PYTHON_SOURCE
    path = atlas_path(cache_dir, model, atlas_key(model, texts))
    kept = read_cached(path) if cacheable else None
    if kept is not None and kept.model == model.name:
        return kept, True
    scores = head_scores(
        model,
        texts,
        repeat_length=repeat_length(model),
        device=device,
        progress=progress,
        cancel=cancel,
    )
    if cacheable:
        write_cached(path, scores)
    return scores, False

"""The head atlas on disk: a plan's scores computed once per model and corpus.

A model's scores depend on its weights, its dtype, the corpus and the score definitions;
a plan's :attr:`.plan.AtlasPlan.key` names them all, and :func:`cached_head_scores` keeps
each result as one JSON file (:meth:`.table.HeadScores.to_dict`) under
``<cache_dir>/head-atlas/``. A second request for the same model and corpus reads the file
(milliseconds instead of a minute); a new :data:`.definitions.DEFINITION_VERSION`, another
corpus or a model's changed files make a new key. A cache directory that cannot be written
(a read-only container) only costs the reuse: the scores are computed and returned all the
same.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import numpy as np

from ...attention.cancellation import Cancellation
from ..model import LoadedModel
from .definitions import DEFINITION_VERSION, SCORES
from .plan import AtlasPlan, plan_atlas
from .shards import head_scores
from .table import HeadScores

logger = logging.getLogger(__name__)

ATLAS_FOLDER: Final = "head-atlas"
"""The cache directory's subfolder of the atlas files."""
PYTHON_SOURCE: Final = "loaded in Python"
"""The source of a model :func:`..loading.wrap_model` wrapped (not cached: see
:func:`cached_head_scores`)."""


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
        if scores.examples is None:
            raise ValueError("no examples (written before atlases kept them)")
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
    plan: AtlasPlan | LoadedModel,
    texts: Sequence[str] | None,
    cache_dir: Path,
    *,
    device: str = "auto",
    progress: Callable[[int, int], object] | None = None,
    cancel: Cancellation | None = None,
) -> tuple[HeadScores, bool]:
    """The scores of a plan (or of a model's default plan on ``texts``), from disk if kept.

    Args:
        plan: a plan (:func:`.plan.plan_atlas`), or a loaded text model, planned here on
            ``texts`` (None: the shipped corpus) with the server's defaults and ``device``
            (both ignored with a plan).
        cache_dir: the cache directory (the server's ATTNVIZ_CACHE_DIR).
        progress: ``progress(done, total)`` after each forward pass (not called when the
            scores come from disk).
        cancel: as :func:`.shards.head_scores`.

    Returns:
        (the scores, whether they came from disk).

    Raises:
        As :func:`.plan.plan_atlas` (HeadScoresUnavailableError for a speech or image
        model, an unavailable device: before any cache lookup), and
        :func:`.shards.head_scores`.
    """
    if not isinstance(plan, AtlasPlan):
        plan = plan_atlas(plan, texts, repeat_length=None, device=device)
    model = plan.model
    # A model handed over from Python has no files that identify its weights (an edited or
    # fine-tuned model in memory keeps its name): never read from or kept on disk.
    cacheable = model.source != PYTHON_SOURCE
    path = atlas_path(cache_dir, model, plan.key)
    kept = read_cached(path) if cacheable else None
    if kept is not None and kept.model == model.name:
        return kept, True
    scores = head_scores(plan, progress=progress, cancel=cancel)
    if cacheable:
        write_cached(path, scores)
    return scores, False

"""The head atlas from Python: every head of a model scored over a corpus, as a table.

``attnviz.head_scores(model=...)`` runs :func:`attnviz.pretrained.atlas.head_scores`
(kept on disk as the server keeps it, :mod:`attnviz.pretrained.atlas.cache`) and returns the
table the page shows: one row per (layer, head), one column per score::

    table = attnviz.head_scores(model="SmolLM2-135M-Instruct")
    table.sort_values("induction", ascending=False).head(5)
    attnviz.atlas_view(table)  # in Jupyter: the page's atlas, interactive

With pandas installed the table is a ``pandas.DataFrame`` whose ``attrs`` hold the
definitions, the corpus and the model; without pandas it is the
:class:`attnviz.pretrained.atlas.HeadScores` itself (``.to_rows()``, ``.to_csv()``,
``.top(name)``).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .show import text_model


def head_scores(
    model: Any = None,
    texts: Sequence[str] | None = None,
    *,
    tokenizer: Any = None,
    device: str = "auto",
    cache: bool = True,
) -> Any:
    """Every head of ``model`` scored over a corpus (the head atlas; pretrained extra).

    Args:
        model: as :func:`attnviz.show`: a packaged model's name, a local directory or
            ``.gguf`` file, a transformers model with ``tokenizer``, or a loaded
            :class:`attnviz.pretrained.PretrainedModel`; None for all-MiniLM-L6-v2.
        texts: your own corpus for the natural-text scores (one forward pass per text,
            each cut to 256 tokens); None for the corpus shipped with AttnViz. Induction
            and duplicate-token stay scored on repeated random tokens (a UserWarning
            says so when ``texts`` is given).
        tokenizer: the tokenizer of a transformers model passed as ``model``.
        device: "auto", "cpu" or "cuda".
        cache: read and keep the scores in AttnViz's cache folder ($XDG_CACHE_HOME/attnviz
            or ~/.cache/attnviz, ``head-atlas/``), as the server does.

    Returns:
        A ``pandas.DataFrame`` (columns layer, head, previous_token, induction,
        duplicate_token, first_token, self, entropy; ``attrs["definitions"]``,
        ``attrs["corpus"]``, ``attrs["model"]``, ``attrs["block"]``) when pandas is
        installed, else the :class:`attnviz.pretrained.atlas.HeadScores`.

    Raises:
        AttentionInputError: no such model (``model``), a speech or image model
            (``model``: no score is defined for it yet), an empty text (``texts[i]``).
    """
    from ..pretrained.atlas import cached_head_scores, plan_atlas
    from ..pretrained.atlas import head_scores as compute
    from ..pretrained.loading import default_cache_dir

    plan = plan_atlas(text_model(model, tokenizer), texts, repeat_length=None, device=device)
    if texts is not None:
        warnings.warn(
            "head_scores: induction and duplicate_token are scored on repeated random "
            "tokens, not on your texts (attrs['definitions'][name]['inputs'] says which "
            "inputs each score is of)",
            UserWarning,
            stacklevel=2,
        )
    if cache:
        scores, _ = cached_head_scores(plan, None, default_cache_dir())
    else:
        scores = compute(plan)
    return as_table(scores)


def as_table(scores: Any) -> Any:
    """``scores`` (:class:`attnviz.pretrained.atlas.HeadScores`) as a DataFrame.

    Without pandas, ``scores`` as it is.
    """
    try:
        import pandas as pd  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return scores
    table = pd.DataFrame(scores.to_rows())
    data = scores.to_dict()
    table.attrs.update(
        model=scores.model,
        block=scores.block,
        num_layers=scores.num_layers,
        num_heads=scores.num_heads,
        definitions=data["definitions"],
        corpus=data["corpus"],
        definition_version=scores.definition_version,
        compute_ms=scores.compute_ms,
        top_k=scores.top_k,
        examples=list(scores.examples or ()),
        passages=dict(scores.passages or {}),
    )
    return table


def read_atlas(path: str | Path) -> Any:
    """An atlas file as :func:`head_scores` returns it (a DataFrame with pandas).

    The files: ``attnviz atlas``'s ``atlas.json`` (one process or ``--ray``), and the
    page's "Download atlas JSON"; :func:`atlas_view` and :func:`head_examples` take the
    result.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not JSON, or not an atlas (its missing field named).
    """
    from ..pretrained.atlas import HeadScores

    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
        return as_table(HeadScores.from_dict(data))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{path}: not a head atlas (no {error})") from None


def head_examples(atlas: Any) -> Any:
    """The examples behind an atlas's scores: a row per kept passage, best first per head.

    Columns: score, layer, head, rank (0 the best), passage (its index in the corpus, or
    among the random sequences), value (the passage's own mean of the score; entropy in
    nats), position (the query where the head's term peaks), kind ("corpus" or "random
    tokens"), token (at ``position``, as the page shows it: ``␣cat`` for ``Ġcat``,
    :func:`.display.display_token`), raw_token (as the tokenizer writes it, as the atlas
    files and the API keep it) and text (the passage; None for random tokens).
    :func:`attnviz.pretrained.atlas.shards.example_rows` defines them.

    Args:
        atlas: what :func:`head_scores` or :func:`read_atlas` returned (a DataFrame or
            :class:`attnviz.pretrained.atlas.HeadScores`), or an atlas file's path.

    Returns:
        A ``pandas.DataFrame`` when pandas is installed, else a list of row dicts.

    Raises:
        ValueError: an atlas computed before examples were kept (or not an atlas).
    """
    from ..pretrained.atlas.table import examples_with_texts
    from .display import display_token

    if isinstance(atlas, str | Path):
        atlas = read_atlas(atlas)
    if hasattr(atlas, "attrs"):
        examples, passages = atlas.attrs.get("examples"), atlas.attrs.get("passages", {})
    else:
        examples, passages = getattr(atlas, "examples", None), getattr(atlas, "passages", {})
    if not examples:
        raise ValueError("this atlas keeps no examples (computed before they were kept)")
    rows = [
        {**row, "token": display_token(row["token"]), "raw_token": row["token"]}
        for row in examples_with_texts(examples, passages or {})
    ]
    try:
        import pandas as pd  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return rows
    return pd.DataFrame(rows)


def atlas_data(table: Any) -> dict[str, Any]:
    """The atlas as the page draws it (POST /api/v1/models/heads's JSON).

    From a :func:`head_scores` table: a DataFrame with its ``attrs``, or HeadScores.

    Raises:
        ValueError: a DataFrame without the ``attrs`` :func:`head_scores` sets, or without
            a row for every head (``table.head(10)``: the atlas would show zeros there).
    """
    if hasattr(table, "to_dict") and hasattr(table, "scores"):  # HeadScores
        return {**table.to_dict(), "cached": False}
    attrs = getattr(table, "attrs", {})
    if "definitions" not in attrs or "num_layers" not in attrs:
        raise ValueError("atlas_view takes what attnviz.head_scores returns")
    num_layers, num_heads = int(attrs["num_layers"]), int(attrs["num_heads"])
    heads = {
        (int(layer), int(head)) for layer, head in zip(table["layer"], table["head"], strict=True)
    }
    if len(table) != num_layers * num_heads or len(heads) != num_layers * num_heads:
        raise ValueError(
            f"atlas_view needs every one of the {num_layers} x {num_heads} heads once; the "
            f"table has {len(table)} rows (pass the whole table head_scores returned)"
        )
    scores = {}
    for name in attrs["definitions"]:
        grid = [[0.0] * num_heads for _ in range(num_layers)]
        for layer, head, value in zip(table["layer"], table["head"], table[name], strict=True):
            grid[int(layer)][int(head)] = float(value)
        scores[name] = grid
    return {
        "model": attrs["model"],
        "block": attrs["block"],
        "num_layers": num_layers,
        "num_heads": num_heads,
        "definition_version": attrs["definition_version"],
        "compute_ms": attrs["compute_ms"],
        "scores": scores,
        "definitions": attrs["definitions"],
        "corpus": attrs["corpus"],
        "cached": False,
    }


def atlas_view(table: Any) -> Any:
    """The page's head atlas in a notebook, interactive (the ``notebook`` extra: anywidget).

    One layers x heads map per score and the sortable table of the top heads, drawn by
    the page's own module (static/js/atlas.js); a click on a head sets the widget's
    ``head`` traitlet to ``[layer, head]``, for the next cell::

        atlas = attnviz.atlas_view(attnviz.head_scores(model="SmolLM2-135M-Instruct"))
        atlas  # click a head
        layer, head = atlas.head

    Args:
        table: what :func:`head_scores` or :func:`read_atlas` returned, or an atlas
            file's path (``attnviz atlas``'s ``atlas.json``).

    Returns:
        An :class:`attnviz.views.widget.AtlasWidget`.

    Raises:
        ImportError: anywidget is not installed (the message says how).
        ValueError: not a :func:`head_scores` table.
    """
    try:
        from .widget import AtlasWidget
    except ImportError as error:
        raise ImportError(
            "the interactive atlas needs anywidget: pip install 'attnviz[notebook]'"
        ) from error
    if isinstance(table, str | Path):
        table = read_atlas(table)
    return AtlasWidget(atlas_data(table))

"""A request's sizes checked against the settings' limits (``ATTNVIZ_MAX_*``).

The fixed bounds are in :mod:`.limits` and the request schemas (422); the settings default to
them and can lower them, and a request over a setting is refused here with 413, naming the
field, its value and the limit.
"""

from __future__ import annotations

from typing import Any

from fastapi import status

from ..attention.errors import too_many_numbers
from ..attention.tokens import token_count
from .errors import field_error
from .limits import MAX_TOKENS
from .settings import Settings


def check_limit(field: str, value: int, limit: int, setting: str) -> None:
    """Refuse ``value`` above ``limit``, the setting ``ATTNVIZ_<setting>``.

    Raises:
        HTTPException: 413 naming ``field``, the value and the limit.
    """
    if value > limit:
        raise field_error(
            status.HTTP_413_CONTENT_TOO_LARGE,
            field,
            f"{value} is over the limit of {limit} (ATTNVIZ_{setting})",
        )


def check_limits(request: Any, settings: Settings) -> None:
    """Check every size field the request has against the settings.

    Args:
        request: any request model; fields it lacks are skipped.
        settings: the limits.

    Raises:
        HTTPException: 413 with ``detail[0].loc`` naming the field.
    """
    max_tokens = MAX_TOKENS if settings.max_seq_len is None else settings.max_seq_len
    for field in ("sequences", "targets"):
        batch = getattr(request, field, None)
        if batch is None:
            continue
        check_limit(field, len(batch), settings.max_batch_size, "MAX_BATCH_SIZE")
        for i, sequence in enumerate(batch):
            check_limit(f"{field}[{i}]", token_count(sequence), max_tokens, "MAX_SEQ_LEN")
    sequence = getattr(request, "sequence", None)
    if sequence is not None:
        check_limit("sequence", token_count(sequence), max_tokens, "MAX_SEQ_LEN")
    for field, limit, setting in (
        ("d_model", settings.max_d_model, "MAX_D_MODEL"),
        ("num_heads", settings.max_num_heads, "MAX_NUM_HEADS"),
        ("num_layers", settings.max_layers, "MAX_LAYERS"),
    ):
        value = getattr(request, field, None)
        if value is not None:
            check_limit(field, value, limit, setting)


def check_cells(
    cells: int,
    limit: int,
    field: str = "sequences",
    advice: str = "use fewer or shorter sequences, fewer heads or fewer stages",
) -> None:
    """Refuse a response larger than ``limit`` numbers.

    Args:
        cells: the numbers the response would carry.
        limit: ATTNVIZ_MAX_WEIGHT_CELLS.
        field: the request field the error names.
        advice: what to change, at the end of the message.

    Raises:
        HTTPException: 413 naming ``field``, the size and the limit.
    """
    if cells > limit:
        error = too_many_numbers(field, cells, limit, advice)
        raise field_error(status.HTTP_413_CONTENT_TOO_LARGE, field, error.message)

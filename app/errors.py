"""JSON error responses that are always valid JSON and always name the field."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

import torch
from fastapi import FastAPI, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from app.attention import AttentionInputError
from app.compute import run_within
from app.config import Settings

P = ParamSpec("P")
R = TypeVar("R")

_FIELD_PART = re.compile(r"[^\[\]]+|\[(\d+)\]")


def field_loc(field: str, location: str = "body") -> list[str | int]:
    """``"sequences[3]"`` -> ``["body", "sequences", 3]``, FastAPI's error location form."""
    loc: list[str | int] = [location]
    for match in _FIELD_PART.finditer(field):
        loc.append(int(match.group(1)) if match.group(1) else match.group(0))
    return loc


def field_error(
    status_code: int, field: str, message: str, location: str = "body"
) -> HTTPException:
    """An HTTPException whose detail has the shape of FastAPI's validation errors.

    ``location`` is "body" for JSON fields, "query" for query parameters.
    """
    detail: list[dict[str, Any]] = [
        {"loc": field_loc(field, location), "msg": message, "type": "value_error"}
    ]
    return HTTPException(status_code=status_code, detail=detail)


async def computed(
    settings: Settings, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs
) -> R:
    """Run ``function`` on the compute pool within ``settings.compute_timeout_s``.

    Raises:
        HTTPException: 503 naming the time budget when it runs out.
    """
    try:
        return await run_within(settings.compute_timeout_s, function, *args, **kwargs)
    except TimeoutError as error:
        raise field_error(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            "sequences",
            f"the computation took longer than {settings.compute_timeout_s:g} s "
            "(ATTNVIZ_COMPUTE_TIMEOUT_S); try fewer or shorter sequences",
        ) from error


@contextmanager
def engine_errors(device: str, location: str = "body") -> Iterator[None]:
    """Turn engine errors into HTTP errors: bad input 422 naming the field, out of memory 503.

    Args:
        device: the device the request asked for, named in the 503 message.
        location: where the fields came from, "body" or "query".
    """
    try:
        yield
    except AttentionInputError as error:
        raise field_error(
            status.HTTP_422_UNPROCESSABLE_CONTENT, error.field, error.message, location
        ) from error
    except torch.OutOfMemoryError as error:
        raise field_error(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            "device",
            f"the {device} device ran out of memory; try a smaller request",
            location,
        ) from error


def _json_safe(value: Any) -> bool:
    """True when ``value`` is plain JSON with finite numbers only."""
    if value is None or isinstance(value, str | bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(_json_safe(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_safe(v) for k, v in value.items())
    return False


async def validation_error_handler(request: Request, error: Exception) -> JSONResponse:
    """422 with FastAPI's ``detail`` list of {loc, msg, type, input}.

    The offending input is echoed only where it is finite JSON: a NaN or Infinity
    sent in a numeric field would otherwise make the error response itself
    unserialisable (a 500).
    """
    assert isinstance(error, RequestValidationError)
    detail = []
    for item in error.errors():
        entry: dict[str, Any] = {
            "loc": list(item.get("loc", ())),
            "msg": str(item.get("msg", "")),
            "type": str(item.get("type", "")),
        }
        if _json_safe(item.get("input")):
            entry["input"] = item.get("input")
        detail.append(entry)
    return JSONResponse(
        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT, content={"detail": detail}
    )


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers above on ``app``."""
    app.add_exception_handler(RequestValidationError, validation_error_handler)

"""JSON error responses that are always valid JSON and always name the field."""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse


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

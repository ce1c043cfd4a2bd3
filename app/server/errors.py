"""JSON error responses that are always valid JSON and always name the field."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import torch
from fastapi import FastAPI, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..attention import AttentionInputError
from ..attention.errors import InputTooLargeError, UnsupportedInputError

_FIELD_PART = re.compile(r"[^\[\]]+|\[(\d+)\]")


ERROR_RESPONSES: Final[dict[int | str, dict[str, Any]]] = {
    400: {"description": "The body is not JSON text (e.g. invalid UTF-8)."},
    413: {
        "description": "Over a size limit (ATTNVIZ_MAX_*) or the memory the request would "
        "need; `detail[].loc` names the field."
    },
    415: {
        "description": "An upload in a format not accepted (images: PNG, JPEG, WebP, GIF, "
        "BMP); `detail[].loc` names the field."
    },
    422: {"description": "Invalid input; `detail[].loc` names the field."},
    503: {
        "description": "The device ran out of memory, or the compute time budget ran out "
        "(the computation is stopped); `detail[].loc` names the field whose size it is."
    },
}
"""The error answers every API route documents in /openapi.json."""


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


@contextmanager
def engine_errors(device: str, location: str = "body") -> Iterator[None]:
    """Turn engine errors into HTTP errors naming the field.

    Bad input is a 422, a format not accepted a 415, over a memory budget a 413, out of
    device memory a 503.

    Args:
        device: the device the request asked for, named in the 503 message.
        location: where the fields came from, "body" or "query".
    """
    try:
        yield
    except AttentionInputError as error:
        code = status.HTTP_422_UNPROCESSABLE_CONTENT
        if isinstance(error, UnsupportedInputError):
            code = status.HTTP_415_UNSUPPORTED_MEDIA_TYPE
        elif isinstance(error, InputTooLargeError):
            code = status.HTTP_413_CONTENT_TOO_LARGE
        raise field_error(code, error.field, error.message, location) from error
    except torch.OutOfMemoryError as error:
        raise field_error(
            status.HTTP_503_SERVICE_UNAVAILABLE, "device", out_of_memory(device), location
        ) from error


def out_of_memory(device: str) -> str:
    """The 503's message after a device ran out of memory; empties torch's CUDA cache first.

    What the failed request allocated is free once its tensors are gone; emptying the
    caching allocator hands it back to the device, so that the next request (and other
    processes) find it free and the server stays healthy.
    """
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return (
        f"the {device} device ran out of memory (its cache was emptied, the server goes on); "
        "try a smaller request"
    )


ECHO_MAX_CHARS: Final = 200
"""The longest string input echoed back in a 422."""


def _encodable(text: str) -> bool:
    """True when ``text`` is valid Unicode, i.e. UTF-8 can encode it (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _printable(text: str) -> str:
    """``text`` with any lone surrogate written as its escape, so that it can be encoded."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _echoable(value: Any) -> bool:
    """True for an input worth echoing in a 422: a scalar that is finite, valid JSON.

    Lists and objects are never echoed (they can be megabytes or nested thousands
    deep); nor are NaN/Infinity, which JSON cannot hold, nor strings that are long
    or not valid Unicode.
    """
    if value is None or isinstance(value, bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return len(value) <= ECHO_MAX_CHARS and _encodable(value)
    return False


def _plain(message: str) -> str:
    """A validator's message without pydantic's "Value error, " prefix."""
    return message.removeprefix("Value error, ")


async def validation_error_handler(request: Request, error: Exception) -> JSONResponse:
    """422 with FastAPI's ``detail`` list of {loc, msg, type, input}.

    A request schema's rule between fields raises an
    :class:`~attnviz.attention.errors.AttentionInputError`; its entry names that field
    (``["body", "head_index"]``) with the rule's message, as the engine's errors do.

    The offending input is echoed only where it is a short, finite, valid JSON
    scalar (:func:`_echoable`): a NaN or a lone surrogate would make the error
    response itself unserialisable (a 500), and a huge list is not worth sending back.
    """
    assert isinstance(error, RequestValidationError)
    detail = []
    for item in error.errors():
        loc = list(item.get("loc", ()))
        msg = str(item.get("msg", ""))
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, AttentionInputError):  # a rule between fields names its field
            loc = [*loc, *field_loc(cause.field, "")[1:]]
            msg = cause.message
        entry: dict[str, Any] = {
            "loc": [part if isinstance(part, int) else _printable(str(part)) for part in loc],
            "msg": _printable(_plain(msg)),
            "type": str(item.get("type", "")),
        }
        if _echoable(item.get("input")):
            entry["input"] = item.get("input")
        detail.append(entry)
    return JSONResponse(
        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT, content={"detail": detail}
    )


async def http_error_handler(request: Request, error: Exception) -> Response:
    """Every HTTP error in FastAPI's ``detail`` list form, so that it names a place.

    FastAPI's own errors carry a string (``"There was an error parsing the body"``
    for a body nested too deep to parse, ``"Not Found"``); they become
    ``[{"loc": ["body"] or ["path"], "msg": ..., "type": ...}]``. Details that are
    already lists pass through unchanged.
    """
    assert isinstance(error, StarletteHTTPException)
    detail: Any = error.detail
    if not isinstance(detail, list):
        where = "body" if error.status_code in (400, 413, 415) else "path"
        detail = [{"loc": [where], "msg": _printable(str(detail)), "type": "http_error"}]
    if error.status_code in (204, 304):
        return Response(status_code=error.status_code, headers=error.headers)
    return JSONResponse(
        status_code=error.status_code, content={"detail": detail}, headers=error.headers
    )


def _lone_surrogate_at(value: Any) -> list[str | int] | None:
    """Where in parsed JSON a string or key holds a lone UTF-16 surrogate, or None.

    Walks iteratively (no recursion, whatever the nesting).
    """
    stack: list[tuple[list[str | int], Any]] = [([], value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if not _encodable(item):
                return path
        elif isinstance(item, list):
            stack.extend(([*path, i], child) for i, child in enumerate(item))
        elif isinstance(item, dict):
            for key, child in item.items():
                if not _encodable(key):
                    return [*path, _printable(key)]
                stack.append(([*path, key], child))
    return None


FORM_TYPES: Final = ("multipart/form-data", "application/x-www-form-urlencoded")
"""Bodies that are forms, not JSON (POST /api/v1/speech and /api/v1/vision)."""


async def require_valid_unicode(request: Request) -> None:
    r"""Refuse any request whose JSON body or query holds a lone UTF-16 surrogate (422).

    JSON can spell a lone surrogate (``"\\ud800"``), which Python then holds as a
    ``str`` that cannot be encoded: as a token label it breaks the response, echoed
    in an error it breaks the error. This dependency runs for every route (it is
    the app's global dependency) before the body is validated. The 422 names the
    field and never echoes the input. Bodies without a ``\\u`` escape of a surrogate
    (``\\ud800``-``\\udfff``) are not parsed again.

    Raises:
        HTTPException: 422, ``loc`` the field holding the surrogate.
    """
    for key, value in request.query_params.multi_items():
        if not (_encodable(key) and _encodable(value)):
            raise field_error(
                status.HTTP_422_UNPROCESSABLE_CONTENT, _printable(key), _NOT_UNICODE, "query"
            )
    if request.method not in ("POST", "PUT", "PATCH"):
        return
    if request.headers.get("content-type", "").startswith(FORM_TYPES):
        return  # a form (a file upload), already read by its route: no JSON to check
    body = await request.body()
    if not _SURROGATE_ESCAPE.search(body):
        return
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return  # not JSON: FastAPI's own parse error answers it
    where = _lone_surrogate_at(parsed)
    if where is not None:
        detail: list[dict[str, Any]] = [
            {"loc": ["body", *where], "msg": _NOT_UNICODE, "type": "unicode_error"}
        ]
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=detail)


_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_NOT_UNICODE: Final = (
    "is not valid Unicode: it holds a lone UTF-16 surrogate (\\ud800-\\udfff escape "
    "without its pair); send UTF-8 text"
)


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers above on ``app``."""
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, http_error_handler)

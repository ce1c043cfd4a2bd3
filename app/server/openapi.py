"""The OpenAPI document, with integer bounds written as integers.

FastAPI passes the schema through its own OpenAPI model, whose ``maximum`` and
``minimum`` are typed ``float``: an integer bound such as the seed's 2**63 - 1 comes
out as 9.223372036854776e+18, which is 2**63, one more than the server accepts, so a
client generating "valid" requests from the schema would send a seed the server
refuses. :func:`exact_integer_bounds` puts pydantic's own integer bounds back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

_BOUNDS = ("maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum")


def exact_integer_bounds(node: Any, exact: dict[float, int]) -> None:
    """Rewrite, in place, every float bound of an integer schema as the integer it was.

    Args:
        node: an OpenAPI document or any part of it (dicts and lists, walked
            iteratively).
        exact: float(bound) -> bound for the integer bounds the app declares; a float
            bound not in it is written as ``int(bound)`` when it is whole.
    """
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("type") == "integer":
                for key in _BOUNDS:
                    value = item.get(key)
                    if isinstance(value, float) and value.is_integer():
                        item[key] = exact.get(value, int(value))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _integer_bounds(node: Any, found: dict[float, int]) -> None:
    """Collect float(bound) -> bound for every integer bound in a pydantic JSON schema."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in _BOUNDS:
                value = item.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    found[float(value)] = value
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def install_openapi(app: FastAPI, schemas: Iterable[type[BaseModel]]) -> None:
    """Make ``app.openapi()`` return FastAPI's document with exact integer bounds.

    Args:
        app: the application.
        schemas: the request bodies whose integer bounds are to be kept exact.
    """
    generate = app.openapi
    exact: dict[float, int] = {}
    for schema in schemas:
        _integer_bounds(schema.model_json_schema(), exact)

    def openapi() -> dict[str, Any]:
        fresh = app.openapi_schema is None
        document = generate()  # FastAPI caches it in app.openapi_schema
        if fresh:
            exact_integer_bounds(document, exact)
        return document

    app.openapi = openapi  # type: ignore[method-assign]

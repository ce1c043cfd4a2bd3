"""ASGI middleware: body size limit, security headers, one JSON log line per request."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

access_log = logging.getLogger("attnviz.access")

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'"
)
"""The page may run only this server's scripts (Plotly.js included): no inline script,
no CDN. Plotly sets inline styles, hence style-src 'unsafe-inline'; its toImage (Download
PNG, the modebar's camera) draws the figure's SVG through a ``blob:`` image, hence
img-src blob: (a blob URL is made by the page itself and cannot name another origin)."""


def docs_content_security_policy(inline_scripts: list[str]) -> str:
    """The policy of /docs and /redoc: only this server, plus the inline scripts given.

    FastAPI's Swagger UI page starts Swagger UI with one inline ``<script>``; it is
    allowed by its SHA-256 hash (CSP Level 2), so nothing else inline can run. ReDoc
    runs its search index in a worker made from its own code as a ``blob:`` URL, hence
    worker-src blob:. Everything else, images and fonts included, comes from here only
    (ReDoc's hard-coded Redocly logo from its CDN is blocked, and ReDoc hides it).

    Args:
        inline_scripts: the text of each inline script of the page, exactly as served.

    Returns:
        The Content-Security-Policy header value.
    """
    hashes = "".join(
        f" 'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'"
        for s in inline_scripts
    )
    return (
        f"default-src 'self'; script-src 'self'{hashes}; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self'; connect-src 'self'; worker-src 'self' blob:; "
        "object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
    )


def _too_large(limit: int, setting: str) -> bytes:
    return orjson.dumps(
        {
            "detail": [
                {
                    "loc": ["body"],
                    "msg": f"the request body is over the limit of {limit} bytes ({setting})",
                    "type": "value_error",
                }
            ]
        }
    )


class BodyLimitMiddleware:
    """Refuse request bodies over ``max_bytes`` with 413 before the app parses them.

    The ``upload_paths`` (file uploads) have their own limit, ``upload_bytes``.

    A Content-Length over the limit is refused at once. A body without one
    (chunked) is read up to the limit first and refused as soon as it passes it;
    a body within the limit is then handed to the app as it came.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        upload_bytes: int | None = None,
        upload_paths: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.upload_bytes = max_bytes if upload_bytes is None else upload_bytes
        self.upload_paths = upload_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: D102
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = scope.get("path", "") in self.upload_paths
        limit = self.upload_bytes if upload else self.max_bytes
        setting = "ATTNVIZ_MAX_UPLOAD_BYTES" if upload else "ATTNVIZ_MAX_BODY_BYTES"
        headers = dict(scope.get("headers", []))
        declared = headers.get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > limit:
                await self._refuse(send, limit, setting)
                return
            await self.app(scope, receive, send)  # the server enforces the declared length
            return
        messages: list[Message] = []
        seen = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            seen += len(message.get("body", b""))
            if seen > limit:
                await self._refuse(send, limit, setting)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send, limit: int, setting: str) -> None:
        body = _too_large(limit, setting)
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class SecurityHeadersMiddleware:
    """Add X-Content-Type-Options, Referrer-Policy and, on HTML, the CSP.

    HTML that sets its own Content-Security-Policy (the API docs pages) keeps it; any
    other HTML gets :data:`CONTENT_SECURITY_POLICY`.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: D102
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = dict(headers)
                headers.append((b"x-content-type-options", b"nosniff"))
                headers.append((b"referrer-policy", b"no-referrer"))
                if names.get(b"content-type", b"").startswith(b"text/html") and (
                    b"content-security-policy" not in names
                ):
                    headers.append((b"content-security-policy", CONTENT_SECURITY_POLICY.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class AccessLogMiddleware:
    """One JSON line per request on the ``attnviz.access`` logger.

    Fields: method, path, status, duration_ms, request_bytes, response_bytes. No
    bodies, no query strings, no headers: nothing secret reaches the log.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: D102
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        record: dict[str, Any] = {
            "method": scope["method"],
            "path": scope["path"],
            "status": 500,
            "request_bytes": 0,
            "response_bytes": 0,
        }

        async def counting_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                record["request_bytes"] += len(message.get("body", b""))
            return message

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                record["status"] = message["status"]
            elif message["type"] == "http.response.body":
                record["response_bytes"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, counting_receive, counting_send)
        finally:
            record["duration_ms"] = round((time.perf_counter() - start) * 1000, 2)
            access_log.info(json.dumps(record))

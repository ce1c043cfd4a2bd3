"""The error box for answers that are not the API's (issue 53, finding 7): a 5xx with no
JSON (Ray Serve's proxy answers a plain-text 500 for a request whose replica was killed)
says the server stopped and to try again; the API's own errors read as before."""

from __future__ import annotations

from typing import Any


def test_a_server_error_without_the_apis_json_says_to_try_again(page: Any, server_url: str) -> None:
    page.goto(server_url + "/")
    texts = page.evaluate(
        """async () => {
          const { errorText } = await import('/static/js/lib/requests.js');
          return [
            errorText(null, 500),
            errorText(null, 502),
            errorText({ detail: [{ loc: ['body', 'texts', 0], msg: 'too long' }] }, 413),
            errorText({ detail: 'Not Found' }, 404),
            errorText(null, 404),
          ];
        }"""
    )
    for text, status in zip(texts[:2], (500, 502), strict=True):
        assert text.startswith(f"HTTP {status}: the server failed before it answered")
        assert "Try again" in text
    assert texts[2:] == ["texts[0]: too long", "Not Found", "HTTP 404"]
    assert not page.errors

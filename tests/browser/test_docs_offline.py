"""/docs and /redoc work offline: Swagger UI and ReDoc come from this server.

Every request to anything but the test server is aborted and recorded; the pages
must still render the API's operations, under their own CSP, and must not even try
to reach outside.
"""

import json
import urllib.request
from urllib.parse import urlsplit

import pytest

from tests.browser.strict import strict_page
from tests.support.browser import HANG_MS

pytestmark = pytest.mark.browser

REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
SUMMARY = "Per-head attention weights of a batch"  # POST /api/v1/attention


def offline(page, outside: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Abort every request that does not go to 127.0.0.1, recording its URL."""

    def handle(route) -> None:  # type: ignore[no-untyped-def]
        url = route.request.url
        if urlsplit(url).hostname == "127.0.0.1" or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    page.route("**/*", handle)


def test_swagger_ui_renders_the_operations_offline(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    outside: list[str] = []
    with strict_page(browser) as page:
        offline(page, outside)
        response = page.goto(server_url + "/docs")
        policy = response.headers["content-security-policy"]
        assert "script-src 'self' 'sha256-" in policy and "default-src 'self'" in policy
        operation = page.locator(".opblock.opblock-post").filter(
            has=page.locator('[data-path="/api/v1/attention"]')
        )
        operation.wait_for(timeout=HANG_MS)
        assert SUMMARY in operation.text_content()
        # Every operation of the schema is listed (12: speech and vision included).
        with urllib.request.urlopen(server_url + "/openapi.json") as answer:
            paths = json.load(answer)["paths"]
        operations = sum(len(methods) for methods in paths.values())
        assert operations >= 12
        assert page.locator(".opblock").count() == operations
        assert page.locator('.opblock [data-path="/api/v1/speech"]').count() == 1
        # Opening one shows its example body: the schema was read and rendered.
        operation.locator(".opblock-summary").click()
        page.locator(
            ".opblock.is-open .body-param__example, .opblock.is-open .highlight-code"
        ).first.wait_for()
        assert page.errors == []
        assert page.csp_violations == []
    assert outside == []


def test_redoc_renders_the_operations_offline(browser, server_url) -> None:  # type: ignore[no-untyped-def]
    outside: list[str] = []
    with strict_page(browser) as page:
        offline(page, outside)
        response = page.goto(server_url + "/redoc")
        assert "default-src 'self'" in response.headers["content-security-policy"]
        menu = page.locator(".menu-content")
        # The operations sit in collapsed tag groups of the menu: attached, not visible.
        menu.get_by_text(SUMMARY).wait_for(state="attached", timeout=HANG_MS)
        assert "The pretrained models on offer" in menu.text_content()
        # The operation's section is rendered too, with its path.
        assert page.get_by_text("/api/v1/attention", exact=True).count() >= 1
        assert page.errors == []
        # ReDoc hard-codes its "API docs by Redocly" logo from its CDN. The policy stops
        # that image before any request leaves (the route above sees none), and ReDoc
        # drops the image on the error. Nothing else is blocked.
        assert [v for v in page.csp_violations if REDOC_LOGO not in v] == []
        assert page.locator("img[alt='redocly logo']").count() == 0
    assert outside == []


def test_docs_assets_are_only_the_named_files(server_url) -> None:  # type: ignore[no-untyped-def]
    import urllib.error
    import urllib.request

    with urllib.request.urlopen(server_url + "/static/vendor/docs/swagger-ui-bundle.js") as r:
        assert r.headers["content-type"].startswith("text/javascript")
        assert b"SwaggerUIBundle" in r.read()
    for name in ("core.py", "..%2Fcore.py", "RECORD"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(server_url + "/static/vendor/docs/" + name)
        assert refused.value.code == 404

import os
from collections.abc import Iterator

import pytest

from tests.browser.support import CHROMIUM_ARGS, chromium_path
from tests.live_server import live_server


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    with live_server() as url:
        yield url


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    executable = chromium_path()
    if executable is None:
        message = "Debian's chromium is not installed (make browser installs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}; with CI=true the browser tests must run")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser, server_url):  # type: ignore[no-untyped-def]
    # Playwright's wait_for_function evaluates strings, which the page's CSP forbids;
    # test_page_works_under_its_content_security_policy runs with the CSP on.
    context = browser.new_context(viewport={"width": 1400, "height": 950}, bypass_csp=True)
    context.set_default_timeout(10_000)
    page = context.new_page()
    page.errors = []  # uncaught JS errors, checked by the tests
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    yield page
    context.close()

from collections.abc import Iterator

import pytest
from attnviz.devtools import live_server


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    with live_server() as url:
        yield url


@pytest.fixture
def page(browser, server_url):  # type: ignore[no-untyped-def]
    # Playwright's wait_for_function evaluates strings, which the page's CSP forbids;
    # test_page_works_under_its_content_security_policy runs with the CSP on.
    context = browser.new_context(viewport={"width": 1400, "height": 950}, bypass_csp=True)
    context.set_default_timeout(60_000)  # a bound on a hang, not on speed
    page = context.new_page()
    page.errors = []  # uncaught JS errors, checked by the tests
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    yield page
    context.close()

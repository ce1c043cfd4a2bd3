from collections.abc import Iterator

import pytest
from attnviz.devtools import live_process

from tests.support.browser import HANG_MS


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    # The bounds are on hangs: a busy machine (make test-busy) takes minutes to start and
    # over the default 60 s of ATTNVIZ_COMPUTE_TIMEOUT_S for the 3,000-token views.
    with live_process(timeout_s=300, env={"ATTNVIZ_COMPUTE_TIMEOUT_S": "600"}) as (url, _):
        yield url


@pytest.fixture
def page(browser, server_url):  # type: ignore[no-untyped-def]
    # Playwright's wait_for_function evaluates strings, which the page's CSP forbids;
    # test_page_works_under_its_content_security_policy runs with the CSP on.
    context = browser.new_context(viewport={"width": 1400, "height": 950}, bypass_csp=True)
    context.set_default_timeout(HANG_MS)  # a bound on a hang, not on speed
    page = context.new_page()
    page.errors = []  # uncaught JS errors, checked by the tests
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    yield page
    context.close()

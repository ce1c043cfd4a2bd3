from collections.abc import Iterator

import pytest
from attnviz.devtools import live_process

from tests.support.browser import new_page, requests_report


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
    # new_page: HANG_MS as a bound on a hang, page.errors (uncaught JS errors, checked by
    # the tests) and page.requests (the failed test's report lists them)
    page = new_page(browser, 1400, 950)
    yield page
    page.context.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):  # type: ignore[no-untyped-def]
    """A failed browser test's report says what its page asked the server and what came
    back (a wait that ran out on a busy machine: was the server still computing, or had
    the page its answers?), and the page's uncaught errors."""
    report = yield
    page = item.funcargs.get("page") if hasattr(item, "funcargs") else None
    if report.when == "call" and report.failed and hasattr(page, "requests"):
        errors = "\n".join(page.errors) or "(none)"
        report.sections.append(
            ("the page's API requests", f"{page.url}\n{requests_report(page.requests)}")
        )
        report.sections.append(("the page's uncaught errors", errors))
    return report

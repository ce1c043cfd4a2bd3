from collections.abc import Iterator

import pytest
from attnviz.devtools import live_process

from tests.support import browser as support
from tests.support.browser import close_page, new_page

SERVER: dict[str, object] = {}
"""The session's server: its ``url`` and ``log`` (its output), for a failed test's report."""


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # The bounds are on hangs: a busy machine (make test-busy) takes minutes to start and
    # over the default 60 s of ATTNVIZ_COMPUTE_TIMEOUT_S for the 3,000-token views.
    log = tmp_path_factory.mktemp("server") / "server.log"
    env = {"ATTNVIZ_COMPUTE_TIMEOUT_S": "600"}
    with live_process(timeout_s=300, env=env, log_path=log) as (url, _):
        SERVER.update(url=url, log=log)
        yield url
    SERVER.clear()


@pytest.fixture(autouse=True)
def pages_of_this_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """The failure report lists the pages this test opens, not those of the tests before;
    the pages it left open in the shared context are closed after it."""
    support.PAGES.clear()
    yield
    if "browser" in request.fixturenames:
        support.close_shared_pages(request.getfixturevalue("browser"))


@pytest.fixture
def page(browser, server_url):  # type: ignore[no-untyped-def]
    # Playwright's wait_for_function evaluates strings, which the page's CSP forbids;
    # test_page_works_under_its_content_security_policy runs with the CSP on.
    # new_page: HANG_MS as a bound on a hang, page.errors (uncaught JS errors, checked by
    # the tests), page.requests and console errors (the failed test's report lists them)
    page = new_page(browser, 1400, 950)
    yield page
    close_page(page)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):  # type: ignore[no-untyped-def]
    """A failed browser test's report says, for each page it opened, what the page asked
    the server and what came back, and its errors; and what the server was doing
    (:func:`tests.support.browser.failure_report`): a wait that ran out on a busy machine,
    was the server still computing, or had the page its answers?"""
    report = yield
    if report.when == "call" and report.failed:
        url, log = SERVER.get("url"), SERVER.get("log")
        for title, text in support.failure_report(url, log):  # type: ignore[arg-type]
            report.sections.append((title, text))
    return report

"""A browser context that enforces the pages' own Content-Security-Policy.

The shared ``page`` fixture sets bypass_csp=True (Playwright's wait_for_function
evaluates strings, which the policy forbids). Tests of what the policy allows or
blocks use this context instead, and wait only on selectors, downloads or
attributes, never on evaluated strings.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support.browser import close_page, opened_page


@contextmanager
def strict_page(browser: Any) -> Iterator[Any]:
    """A new page whose context enforces CSP; records errors and CSP reports.

    The page gets ``errors`` (uncaught JS errors) and ``requests``
    (:func:`~tests.support.browser.opened_page`), and ``csp_violations`` (console messages
    naming the Content Security Policy), a list of strings.
    """
    page = opened_page(browser, 1400, 950, accept_downloads=True)
    page.csp_violations = []
    page.on(
        "console",
        lambda message: (
            page.csp_violations.append(message.text)
            if "Content Security Policy" in message.text
            else None
        ),
    )
    try:
        yield page
    finally:
        close_page(page)

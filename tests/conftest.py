import os
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.browser.support import CHROMIUM_ARGS, chromium_path


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app()) as test_client:
        yield test_client


# One Playwright per test session (a second sync Playwright in the same thread fails):
# shared by the browser tests and the export test.
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

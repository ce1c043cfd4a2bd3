import math
from typing import Any

import pytest
import torch
from attnviz.attention import LayerConfig
from attnviz.attention.lessons import decoding_experiment
from attnviz.attention.transformer import compute_transformer
from attnviz.attention.tutorials import TUTORIAL_BATCH, TUTORIAL_TARGETS
from attnviz.server.limits import (
    MAX_SCALING_CASES,
    MAX_SCALING_D_K,
    MAX_SCALING_LENGTH,
    MAX_SCALING_SAMPLES,
    MAX_SCALING_VALUES,
)
from attnviz.server.settings import Settings, get_settings
from fastapi.testclient import TestClient


def test_attention_include_returns_stages_with_null_for_masked_scores(client: TestClient) -> None:
    body = {
        "sequences": [[1, 2, 3], [4, 0, 0]],
        "mask": "padding_causal",
        "mask_fill": -1e9,
        "include": ["q", "k", "v", "scores", "scaled_scores", "masked_scores", "head_output"],
    }
    response = client.post("/api/v1/attention", json=body)
    assert response.status_code == 200, response.text
    data = response.json()
    stages = data["stages"]
    assert set(stages) == set(body["include"])
    assert torch.tensor(stages["q"]).shape == (2, 2, 3, 4)
    masked = stages["masked_scores"]
    for b in range(2):
        for i in range(3):
            for j in range(3):
                hidden = not data["attn_mask"][b][i][j]
                # Masked cells are null, not the fill value -1e9.
                assert (masked[b][0][i][j] is None) == hidden
                if not hidden:
                    assert masked[b][0][i][j] == stages["scaled_scores"][b][0][i][j]
    assert b"-1000000000" not in response.content.split(b'"masked_scores"')[1]


def test_attention_defaults_return_weights_only(client: TestClient) -> None:
    data = client.post("/api/v1/attention", json={"sequences": [[1, 2]]}).json()
    assert data["stages"] == {}
    assert data["dropped_weights"] is None
    assert data["scale"] is True and data["dropout"] == 0.0
    summary = data["head_summary"]
    assert len(summary["entropy_bits"]) == 1 and len(summary["entropy_bits"][0]) == 2
    assert summary["mean_weights"] is None
    with_mean = client.post(
        "/api/v1/attention", json={"sequences": [[1, 2]], "include": ["head_mean"]}
    )
    assert torch.tensor(with_mean.json()["head_summary"]["mean_weights"]).shape == (1, 2, 2)


def test_attention_scale_and_dropout(client: TestClient) -> None:
    body = {
        "sequences": TUTORIAL_BATCH,
        "scale": False,
        "dropout": 0.5,
        "dropout_seed": 3,
        "verify": True,
    }
    data = client.post("/api/v1/attention", json=body).json()
    assert data["scale"] is False
    assert data["verification"]["matches"] is True
    weights, dropped = torch.tensor(data["weights"]), torch.tensor(data["dropped_weights"])
    kept = dropped != 0
    torch.testing.assert_close(dropped[kept], weights[kept] * 2)


def test_scaling_lesson(client: TestClient) -> None:
    response = client.post("/api/v1/lessons/scaling", json={"seed": 1})
    assert response.status_code == 200
    cases = response.json()["cases"]
    assert [c["d_k"] for c in cases] == [8, 64, 512]
    assert cases[2]["unscaled"]["mean_entropy_bits"] < cases[0]["unscaled"]["mean_entropy_bits"]
    assert all(c["scaled"]["mean_entropy_bits"] > 3 for c in cases)


def test_the_scaling_lesson_bounds_the_values_it_draws_at_once(client: TestClient) -> None:
    """Each field within its own bound could ask for 1.07e9 values of Q (1.9 GB, 19 CPU-s):
    the product num_samples x length x sum(d_k_values) has a bound of its own."""
    url = "/api/v1/lessons/scaling"
    largest = {"d_k_values": [MAX_SCALING_D_K] * MAX_SCALING_CASES, "length": MAX_SCALING_LENGTH,
               "num_samples": MAX_SCALING_SAMPLES}  # fmt: skip
    at_bound = {
        "d_k_values": [MAX_SCALING_VALUES // (128 * 256)],
        "length": 128,
        "num_samples": 256,
    }
    over = {**at_bound, "d_k_values": [at_bound["d_k_values"][0] + 1]}
    for body in (largest, over):
        response = client.post(url, json=body)
        assert response.status_code == 422, response.text
        (error,) = response.json()["detail"]
        assert error["loc"] == ["body", "num_samples"], error
        drawn = body["num_samples"] * body["length"] * sum(body["d_k_values"])
        assert (
            f"{drawn:,} values drawn" in error["msg"] and f"{MAX_SCALING_VALUES:,}" in error["msg"]
        )
    response = client.post(url, json={**at_bound, "bins": 10})
    assert response.status_code == 200, response.text
    (case,) = response.json()["cases"]
    assert case["d_k"] == 1024 and sum(case["scaled"]["counts"]) == 256 * 128 * 128


def test_decoding_lesson_matches_the_engine(client: TestClient) -> None:
    response = client.post("/api/v1/lessons/decoding", json={"sequence": "a b c d e", "seed": 4})
    assert response.status_code == 200
    data = response.json()
    expected = decoding_experiment("a b c d e", LayerConfig(seed=4))
    assert data["labels"] == ["a", "b", "c", "d", "e"]
    assert data["masked_max_abs_diff"] < 1e-6
    assert data["unmasked_max_abs_diff"] > 1e-3
    assert torch.equal(torch.tensor(data["step_weights"]), expected.step_weights)


def test_parameters_lesson(client: TestClient) -> None:
    data = client.get("/api/v1/lessons/parameters", params={"d_model": 64, "num_heads": 8}).json()
    assert data["total"] == 4 * 64 * 64 + 4 * 64
    assert [r["num_heads"] for r in data["by_num_heads"]] == [1, 2, 4, 8, 16, 32, 64]
    assert {r["total"] for r in data["by_num_heads"]} == {data["total"]}
    assert data["rows"][0] == {"name": "W_q.weight", "shape": [64, 64], "count": 4096}


def test_transformer_lesson_matches_the_engine(client: TestClient) -> None:
    body = {"sequences": TUTORIAL_BATCH, "targets": TUTORIAL_TARGETS, "num_layers": 2, "seed": 5}
    response = client.post("/api/v1/lessons/transformer", json=body)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["shape"] == [2, 5, 2, 10, 10]
    assert data["d_ff"] == 16  # 2 * d_model by default, as in tutorial 004
    expected = compute_transformer(
        TUTORIAL_BATCH, LayerConfig(seed=5), targets=TUTORIAL_TARGETS, num_layers=2
    )
    assert torch.equal(torch.tensor(data["cross_weights"]), expected.cross_weights)
    assert data["num_parameters"] == expected.num_parameters
    assert all(math.isfinite(w) for w in torch.tensor(data["encoder_weights"]).flatten().tolist())


@pytest.mark.parametrize(
    ("method", "url", "payload", "loc"),
    [
        ("post", "/api/v1/lessons/scaling", {"d_k_values": [0]}, ["body", "d_k_values", 0]),
        ("post", "/api/v1/lessons/scaling", {"length": 1000}, ["body", "length"]),
        (
            "post",
            "/api/v1/lessons/decoding",
            {"sequence": list(range(1, 130))},
            ["body", "sequence"],
        ),
        (
            "post",
            "/api/v1/lessons/decoding",
            {"sequence": [1, 2], "num_heads": 3},
            ["body", "num_heads"],
        ),
        ("post", "/api/v1/lessons/decoding", {"sequence": ""}, ["body", "sequence"]),
        (
            "get",
            "/api/v1/lessons/parameters",
            {"d_model": 10, "num_heads": 3},
            ["query", "num_heads"],
        ),
        ("get", "/api/v1/lessons/parameters", {"d_model": 0}, ["query", "d_model"]),
        (
            "post",
            "/api/v1/lessons/transformer",
            {"sequences": [[1]], "num_layers": 13},
            ["body", "num_layers"],
        ),
        (
            "post",
            "/api/v1/lessons/transformer",
            {"sequences": [[1]], "positional_encoding": "x"},
            ["body", "positional_encoding"],
        ),
        (
            "post",
            "/api/v1/attention",
            {"sequences": [[1]], "include": ["logits"]},
            ["body", "include", 0],
        ),
        ("post", "/api/v1/attention", {"sequences": [[1]], "dropout": 1}, ["body", "dropout"]),
    ],
)
def test_lesson_errors_are_422_naming_the_field(
    client: TestClient, method: str, url: str, payload: dict[str, Any], loc: list[Any]
) -> None:
    if method == "get":
        response = client.get(url, params=payload)
    else:
        response = client.post(url, json=payload)
    assert response.status_code == 422, response.text
    locs = [d["loc"] for d in response.json()["detail"]]
    assert any(found[: len(loc)] == loc for found in locs), locs


def test_transformer_and_stages_respect_the_cell_limit(client: TestClient) -> None:
    client.app.dependency_overrides[get_settings] = lambda: Settings(max_weight_cells=2000)
    body = {"sequences": TUTORIAL_BATCH, "num_layers": 3}  # 3 * 5 * 2 * 10 * 10 = 3000
    assert client.post("/api/v1/lessons/transformer", json=body).status_code == 413
    # 1000 weights fit; adding three score stages (3000) does not.
    assert client.post("/api/v1/attention", json={"sequences": TUTORIAL_BATCH}).status_code == 200
    staged = {"sequences": TUTORIAL_BATCH, "include": ["scores", "scaled_scores", "masked_scores"]}
    assert client.post("/api/v1/attention", json=staged).status_code == 413


def test_every_lesson_is_documented_with_an_example(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    for path in (
        "/api/v1/lessons/scaling",
        "/api/v1/lessons/decoding",
        "/api/v1/lessons/parameters",
        "/api/v1/lessons/transformer",
    ):
        assert path in schema["paths"], path
    components = schema["components"]["schemas"]
    assert components["DecodingRequest"]["examples"][0]["sequence"]
    assert components["TransformerRequest"]["examples"][1]["targets"] == TUTORIAL_TARGETS
    assert "include" in components["AttentionRequest"]["examples"][1]

"""Compact encodings, display downsampling and selection of the attention API."""

from typing import Any

import numpy as np
import pytest
import torch
from attnviz.attention import LayerConfig, compute_attention
from attnviz.attention.tutorials import TUTORIAL_BATCH, TUTORIAL_TARGETS
from attnviz.server.schemas import AttentionResponse, TransformerResponse
from fastapi.testclient import TestClient
from torch.nn import functional as F  # noqa: N812

from tests.support.api import decode

URL = "/api/v1/attention"


def post(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(URL, json=body)
    assert response.status_code == 200, response.text
    AttentionResponse.model_validate_json(response.content)  # the documented schema holds
    return response.json()


@pytest.mark.parametrize(("encoding", "atol"), [("base64_float32", 0.0), ("base64_float16", 1e-3)])
def test_base64_encodings_carry_the_same_weights(
    client: TestClient, encoding: str, atol: float
) -> None:
    body = {"sequences": TUTORIAL_BATCH, "mask": "padding_causal", "include": ["masked_scores"]}
    plain = post(client, body)
    compact = post(client, {**body, "encoding": encoding})
    weights = decode(compact["weights"])
    assert weights.shape == (5, 2, 10, 10)
    np.testing.assert_allclose(weights.astype(np.float32), np.array(plain["weights"]), atol=atol)
    mask = decode(compact["attn_mask"])
    assert mask.dtype == np.uint8
    assert (mask.astype(bool) == np.array(plain["attn_mask"])).all()
    # Masked scores: null in JSON, NaN in binary.
    masked = decode(compact["stages"]["masked_scores"])
    hidden = np.array(plain["stages"]["masked_scores"], dtype=object) == None  # noqa: E711
    assert np.isnan(masked.astype(np.float32))[hidden].all()


def test_base64_is_smaller_than_json(client: TestClient) -> None:
    body = {"sequences": [list(range(1, 100)) * 2], "d_model": 64, "num_heads": 8}
    plain = client.post(URL, json=body)
    compact = client.post(URL, json={**body, "encoding": "base64_float32"})
    half = client.post(URL, json={**body, "encoding": "base64_float16"})
    assert len(compact.content) * 2 < len(plain.content)
    assert len(half.content) * 1.7 < len(compact.content)


@pytest.mark.parametrize("method", ["max", "mean"])
def test_display_size_block_pools_weights_mask_and_labels(client: TestClient, method: str) -> None:
    sequence = list(range(1, 41)) + [0] * 5  # 45 tokens, the last 5 padding
    body = {
        "sequences": [sequence],
        "num_heads": 2,
        "mask": "padding",
        "display_size": 16,
        "downsample": method,
    }
    data = post(client, body)
    assert data["full_shape"] == [1, 2, 45, 45]
    assert data["shape"] == [1, 2, 15, 15]  # blocks of 3
    assert data["downsample"] == {
        "method": method,
        "factor_q": 3,
        "factor_k": 3,
        "full_shape": [1, 2, 45, 45],
    }
    full = compute_attention([sequence], mask="padding").attn_weights
    pool = F.max_pool2d if method == "max" else F.avg_pool2d
    expected = pool(full.reshape(2, 1, 45, 45), 3).reshape(1, 2, 15, 15)
    torch.testing.assert_close(torch.tensor(data["weights"]), expected)
    assert data["key_labels"][0][:2] == ["1…3", "4…6"]
    assert data["key_labels"][0][-1] == "<pad>…<pad>"
    assert data["attn_mask"][0][0][-2:] == [True, False]  # the last block is all padding


def test_small_inputs_are_not_downsampled(client: TestClient) -> None:
    data = post(client, {"sequences": TUTORIAL_BATCH, "display_size": 128})
    assert data["downsample"] is None
    assert data["shape"] == data["full_shape"] == [5, 2, 10, 10]


def test_sequence_and_head_selection(client: TestClient) -> None:
    body = {
        "sequences": TUTORIAL_BATCH,
        "targets": TUTORIAL_TARGETS,
        "mask": "padding",
        "include": ["q", "head_mean"],
        "dropout": 0.2,
    }
    everything = post(client, body)
    one = post(client, {**body, "sequence_index": 2, "head_index": 1})
    assert one["shape"] == [1, 1, 12, 10] and one["full_shape"] == [5, 2, 12, 10]
    assert one["weights"][0][0] == everything["weights"][2][1]
    assert one["stages"]["q"][0][0] == everything["stages"]["q"][2][1]
    assert one["dropped_weights"][0][0] == everything["dropped_weights"][2][1]
    assert one["query_labels"] == [everything["query_labels"][2]]
    assert one["head_summary"]["entropy_bits"] == [
        [everything["head_summary"]["entropy_bits"][2][1]]
    ]
    assert one["head_summary"]["mean_weights"] == [everything["head_summary"]["mean_weights"][2]]
    for field, value in (("sequence_index", 5), ("head_index", 2)):
        response = client.post(URL, json={**body, field: value})
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", field]


def test_transformer_lesson_takes_the_compact_encoding(client: TestClient) -> None:
    body = {"sequences": TUTORIAL_BATCH, "targets": TUTORIAL_TARGETS, "num_layers": 2}
    plain = client.post("/api/v1/lessons/transformer", json=body).json()
    response = client.post(
        "/api/v1/lessons/transformer", json={**body, "encoding": "base64_float32"}
    )
    TransformerResponse.model_validate_json(response.content)
    cross = decode(response.json()["cross_weights"])
    np.testing.assert_array_equal(cross, np.array(plain["cross_weights"], dtype=np.float32))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_keeps_the_softmax_in_float32(client: TestClient, dtype: str) -> None:
    data = post(
        client,
        {
            "sequences": TUTORIAL_BATCH,
            "mask": "padding_causal",
            "dtype": dtype,
            "mask_fill": -1e9,
            "verify": True,
        },
    )
    assert data["dtype"] == dtype
    weights = torch.tensor(data["weights"])
    # -1e9 does not fit in float16; masking in float32 still gives exact zeros.
    assert torch.all(weights[0, :, :, 8:] == 0)
    assert torch.allclose(weights.sum(-1), torch.ones(5, 2, 10), atol=1e-5)
    assert data["verification"]["matches"] is True


@pytest.mark.parametrize("encoding", ["json", "base64_float32", "base64_float16"])
def test_large_responses_stream_the_same_numbers(client: TestClient, encoding: str) -> None:
    sequence = [1 + i % 99 for i in range(512)]
    body = {
        "sequences": [sequence],
        "d_model": 64,
        "num_heads": 4,
        "mask": "padding_causal",
        "encoding": encoding,
    }  # 4 * 512 * 512 = 1M weights: streamed
    response = client.post(URL, json=body)
    assert response.status_code == 200
    assert "content-length" not in response.headers  # streamed, chunk by chunk
    AttentionResponse.model_validate_json(response.content)
    data = response.json()
    expected = compute_attention(
        [sequence], LayerConfig(d_model=64, num_heads=4), mask="padding_causal"
    )
    weights = (
        torch.tensor(data["weights"])
        if encoding == "json"
        else torch.from_numpy(decode(data["weights"]).astype(np.float32))
    )
    atol = 1e-3 if encoding == "base64_float16" else 0.0
    torch.testing.assert_close(weights, expected.attn_weights, atol=atol, rtol=0)
    assert data["shape"] == [1, 4, 512, 512]


# float64 end to end: found from outside (issue 12) -----------------------------------


@pytest.mark.parametrize("encoding", ["json", "base64_float64"])
def test_float64_results_come_back_at_float64_precision(api: TestClient, encoding: str) -> None:
    batch = [[5, 17, 42, 0], [9, 3, 0, 0]]
    body = {"sequences": batch, "dtype": "float64", "encoding": encoding, "d_model": 16}
    body |= {"num_heads": 4, "include": ["head_mean"]}
    data = api.post("/api/v1/attention", json=body).json()
    reference = compute_attention(batch, LayerConfig(d_model=16, num_heads=4), dtype="float64")
    spec = data["weights"]
    if encoding == "json":
        weights = np.asarray(spec, dtype=np.float64)
    else:
        weights = decode(spec, expect="f8")
    assert np.array_equal(weights, reference.attn_weights.numpy())
    # float32 could not hold these: the difference from its rounding is visible.
    rounded = reference.attn_weights.numpy().astype(np.float32).astype(np.float64)
    assert not np.array_equal(weights, rounded)
    max_weight = np.asarray(data["head_summary"]["max_weight"])
    assert np.array_equal(max_weight, reference.head_max_weight.numpy())

import json
import math
from typing import Any

import pytest
import torch
from attnviz.attention import LayerConfig, compute_attention
from attnviz.attention.tutorials import TUTORIAL_BATCH, TUTORIAL_TARGETS
from attnviz.resources import STATIC_DIR
from attnviz.server.settings import Settings, get_settings
from fastapi.testclient import TestClient
from plotly.offline import get_plotlyjs_version

URL = "/api/v1/attention"


def post(client: TestClient, body: Any) -> Any:
    return client.post(URL, json=body)


def assert_no_nan_or_inf(raw: bytes) -> None:
    def reject(token: str) -> None:
        raise AssertionError(f"non-finite number {token} in the JSON")

    json.loads(raw, parse_constant=reject)


def test_healthz(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["torch"] == torch.__version__
    before = body["work"]
    assert before["queued"] == before["computing"] == 0
    assert before["long_running"] == before["long_waiting"] == 0
    # a computation on the pool is counted by how it ended
    assert client.post("/api/v1/attention", json={"sequences": ["a b c"]}).status_code == 200
    after = client.get("/healthz").json()["work"]
    assert after["finished"] == before["finished"] + 1
    assert after["computing"] == 0 and after["stopped"] == before["stopped"]


def test_presets_default_is_the_tutorial_batch_with_padding_and_causal(client: TestClient) -> None:
    presets = client.get("/api/v1/presets").json()
    names = [p["name"] for p in presets]
    assert names[0] == "tutorial-padding-causal"
    default = presets[0]["request"]
    assert default["sequences"] == TUTORIAL_BATCH
    assert (default["d_model"], default["num_heads"], default["pad_id"]) == (8, 2, 0)
    assert default["mask"] == "padding_causal"
    by_name = {p["name"]: p["request"] for p in presets}
    assert by_name["i-love-deep-learning"]["sequences"] == ["I love deep learning"]
    assert (
        by_name["i-love-deep-learning"]["d_model"],
        by_name["i-love-deep-learning"]["num_heads"],
    ) == (64, 8)
    assert by_name["i-love-deep-learning"]["mask"] == "none"
    assert by_name["tutorial-encoder-decoder"]["targets"] == TUTORIAL_TARGETS


def test_every_preset_computes(client: TestClient) -> None:
    expected_shapes = {
        "tutorial-padding-causal": [5, 2, 10, 10],
        "i-love-deep-learning": [1, 8, 4, 4],
        "tutorial-encoder-decoder": [5, 2, 12, 10],
        "fully-masked-rows": [2, 2, 6, 6],
    }
    presets = client.get("/api/v1/presets").json()
    assert sorted(p["name"] for p in presets) == sorted(expected_shapes)
    for preset in presets:
        response = post(client, {**preset["request"], "verify": True})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["shape"] == expected_shapes[preset["name"]]
        assert_no_nan_or_inf(response.content)
        verification = body["verification"]
        assert verification["matches"] is True
        for key in (
            "mha_weights_max_abs_diff",
            "mha_output_max_abs_diff",
            "sdpa_output_max_abs_diff",
        ):
            assert verification[key] < 1e-6, (preset["name"], key, verification[key])


def test_verification_is_absent_unless_asked_for(client: TestClient) -> None:
    assert post(client, {"sequences": [[1, 2]]}).json()["verification"] is None


@pytest.mark.parametrize(("mask_fill", "row0"), [("-inf", [0.0, 0.0]), (-1e9, [0.5, 0.5])])
def test_mask_fill_decides_fully_masked_rows(
    client: TestClient, mask_fill: Any, row0: list[float]
) -> None:
    body = {
        "sequences": [[0, 3], [4, 5]],
        "mask": "padding_causal",
        "mask_fill": mask_fill,
        "verify": True,
    }
    response = post(client, body)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["mask_fill"] == mask_fill
    assert data["fully_masked"][0] == [True, False]
    assert data["weights"][0][0][0] == row0
    assert data["verification"]["fully_masked_rows"] == 1
    assert data["verification"]["matches"] is True


def test_response_carries_the_engine_numbers_and_everything_to_draw_them(
    client: TestClient,
) -> None:
    response = post(client, {"sequences": TUTORIAL_BATCH, "mask": "padding_causal", "seed": 4})
    assert response.status_code == 200
    body = response.json()
    result = compute_attention(TUTORIAL_BATCH, LayerConfig(seed=4), mask="padding_causal")
    assert body["shape"] == [5, 2, 10, 10]
    assert torch.equal(torch.tensor(body["weights"]), result.attn_weights)
    assert body["attn_mask"] == result.mask.tolist()
    assert body["query_labels"] == body["key_labels"] == result.query_labels
    assert body["query_ids"][1] == [60, 96, 51, 32, 90, 0, 0, 0, 0, 0]
    assert body["fully_masked"] == [[False] * 10] * 5
    assert body["num_parameters"] == 4 * 8 * 8 + 4 * 8
    assert body["device"] == "cpu" and body["dtype"] == "float32"
    assert body["attention"] == "self"
    assert body["compute_ms"] > 0


def test_encoder_decoder_batch_has_shape_5_2_12_10(client: TestClient) -> None:
    body = post(
        client, {"sequences": TUTORIAL_BATCH, "targets": TUTORIAL_TARGETS, "mask": "padding"}
    ).json()
    assert body["shape"] == [5, 2, 12, 10]
    assert body["attention"] == "cross"
    assert len(body["query_labels"][0]) == 12 and len(body["key_labels"][0]) == 10


def test_fully_masked_rows_are_zero_in_the_json(client: TestClient) -> None:
    response = post(client, {"sequences": ["<pad> <pad>", "hello world"], "mask": "padding"})
    assert response.status_code == 200
    assert_no_nan_or_inf(response.content)
    body = response.json()
    assert body["fully_masked"] == [[True, True], [False, False]]
    assert all(w == 0.0 for head in body["weights"][0] for row in head for w in row)
    for head in body["weights"][1]:
        for row in head:
            assert math.isclose(sum(row), 1.0, abs_tol=1e-6)


def error_locs(response: Any) -> list[list[Any]]:
    return [d["loc"] for d in response.json()["detail"]]


@pytest.mark.parametrize(
    ("body", "loc", "text"),
    [
        (
            {"sequences": [[1, 2]], "d_model": 10, "num_heads": 3},
            ["body", "num_heads"],
            "num_heads must divide d_model (10): try 1, 2, 5 or 10",
        ),
        ({"sequences": []}, ["body", "sequences"], "at least 1"),
        ({"sequences": [[1, 2], []]}, ["body", "sequences", 1], "empty"),
        ({"sequences": [[1, 200]]}, ["body", "sequences", 0], "200 is outside"),
        ({"sequences": [[1, -3]]}, ["body", "sequences", 0], "-3 is outside"),
        ({"sequences": [[1]], "mask": "nopeak"}, ["body", "mask"], "padding_causal"),
        ({"sequences": [[1]], "targets": [[1], [2]]}, ["body", "targets"], "2 sequences"),
        (
            {"sequences": [[1]], "targets": [[1]], "mask": "causal"},
            ["body", "mask"],
            "self-attention only",
        ),
        ({"sequences": [[1, "a"]]}, ["body", "sequences", 0], ""),
        ({"sequences": [[1]], "d_model": "eight"}, ["body", "d_model"], "integer"),
        ({"sequences": [[1]], "num_heads": 0}, ["body", "num_heads"], "greater than or equal"),
        ({"sequences": [[1]], "colour": "red"}, ["body", "colour"], "Extra inputs"),
        ({"sequences": [[1, 2]], "vocab_size": 2}, ["body", "sequences", 0], "2 is outside"),
        ({"sequences": [[1]], "device": "tpu"}, ["body", "device"], ""),
        ({"sequences": [[1]], "mask_fill": 5}, ["body", "mask_fill"], "finite number in"),
        ({"sequences": [[1]], "mask_fill": "inf"}, ["body", "mask_fill"], "finite"),
        ({"sequences": [[1]], "verify": "maybe"}, ["body", "verify"], "boolean"),
    ],
)
def test_bad_input_is_422_naming_the_field(
    client: TestClient, body: dict[str, Any], loc: list[Any], text: str
) -> None:
    response = post(client, body)
    assert response.status_code == 422, response.text
    locs = error_locs(response)
    assert any(found[: len(loc)] == loc for found in locs), locs
    assert text in json.dumps(response.json())


def test_nan_and_malformed_json_are_422(client: TestClient) -> None:
    nan_body = '{"sequences": [[1, 2]], "d_model": NaN}'
    response = client.post(URL, content=nan_body, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert ["body", "d_model"] in error_locs(response)
    response = client.post(URL, content="{not json", headers={"content-type": "application/json"})
    assert response.status_code == 422


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_422_naming_device(client: TestClient) -> None:
    response = post(client, {"sequences": [[1, 2]], "device": "cuda"})
    assert response.status_code == 422
    assert error_locs(response) == [["body", "device"]]
    assert "no CUDA device" in response.json()["detail"][0]["msg"]


def test_too_many_weights_is_413_with_the_limit(client: TestClient) -> None:
    client.app.dependency_overrides[get_settings] = lambda: Settings(max_weight_cells=150)
    response = post(client, {"sequences": TUTORIAL_BATCH})  # 5 * 2 * 10 * 10 = 1000 weights
    assert response.status_code == 413
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "sequences"]
    assert "1000" in detail["msg"] and "150" in detail["msg"]
    # The head average, when asked for, counts too: 5 * 10 * 10 more.
    response = post(client, {"sequences": TUTORIAL_BATCH, "include": ["head_mean"]})
    assert "1500" in response.json()["detail"][0]["msg"]


def test_page_embeds_presets_and_serves_plotly_offline(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert "tutorial-padding-causal" in page.text
    version = get_plotlyjs_version()
    url = f"/static/vendor/plotly-attnviz.min.js?v={version}"
    # Deferred, after the page's module: the module's first request goes out first.
    tag = f'<script id="plotly-js" defer src="{url}"></script>'
    assert tag in page.text
    assert page.text.index('<script type="module"') < page.text.index(tag)
    assert client.get("/models").text.count(tag) == 1
    vendored = (STATIC_DIR / "vendor" / "plotly-attnviz.min.js").read_bytes()
    header = f"/**\n* plotly.js (attnviz: core, heatmap, bar - minified) v{version}\n"
    assert vendored.startswith(header.encode())
    licence = (STATIC_DIR / "vendor" / "plotly-attnviz.LICENSE").read_text()
    assert "MIT" in licence or "Permission is hereby granted" in licence

    plain = client.get(url, headers={"Accept-Encoding": "identity"})
    assert plain.status_code == 200
    assert plain.headers["content-type"].startswith("text/javascript")
    assert "content-encoding" not in plain.headers
    assert plain.content == vendored
    assert plain.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert plain.headers["vary"] == "Accept-Encoding"

    packed = client.get(url, headers={"Accept-Encoding": "br, gzip;q=0.8"})
    assert packed.headers["content-encoding"] == "gzip"
    assert int(packed.headers["content-length"]) < len(vendored) / 2
    assert packed.content == vendored  # httpx decodes it
    refused = client.get(url, headers={"Accept-Encoding": "gzip;q=0"})
    assert "content-encoding" not in refused.headers

    etag = plain.headers["etag"]
    again = client.get(url, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert client.get("/static/vendor/plotly.min.js").status_code == 404  # the full bundle
    assert client.get("/static/js/attnviz.js").status_code == 200


def test_openapi_documents_the_request_with_examples(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    request = schema["components"]["schemas"]["AttentionRequest"]
    assert request["examples"][0]["sequences"] == TUTORIAL_BATCH
    assert request["properties"]["mask"]["default"] == "padding"
    assert "/api/v1/attention" in schema["paths"]

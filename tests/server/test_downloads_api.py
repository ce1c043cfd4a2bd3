"""POST /api/v1/models/attention/download: a layer's or head's exact maps as .npy or safetensors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from attnviz.server.settings import Settings, get_settings
from fastapi.testclient import TestClient
from safetensors import safe_open

from tests.support.api import decode

pytestmark = pytest.mark.usefixtures("pretrained_extra")

URL = "/api/v1/models/attention/download"
TEXT = "The cat sat on the mat because it was tired."


def reference_layer(reference_bert, client: TestClient, text: str, layer: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    """(H, L, L) transformers' eager output_attentions of ``layer`` for one text."""
    tokenizer_ids = client.post(
        "/api/v1/models/attention", json={"texts": [text], "layer_index": 0, "sequence_index": 0}
    ).json()["input_ids"]
    with torch.no_grad():
        out = reference_bert(input_ids=torch.tensor(tokenizer_ids), output_attentions=True)
    return out.attentions[layer][0].numpy()


def test_a_head_downloads_as_npy_equal_to_transformers(client: TestClient, reference_bert) -> None:  # type: ignore[no-untyped-def]
    response = client.post(URL, json={"texts": [TEXT], "layer_index": 2, "head_index": 5})
    assert response.status_code == 200, response.text
    assert response.headers["content-disposition"] == (
        'attachment; filename="all-MiniLM-L6-v2-input0-layer2-head5.npy"'
    )
    assert int(response.headers["content-length"]) == len(response.content)
    head = np.load(io.BytesIO(response.content))
    expected = reference_layer(reference_bert, client, TEXT, 2)[5]
    assert head.dtype == np.float32 and head.shape == expected.shape
    np.testing.assert_allclose(head, expected, atol=1e-5)


def test_a_layer_downloads_as_safetensors_with_its_tokens(
    client: TestClient, reference_bert, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    response = client.post(URL, json={"texts": [TEXT], "layer_index": 4, "format": "safetensors"})
    assert response.status_code == 200, response.text
    assert response.headers["content-disposition"].endswith('-layer4.safetensors"')
    path = tmp_path / "layer.safetensors"
    path.write_bytes(response.content)
    with safe_open(str(path), "pt") as opened:  # the library's own reader
        assert list(opened.keys()) == ["attn_weights"]
        layer = opened.get_tensor("attn_weights").numpy()
        metadata = opened.metadata()
    expected = reference_layer(reference_bert, client, TEXT, 4)
    assert layer.shape == expected.shape == (12, *expected.shape[1:])
    np.testing.assert_allclose(layer, expected, atol=1e-5)
    tokens = json.loads(metadata["query_tokens"])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and len(tokens) == layer.shape[1]
    assert json.loads(metadata["key_tokens"]) == tokens
    assert (metadata["model"], metadata["layer_index"], metadata["head_index"]) == (
        "all-MiniLM-L6-v2",
        "4",
        "",
    )
    assert (metadata["method"], metadata["shape"]) == ("attention", "(H, L_q, L_k)")


def test_the_weights_stream_as_tiles_of_the_kept_pass_never_held_whole(
    client: TestClient, reference_bert, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """A plain download (the weights, no hiding, merging, heads off or method) runs no walk:
    the file is rows of exact tiles of the input's pass kept for tiles, a few rows a piece
    (here one row: the pieces counted), equal to transformers; the pass stays kept, so the
    page's views and zoom of the same input run no forward pass after it."""
    from attnviz.pretrained.display import LayerWalk
    from attnviz.pretrained.results import PretrainedAttentions
    from attnviz.server.payloads import files

    text = "Tiles stream the file of a layer, a row at a time."
    walked: list[int] = []
    pieces: list[range] = []
    layers, tile = LayerWalk.layers, PretrainedAttentions.tile

    def counted_layers(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        walked.append(1)
        return layers(self, *args, **kwargs)

    def counted_tile(self, block, layer, heads=None, rows=None, cols=None, **kwargs):  # type: ignore[no-untyped-def]
        if cols is not None and len(cols) > 1:  # not _tiled's probe of one cell
            pieces.append(rows)
        return tile(self, block, layer, heads, rows, cols, **kwargs)

    monkeypatch.setattr(LayerWalk, "layers", counted_layers)
    monkeypatch.setattr(PretrainedAttentions, "tile", counted_tile)
    monkeypatch.setattr(files, "TILE_ROW_FLOATS", 1)  # one row a piece
    response = client.post(URL, json={"texts": [text], "layer_index": 1})
    assert response.status_code == 200, response.text
    layer = np.load(io.BytesIO(response.content))
    heads, length = layer.shape[:2]
    assert walked == [] and len(pieces) == heads * length
    assert all(len(rows) == 1 for rows in pieces)
    pieces.clear()
    head = client.post(URL, json={"texts": [text], "layer_index": 1, "head_index": 3})
    assert walked == [] and len(pieces) == length
    expected = reference_layer(reference_bert, client, text, 1)  # (its ids: a JSON request)
    np.testing.assert_allclose(layer, expected, atol=1e-5)
    np.testing.assert_allclose(np.load(io.BytesIO(head.content)), expected[3], atol=1e-5)
    answer = client.post(
        "/api/v1/models/attention",
        json={"texts": [text], "sequence_index": 0, "layer_index": 1, "display_size": 64},
    )
    assert answer.status_code == 200 and isinstance(answer.json()["pass_key"], str)


@pytest.mark.parametrize(
    "options",
    [
        {"hide_special_tokens": True, "merge_words": True},
        {"ablate": [[0, 3], [1, 7]]},
        {"method": "norm"},
    ],
    ids=["hidden-merged", "heads-off", "norm"],
)
def test_the_file_holds_the_views_maps_unpooled(client: TestClient, options: dict) -> None:
    """What the page draws with the same options, at full resolution (the JSON route's)."""
    body = {"texts": [TEXT, "A second input, longer than the first one by far."], **options}
    selection = {"sequence_index": 1, "layer_index": 3}
    shown = client.post(
        "/api/v1/models/attention", json={**body, **selection, "encoding": "base64_float32"}
    )
    assert shown.status_code == 200, shown.text
    expected = decode(shown.json()["attentions"])[0, 0]  # (H, L_q, L_k)
    npy = client.post(URL, json={**body, **selection})
    assert npy.status_code == 200, npy.text
    layer = np.load(io.BytesIO(npy.content))
    np.testing.assert_array_equal(layer, expected)
    head = np.load(
        io.BytesIO(client.post(URL, json={**body, **selection, "head_index": 2}).content)
    )
    np.testing.assert_array_equal(head, expected[2])
    if options.get("method") == "norm":
        assert npy.headers["content-disposition"].endswith('-layer3-norm.npy"')
        safetensors = client.post(URL, json={**body, **selection, "format": "safetensors"})
        size = int.from_bytes(safetensors.content[:8], "little")
        assert list(json.loads(safetensors.content[8 : 8 + size])) == ["__metadata__", "norm"]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"display_size": 64}, "display_size"),
        ({"query_index": 0}, "query_index"),
        ({"layer_index": None}, "layer_index"),
        ({"layer_index": 6}, "layer_index"),
        ({"head_index": 12}, "head_index"),
        ({"format": "csv"}, "format"),
    ],
)
def test_a_bad_download_is_a_422_naming_the_field(
    client: TestClient, extra: dict, field: str
) -> None:
    body = {"texts": [TEXT], "layer_index": 1, **extra}
    body = {k: v for k, v in body.items() if v is not None}
    response = client.post(URL, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][-1] == field


def test_a_file_over_the_limit_is_a_413_saying_to_take_a_head(client: TestClient) -> None:
    # 12 heads x 12 x 12 float32 = 6,912 bytes; one head 576
    client.app.dependency_overrides[get_settings] = lambda: Settings(max_download_bytes=4000)  # type: ignore[attr-defined]
    try:
        layer = client.post(URL, json={"texts": [TEXT], "layer_index": 1})
        head = client.post(URL, json={"texts": [TEXT], "layer_index": 1, "head_index": 0})
    finally:
        client.app.dependency_overrides.clear()  # type: ignore[attr-defined]
    assert layer.status_code == 413, layer.text
    (detail,) = layer.json()["detail"]
    assert detail["loc"][-1] == "layer_index"
    assert "ATTNVIZ_MAX_DOWNLOAD_BYTES" in detail["msg"] and "head_index" in detail["msg"]
    assert head.status_code == 200, head.text


def test_a_decoders_chat_and_generation_are_in_the_file(client: TestClient) -> None:
    """SmolLM2 with its chat template and 4 new tokens: the head of prompt + new tokens."""
    body = {
        "model": "SmolLM2-135M-Instruct",
        "texts": ["Why is the sky blue?"],
        "chat": True,
        "max_new_tokens": 4,
        "layer_index": 7,
        "head_index": 3,
    }
    shown = client.post("/api/v1/models/attention", json={**body, "sequence_index": 0})
    assert shown.status_code == 200, shown.text
    data = shown.json()
    expected = np.asarray(data["attentions"], dtype=np.float32)[0, 0, 0]
    assert len(data["generation"]["tokens"]) == 4 and expected.shape[0] == len(data["tokens"][0])
    response = client.post(URL, json=body)
    assert response.status_code == 200, response.text
    head = np.load(io.BytesIO(response.content))
    np.testing.assert_array_equal(head, expected)
    assert np.allclose(np.triu(head, 1), 0)  # causal: no weight on a later token


def test_a_file_answers_to_the_download_limit_not_the_json_one(client: TestClient) -> None:
    """ATTNVIZ_MAX_WEIGHT_CELLS bounds pooled JSON answers; a file of exact maps answers to
    ATTNVIZ_MAX_DOWNLOAD_BYTES only (issue 53: a 145 MB layer at 2,004 tokens was a 413 from
    the JSON limit, whose advice, display_size, the download route refuses)."""
    body = {"texts": [TEXT], "layer_index": 1, "sequence_index": 0}
    client.app.dependency_overrides[get_settings] = lambda: Settings(max_weight_cells=100)  # type: ignore[attr-defined]
    try:
        assert client.post("/api/v1/models/attention", json=body).status_code == 413
        file = client.post(URL, json=body)
        assert file.status_code == 200, file.text
        assert np.load(io.BytesIO(file.content)).shape[0] == 12
        small = Settings(max_download_bytes=1024)
        client.app.dependency_overrides[get_settings] = lambda: small  # type: ignore[attr-defined]
        refused = client.post(URL, json=body)
        assert refused.status_code == 413
        detail = refused.json()["detail"][0]
        assert detail["loc"] == ["body", "layer_index"]
        assert "ATTNVIZ_MAX_DOWNLOAD_BYTES" in detail["msg"] and "head_index" in detail["msg"]
    finally:
        client.app.dependency_overrides.clear()  # type: ignore[attr-defined]

"""POST /api/v1/models/attention with images: a vision-language prompt through the API.

Tiny random LLaVA and Qwen2-VL folders (:mod:`tests.pretrained.tiny_vlm`) served as a
user's ``ATTNVIZ_MODEL_DIRS``; images sent as base64 (with and without a data: URL's
header). The maps equal transformers' own eager ``output_attentions`` over the same
prompt, the image tokens' rectangles are the model's, and bad images or options are a
4xx naming ``images``.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.pretrained import tiny_vlm
from tests.pretrained.support import require_transformers
from tests.pretrained.tiny import save_tiny
from tests.server.support import serving_model_dirs

URL = "/api/v1/models/attention"


def png(image: Any) -> str:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_transformers()
    root = tmp_path_factory.mktemp("vlm-api")
    made = {
        name: tiny_vlm.BUILDERS[name](root / f"tiny-{name}")
        for name in ("llava", "qwen2_vl", "gemma3")
    }
    made["gpt2"] = save_tiny("gpt2", root / "tiny-gpt2")
    return made


@pytest.fixture(scope="module")
def client(folders: dict[str, Path]) -> Iterator[Any]:
    with serving_model_dirs(list(folders.values())) as served:
        yield served


@pytest.mark.parametrize("name", ["llava", "qwen2_vl", "gemma3"])
def test_the_maps_of_a_prompt_with_an_image_equal_eager_attention(
    client: Any, folders: dict[str, Path], name: str
) -> None:
    import transformers
    from attnviz.pretrained import load_model_dir

    picture = tiny_vlm.coordinate_image(47, 61)
    listing = {m["name"]: m for m in client.get("/api/v1/models").json()["models"]}
    assert listing[f"tiny-{name}"]["family_spec"]["reads_images"] is True
    assert listing["tiny-gpt2"]["family_spec"]["reads_images"] is False
    body = {
        "model": f"tiny-{name}",
        "texts": ["what is in this picture"],
        "images": ["data:image/png;base64," + png(picture)],
        "sequence_index": 0,
    }
    response = client.post(URL, json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["family"] == "vision-language" and answer["family_spec"]["reads_images"]
    # Gemma 3's image tokens attend both ways: its answer says its maps are not causal.
    assert answer["family_spec"]["causal_blocks"] == ([] if name == "gemma3" else ["decoder"])
    (placed,) = answer["images"]
    assert (placed["image"], placed["width"], placed["height"]) == (0, 47, 61)
    # The reference: the same folder, transformers' own processor inputs, eager attention.
    model = load_model_dir("reference", folders[name])
    batch = model.tokenize_images("what is in this picture", [picture])
    assert answer["tokens"][0] == batch.tokens[0]
    assert placed["positions"] == list(batch.images[0].positions)
    np.testing.assert_allclose(placed["rectangles"], batch.images[0].rectangles, atol=1e-4)
    image_id = model.image_token_id
    assert all(answer["input_ids"][0][p] == image_id for p in placed["positions"])
    eager = transformers.AutoModelForImageTextToText.from_pretrained(
        folders[name], attn_implementation="eager"
    ).eval()
    inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask.long()}
    with torch.inference_mode():
        expected = eager(**inputs, **batch.model_inputs, output_attentions=True).attentions
    maps = np.asarray(answer["attentions"])  # (N, 1, H, L, L)
    assert maps.shape == (2, 1, 2, *batch.input_ids.shape[1:] * 2)
    for layer, weights in enumerate(expected):
        np.testing.assert_allclose(maps[layer, 0], weights[0].numpy(), atol=1e-5)


def test_the_same_text_with_another_image_is_another_pass(client: Any) -> None:
    """Passes are kept by their pixels too: a second image is not the first one's maps."""
    from PIL import ImageOps

    picture = tiny_vlm.coordinate_image(47, 61)
    answers = []
    for image in (picture, ImageOps.mirror(picture)):  # the same size, other pixels
        body = {
            "model": "tiny-qwen2_vl",
            "texts": ["describe it"],
            "images": [png(image)],
            "sequence_index": 0,
        }
        response = client.post(URL, json=body)
        assert response.status_code == 200, response.text
        answers.append(response.json())
    first, second = answers
    assert first["tokens"] == second["tokens"] and first["images"] == second["images"]
    assert not np.allclose(np.asarray(first["attentions"]), np.asarray(second["attentions"]))


@pytest.mark.parametrize("name", ["llava", "gemma3"])
def test_the_pages_requests_stream_the_grid_then_give_a_tokens_rows(client: Any, name: str) -> None:
    """The page's order: the grid streamed (its pass recorded and kept for tiles), then one
    token's rows from that pass (a 500 before: the kept layers were counted without the
    image encoder's calls, the recording with them)."""
    body = {
        "model": f"tiny-{name}",
        "texts": ["what is in this picture"],
        "images": [png(tiny_vlm.coordinate_image(47, 61))],
        "sequence_index": 0,
        "max_new_tokens": 2,
    }
    streamed = client.post(URL + "/layers", json={**body, "display_size": 64})
    assert streamed.status_code == 200, streamed.text
    lines = [json.loads(line) for line in streamed.text.splitlines()]
    assert lines[0]["type"] == "start" and lines[-1]["type"] == "end"
    assert lines[0]["images"][0]["width"] == 47
    rows = client.post(URL, json={**body, "query_index": 3, "display_size": 8})
    assert rows.status_code == 200, rows.text
    found = np.asarray(rows.json()["query_attentions"])  # (N, H, L)
    np.testing.assert_allclose(found.sum(-1), 1, atol=1e-5)


def bmp_header_only() -> str:
    return base64.b64encode(b"BM" + b"\0" * 10).decode()


@pytest.mark.parametrize(
    ("change", "status", "field", "says"),
    [
        ({"model": "tiny-gpt2"}, 422, ["images"], "reads no images"),
        ({"texts": ["a cat", "a dog"]}, 422, ["images"], "one text"),
        ({"hide_special_tokens": True}, 422, ["images"], "hide_special_tokens"),
        ({"images": ["not base64!"]}, 422, ["images", 0], "base64"),
        ({"images": [base64.b64encode(b"II*\0 tiff").decode()]}, 415, ["images", 0], ""),
        ({"images": [bmp_header_only()]}, 422, ["images", 0], ""),
        ({"texts": ["<image> <image> describe it"]}, 422, ["texts", 0], "2 images"),
        ({"images": []}, 422, ["texts", 0], "0 were given"),
    ],
)
def test_a_bad_image_or_option_is_a_4xx_naming_the_field(
    client: Any, change: dict[str, Any], status: int, field: list[Any], says: str
) -> None:
    body = {
        "model": "tiny-llava",
        "texts": ["describe it"],
        "images": [png(tiny_vlm.coordinate_image(40, 40))],
        "sequence_index": 0,
        **change,
    }
    if change.get("texts") == ["<image> <image> describe it"] or change.get("images") == []:
        body["texts"] = ["<image> describe it"] if change.get("images") == [] else body["texts"]
    response = client.post(URL, json=body)
    assert response.status_code == status, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", *field], detail
    assert says in detail["msg"]


def test_images_as_multipart_files_give_the_json_routes_answer(client: Any) -> None:
    """POST /api/v1/models/attention/upload: the request's JSON and the images as files;
    the same answer as the JSON route's with base64 images, and its errors named."""
    import json

    picture = tiny_vlm.coordinate_image(47, 61)
    out = io.BytesIO()
    picture.save(out, format="PNG")
    fields = {"model": "tiny-qwen2_vl", "texts": ["describe it"], "sequence_index": 0}
    uploaded = client.post(
        URL + "/upload",
        data={"request": json.dumps(fields)},
        files=[("images", ("picture.png", out.getvalue(), "image/png"))],
    )
    assert uploaded.status_code == 200, uploaded.text
    sent = client.post(URL, json={**fields, "images": [png(picture)]})
    assert sent.status_code == 200
    assert uploaded.json()["images"] == sent.json()["images"]
    np.testing.assert_allclose(
        np.asarray(uploaded.json()["attentions"]), np.asarray(sent.json()["attentions"])
    )
    # A file that is no image, JSON that is not the request, a bad field of it.
    bad = client.post(
        URL + "/upload",
        data={"request": json.dumps(fields)},
        files=[("images", ("notes.txt", b"not an image at all", "text/plain"))],
    )
    assert bad.status_code == 415 and bad.json()["detail"][0]["loc"] == ["body", "images", 0]
    for request, where in (
        ("{not json", ["body", "request"]),
        (json.dumps({**fields, "images": ["x"]}), ["body", "request"]),
        (json.dumps({**fields, "texts": []}), ["body", "request", "texts"]),
    ):
        refused = client.post(
            URL + "/upload",
            data={"request": request},
            files=[("images", ("picture.png", out.getvalue(), "image/png"))],
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"][0]["loc"] == where


# Last: serving() below replaces the app's models, which the module's client uses.
def test_a_vision_language_id_is_served_from_the_cache_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hand-made hub cache (``models--org--name/refs/main``, ``snapshots/<commit>/``) with
    a tiny LLaVA: its id serves images offline; an id not cached fails saying so."""
    from tests.server.support import serving

    repo, commit = "tiny-org/tiny-llava", "0123456789abcdef0123456789abcdef01234567"
    cache = tmp_path / "hub"
    stored = cache / ("models--" + repo.replace("/", "--"))
    tiny_vlm.llava(stored / "snapshots" / commit)
    (stored / "refs").mkdir()
    (stored / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    env = {
        "ATTNVIZ_MODELS": f'["{repo}", "tiny-org/not-cached-vlm"]',
        "ATTNVIZ_PACKAGED_MODELS": "false",
    }
    with serving(env) as served:
        info = {m["name"]: m for m in served.get("/api/v1/models").json()["models"]}
        assert info[repo]["state"] == "ready" and info[repo]["family_spec"]["reads_images"]
        missing = info["tiny-org/not-cached-vlm"]
        assert missing["state"] == "failed"
        assert "not in the local Hugging Face cache" in missing["error"]
        body = {
            "model": repo,
            "texts": ["what is in this picture"],
            "images": [png(tiny_vlm.coordinate_image(47, 61))],
            "sequence_index": 0,
        }
        response = served.post(URL, json=body)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert len(answer["images"][0]["positions"]) == 25  # 5 x 5 patches of 6 px
        maps = np.asarray(answer["attentions"])
        np.testing.assert_allclose(maps.sum(-1), 1, atol=1e-5)

"""Vision-language models: the decoder's attention over text and image tokens, exact, and
where each image token lies on the image.

Tiny random LLaVA 1.5 (with and without LLaVA's square pad, [CLS] kept or not),
Qwen2-VL and Qwen2.5-VL folders (:mod:`tests.pretrained.tiny_vlm`), loaded by
:func:`attnviz.pretrained.load_model_dir` as a user's folder would be:

* every layer and head of the decoder equals transformers' own eager
  ``output_attentions`` of the same folder to 1e-5, with one image and with two, on
  images whose sizes are not multiples of the patch;
* each image token's rectangle holds every original pixel the processor put in that
  token's patch (images that record their own coordinates, resampled NEAREST).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.pretrained import tiny_vlm
from tests.pretrained.support import require_transformers

SIZES = [(47, 61), (90, 33), (30, 30), (200, 131)]
"""(width, height) of test images: none but one a multiple of the patch, both aspects."""


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_transformers()
    root = tmp_path_factory.mktemp("vlm")
    return {name: build(root / name) for name, build in tiny_vlm.BUILDERS.items()}


@pytest.fixture(scope="module")
def models(folders: dict[str, Path]) -> dict[str, Any]:
    from attnviz.pretrained import load_model_dir

    return {name: load_model_dir(f"tiny-{name}", folder) for name, folder in folders.items()}


def eager_reference(folder: Path) -> Any:
    import transformers

    model = transformers.AutoModelForImageTextToText.from_pretrained(
        folder, attn_implementation="eager", local_files_only=True
    )
    return model.eval()


@pytest.mark.parametrize("name", tiny_vlm.BUILDERS)
def test_a_vision_language_folder_loads_as_its_family(models: dict[str, Any], name: str) -> None:
    from attnviz.pretrained.vision_language import VisionLanguageModel

    model = models[name]
    assert isinstance(model, VisionLanguageModel)
    assert model.family == "vision-language" and model.blocks == ("decoder",)
    assert model.architecture == name.split("-")[0]
    # The text decoder's shape, not the image encoder's.
    assert (model.num_layers, model.num_heads, model.num_key_value_heads) == (2, 2, 1)
    assert model.spec.reads_images and model.spec.page()["reads_images"]


@pytest.mark.parametrize("images", [1, 2])
@pytest.mark.parametrize("name", tiny_vlm.BUILDERS)
def test_every_decoder_head_equals_eager_output_attentions(
    models: dict[str, Any], folders: dict[str, Path], name: str, images: int
) -> None:
    model = models[name]
    pictures = [tiny_vlm.coordinate_image(*size) for size in SIZES[:images]]
    batch = model.tokenize_images("what is in this picture", pictures)
    result = model.run(batch, device="cpu")
    inputs = {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask.long(),
        **batch.model_inputs,
    }
    with torch.inference_mode():
        expected = eager_reference(folders[name])(**inputs, output_attentions=True)
    length = batch.input_ids.shape[1]
    image_tokens = sum(len(placed.positions) for placed in batch.images)
    assert image_tokens == int((batch.input_ids == model.image_token_id).sum()) > 0
    assert result.num_layers("decoder") == len(expected.attentions) == 2
    for layer, reference in enumerate(expected.attentions):
        recorded = result.layer_weights("decoder", layer)
        assert recorded.shape == reference.shape == (1, 2, length, length)
        torch.testing.assert_close(recorded, reference, atol=1e-5, rtol=0)
        # Causal over the whole prompt, image tokens included, where the spec says so
        # (Gemma 3's and PaliGemma's image tokens attend both ways); rows sum to 1.
        ahead = torch.triu(recorded[0], diagonal=1).any()
        assert bool(ahead) is ("decoder" not in model.spec.causal_blocks)
        torch.testing.assert_close(recorded.sum(-1), torch.ones(1, 2, length))
    # The image encoder's calls are in no block: only the decoder's layers were counted.
    assert len(result.block_calls["decoder"]) == 2


def llava_next_layout(model: Any, batch: Any, image: int) -> list[tuple[int, int, int]]:
    """(view, row, column) of each of ``image``'s tokens as LLaVA-NeXT's own
    ``pack_image_features`` orders them (-1s for a newline token)."""
    from transformers.models.llava_next.modeling_llava_next import get_anyres_image_grid_shape

    size = batch.model_inputs["image_sizes"][image]
    rows, cols = get_anyres_image_grid_shape(
        size.tolist(), model.model.config.image_grid_pinpoints, 30
    )
    views = 1 + rows * cols  # the base view and the tiles (the batch pads to the most)
    f = 5  # 30 px views of 6 px patches
    v, r, c = torch.meshgrid(torch.arange(views), torch.arange(f), torch.arange(f), indexing="ij")
    features = torch.stack([v, r, c], dim=-1).reshape(views, f * f, 3).float()
    packed, _ = model.model.model.pack_image_features(
        [features], batch.model_inputs["image_sizes"][image : image + 1], "default",
        image_newline=torch.full((3,), -1.0),
    )  # fmt: skip
    packed = packed[0] if isinstance(packed, (list, tuple)) else packed
    return [tuple(int(x) for x in row) for row in packed.tolist()]


def patch_pixels(name: str, model: Any, batch: Any, image: int, token: int) -> np.ndarray:
    """(n, 3) the processed pixel values the processor put in ``image``'s ``token``."""
    pixels = batch.model_inputs["pixel_values"].float().numpy()
    placed = batch.images[image]
    if name == "llava_next":
        # Which view and feature each token is, from the model's own packing of features
        # that hold their (view, row, column): -1 for a row's newline token.
        view, r, c = llava_next_layout(model, batch, image)[token]
        if view < 0:
            return np.zeros((0, 3))
        frame = pixels[image, view]  # (3, 30, 30): the base view, then the tiles
        return frame[:, r * 6 : (r + 1) * 6, c * 6 : (c + 1) * 6].reshape(3, -1).T
    if name.startswith("llava"):
        (grid,) = placed.grids
        view = pixels[image]  # (3, 30, 30)
        if token not in grid.tokens:  # [CLS] with the "full" strategy: the whole view
            return view.reshape(3, -1).T
        r, c = divmod(grid.tokens.index(token), grid.cols)
        return view[:, r * 6 : (r + 1) * 6, c * 6 : (c + 1) * 6].reshape(3, -1).T
    if name in ("gemma3", "paligemma"):
        # (images, 3, 16, 16): Gemma 3's 2 x 2 tokens each average 8 x 8 pixels (4 x 4
        # patches pooled 2 x 2); PaliGemma's 4 x 4 tokens are its 4 px patches
        side = 8 if name == "gemma3" else 4
        per_row = 16 // side
        r, c = divmod(token, per_row)
        return (
            pixels[image][:, r * side : (r + 1) * side, c * side : (c + 1) * side].reshape(3, -1).T
        )
    if name in ("idefics3", "smolvlm"):
        # (1, views, 3, 16, 16): each image's views (its tiles, then its global view), 2 x 2
        # tokens a view, each 8 x 8 pixels (4 px patches merged 2 x 2)
        first = sum(len(p.positions) for p in batch.images[:image]) // 4
        view, at = divmod(token, 4)
        r, c = divmod(at, 2)
        frame = pixels[0, first + view]
        return frame[:, r * 8 : (r + 1) * 8, c * 8 : (c + 1) * 8].reshape(3, -1).T
    # Qwen: rows of (C, T, p, p) per patch, m * m patches per token, image after image.
    grids = batch.model_inputs["image_grid_thw"]
    first = int(sum(int(t * h * w) for t, h, w in grids[:image].tolist()))
    start = first + token * 4
    block = pixels[start : start + 4].reshape(4, 3, 2, 2, 2)  # (m*m, C, T, p, p)
    return block.transpose(0, 2, 3, 4, 1).reshape(-1, 3)


@pytest.mark.parametrize("name", tiny_vlm.BUILDERS)
def test_each_image_token_covers_the_pixels_its_patch_was_read_from(
    models: dict[str, Any], name: str
) -> None:
    model = models[name]
    pictures = [tiny_vlm.coordinate_image(*size) for size in SIZES]
    prompt_images = pictures[:1] if name in ("llava", "llava-padded-full") else pictures
    checked = 0
    for size, picture in zip(SIZES, pictures, strict=True):
        batch = model.tokenize_images(
            "describe it", prompt_images if picture is pictures[0] else [picture]
        )
        for image, placed in enumerate(batch.images):
            width, height = placed.width, placed.height
            assert (width, height) == SIZES[image] if len(batch.images) > 1 else size
            rects = placed.rectangles
            assert rects.shape == (len(placed.positions), 4)
            assert (rects[:, [0, 2]] >= 0).all() and (rects[:, [0, 2]] <= width).all()
            assert (rects[:, [1, 3]] >= 0).all() and (rects[:, [1, 3]] <= height).all()
            for token, (x0, y0, x1, y1) in enumerate(rects):
                seen = tiny_vlm.decode_coordinates(patch_pixels(name, model, batch, image, token))
                # every original pixel read into the token has its centre in the rectangle
                # (NEAREST takes the pixel whose centre is within half a pixel)
                centres = seen + 0.5
                assert (centres[:, 0] >= x0 - 0.5).all() and (centres[:, 0] <= x1 + 0.5).all()
                assert (centres[:, 1] >= y0 - 0.5).all() and (centres[:, 1] <= y1 + 0.5).all()
                if len(seen) == 0:  # only the pad: the rectangle is empty
                    assert x0 == x1 or y0 == y1, (token, rects[token])
                checked += 1
    assert checked >= 4 * len(SIZES)  # every image of every prompt had its tokens checked


@pytest.mark.parametrize("name", ["qwen2_vl", "llava", "idefics3"])
def test_grid_rectangles_tile_the_view_without_gaps(models: dict[str, Any], name: str) -> None:
    model = models[name]
    for size in SIZES:
        batch = model.tokenize_images("describe it", [tiny_vlm.coordinate_image(*size)])
        (placed,) = batch.images
        # every token in exactly one grid
        listed = [t for grid in placed.grids for t in grid.tokens]
        assert sorted(listed) == list(range(len(placed.positions)))
        for grid in placed.grids:
            cells = placed.rectangles[list(grid.tokens)].reshape(grid.rows, grid.cols, 4)
            # neighbours share their edges: the grid tiles its view
            np.testing.assert_allclose(cells[:, 1:, 0], cells[:, :-1, 2])
            np.testing.assert_allclose(cells[1:, :, 1], cells[:-1, :, 3])
            left, top = cells[0, 0, 0], cells[0, 0, 1]
            right, bottom = cells[-1, -1, 2], cells[-1, -1, 3]
            if not name.startswith("llava"):  # the whole image: resized, never cropped
                assert (left, top, right, bottom) == (0, 0, size[0], size[1]), grid.name
            else:  # the centre square of the short side, to one resized pixel (the long
                # side's size is truncated: 200 x 131 becomes 45 x 30, so 30 px are 133 px)
                side, pixel = min(size), max(size) / 30 + 1
                assert right - left == pytest.approx(side, abs=pixel)
                assert bottom - top == pytest.approx(side, abs=pixel)
                assert left + right == pytest.approx(size[0], abs=pixel)
                assert top + bottom == pytest.approx(size[1], abs=pixel)
        if name == "idefics3":  # tiles put back together, and the global view
            assert [grid.name for grid in placed.grids] == ["tiles", "global"]


def test_a_prompt_that_places_another_number_of_images_is_a_clear_error(
    models: dict[str, Any],
) -> None:
    from attnviz.attention.errors import AttentionInputError

    model = models["llava"]
    picture = tiny_vlm.coordinate_image(40, 40)
    with pytest.raises(AttentionInputError) as raised:
        model.tokenize_images("<image> <image> what is in this picture", [picture])
    assert raised.value.field == "texts[0]" and "2 images" in str(raised.value)
    with pytest.raises(AttentionInputError) as raised:
        model.tokenize_images("describe it", [picture] * 9)
    assert raised.value.field == "images"


def test_a_model_loaded_in_python_is_wrapped_with_its_processor(
    models: dict[str, Any], folders: dict[str, Path]
) -> None:
    import transformers
    from attnviz.pretrained import ModelFormatError, wrap_model

    folder = folders["llava"]
    model = transformers.LlavaForConditionalGeneration.from_pretrained(folder)
    processor = transformers.AutoProcessor.from_pretrained(folder)
    with pytest.raises(ModelFormatError, match="pass its processor"):
        wrap_model(model, processor.tokenizer)
    wrapped = wrap_model(model, processor, name="mine")
    assert wrapped.family == "vision-language" and wrapped.model is model
    picture = [tiny_vlm.coordinate_image(47, 61)]
    mine = wrapped.run(wrapped.tokenize_images("describe it", picture), device="cpu")
    loaded = models["llava"]
    theirs = loaded.run(loaded.tokenize_images("describe it", picture), device="cpu")
    for layer in range(2):
        torch.testing.assert_close(
            mine.layer_weights("decoder", layer), theirs.layer_weights("decoder", layer)
        )


@pytest.mark.parametrize("name", ["llava", "qwen2_vl"])
def test_generation_with_an_image_equals_transformers_generate(
    models: dict[str, Any], folders: dict[str, Path], name: str
) -> None:
    """Greedy generation after a prompt with an image is transformers' own (Qwen: M-RoPE
    positions carried through the cache), and the maps of prompt + answer are the eager
    model's over the whole sequence."""
    model = models[name]
    picture = [tiny_vlm.coordinate_image(47, 61)]
    batch = model.tokenize_images("what is in this picture", picture)
    generated = model.generate(batch, 6, device="cpu", record_steps=False, record_pass=True)
    reference = eager_reference(folders[name])
    inputs = {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask.long(),
        **batch.model_inputs,
    }
    with torch.inference_mode():
        expected = reference.generate(
            **inputs, max_new_tokens=6, do_sample=False, eos_token_id=2, pad_token_id=0
        )
    assert generated.new_ids == expected[0, batch.input_ids.shape[1] :].tolist()
    assert generated.result is None  # the image encoder's calls are no step: run after
    whole = model.extended(batch, generated.new_ids)
    assert whole.model_inputs.keys() == batch.model_inputs.keys() and whole.images == batch.images
    result = model.run(whole, device="cpu")
    inputs = {
        "input_ids": whole.input_ids,
        "attention_mask": whole.attention_mask.long(),
        **whole.model_inputs,
    }
    with torch.inference_mode():
        eager = reference(**inputs, output_attentions=True)
    for layer, weights in enumerate(eager.attentions):
        torch.testing.assert_close(
            result.layer_weights("decoder", layer), weights, atol=1e-5, rtol=0
        )


def test_show_draws_a_prompt_with_an_image_as_the_api_does(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    import io

    from attnviz import show
    from attnviz.attention.errors import AttentionInputError

    from tests.pretrained.tiny import save_tiny

    picture = tiny_vlm.coordinate_image(47, 61)
    encoded = io.BytesIO()
    picture.save(encoded, format="PNG")
    path = tmp_path / "picture.png"
    path.write_bytes(encoded.getvalue())
    views = [
        show("what is in this picture", str(folders["qwen2_vl"]), image=given)
        for given in (picture, path, encoded.getvalue(), [picture])
    ]
    reference = eager_reference(folders["qwen2_vl"])
    from attnviz.pretrained import load_model_dir

    model = load_model_dir("reference", folders["qwen2_vl"])
    batch = model.tokenize_images("what is in this picture", [picture])
    inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask.long()}
    with torch.inference_mode():
        expected = reference(**inputs, **batch.model_inputs, output_attentions=True).attentions
    for view in views:
        assert view.details["images"] == [placed.payload() for placed in batch.images]
        assert view.details["tokens"] == batch.tokens[0]
        for layer, weights in enumerate(expected):
            np.testing.assert_allclose(view.maps[layer], weights[0].numpy(), atol=1e-5)
    gpt2 = save_tiny("gpt2", tmp_path / "gpt2")
    with pytest.raises(AttentionInputError) as raised:
        show("a cat", str(gpt2), image=picture)
    assert raised.value.field == "images" and "reads no images" in str(raised.value)
    with pytest.raises(AttentionInputError, match="merge_words"):
        show("describe it", str(folders["llava"]), image=picture, merge_words=True)


def test_image_share_is_the_text_rows_weight_on_the_image_tokens(
    models: dict[str, Any], folders: dict[str, Path]
) -> None:
    """Each head's image share against a brute-force sum over the eager model's weights,
    averaged over two image-prompt pairs."""
    from attnviz.pretrained.atlas.image_share import image_share, image_share_scores

    model = models["qwen2_vl"]
    pairs = [
        (tiny_vlm.coordinate_image(47, 61), "what is in this picture"),
        (tiny_vlm.coordinate_image(90, 33), "describe it"),
    ]
    scores = image_share_scores(model, pairs)
    assert scores.shape == (2, 2) and ((scores >= 0) & (scores <= 1)).all()
    reference = eager_reference(folders["qwen2_vl"])
    expected = np.zeros((2, 2))
    for picture, prompt in pairs:
        batch = model.tokenize_images(prompt, [picture])
        ids = batch.input_ids[0].tolist()
        inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask.long()}
        with torch.inference_mode():
            weights = reference(**inputs, **batch.model_inputs, output_attentions=True).attentions
        image = [i for i, t in enumerate(ids) if t == model.image_token_id]
        text = [q for q in range(len(ids)) if q > image[0] and q not in image]
        for layer in range(2):
            for head in range(2):
                rows = [sum(float(weights[layer][0, head, q, k]) for k in image) for q in text]
                expected[layer, head] += sum(rows) / len(rows) / len(pairs)
    np.testing.assert_allclose(scores, expected, atol=1e-6)
    # A head that looks only at the image scores 1, one that never does 0.
    mask = torch.tensor([False, True, True, False, False])
    only = torch.zeros(2, 5, 5)
    only[0, :, 1] = 1.0  # head 0: every row on image token 1
    only[1, :, 0] = 1.0  # head 1: every row on the text token before the image
    np.testing.assert_allclose(image_share(only, mask).numpy(), [1.0, 0.0])
    with pytest.raises(ValueError, match="no image token"):
        image_share(only, torch.zeros(5, dtype=torch.bool))


@pytest.mark.parametrize("name", ["smolvlm", "qwen2_vl"])
def test_a_pass_kept_for_tiles_keeps_the_decoder_alone_and_its_rows_are_exact(
    models: dict[str, Any], folders: dict[str, Path], name: str
) -> None:
    """What every view is drawn from: q, k and the log-sum-exp of the decoder's layers,
    not the image encoder's (SmolVLM's 5 views of 16 patches would double it)."""
    model = models[name]
    batch = model.tokenize_images("what is in this picture", [tiny_vlm.coordinate_image(47, 61)])
    result = model.run(batch, device="cpu", record=False, keep=True)
    assert result.kept is not None and len(result.kept.layers) == 2
    decoder = {id(m) for m in model.model.get_decoder().modules()}
    assert all(id(layer.module) in decoder for layer in result.kept.layers)
    inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask.long()}
    with torch.inference_mode():
        expected = eager_reference(folders[name])(
            **inputs, **batch.model_inputs, output_attentions=True
        ).attentions
    last = batch.input_ids.shape[1] - 1
    rows = result.query_rows("decoder", last)  # (N, 1, H, L) from the kept tiles
    for layer, weights in enumerate(expected):
        torch.testing.assert_close(rows[layer, 0], weights[0, :, last], atol=1e-5, rtol=0)


def test_every_family_loads_by_id_from_a_hand_made_offline_cache(
    folders: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each family's folder laid out as huggingface_hub lays out its cache
    (``models--org--name/refs/main``, ``snapshots/<commit>/``), ``HF_HUB_OFFLINE=1``:
    ``show(text, "org/name", image=...)`` draws the eager model's maps."""
    import shutil

    from attnviz import show

    commit = "0123456789abcdef0123456789abcdef01234567"
    cache = tmp_path / "hub"
    for name, folder in folders.items():
        stored = cache / f"models--tiny-org--{name}"
        shutil.copytree(folder, stored / "snapshots" / commit)
        (stored / "refs").mkdir()
        (stored / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    picture = tiny_vlm.coordinate_image(47, 61)
    for name in folders:
        view = show("what is in this picture", f"tiny-org/{name}", image=picture)
        snapshot = cache / f"models--tiny-org--{name}" / "snapshots" / commit
        from attnviz.pretrained import load_model_dir

        batch = load_model_dir("reference", snapshot).tokenize_images(
            "what is in this picture", [picture]
        )
        inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask.long()}
        with torch.inference_mode():
            expected = eager_reference(snapshot)(
                **inputs, **batch.model_inputs, output_attentions=True
            ).attentions
        assert view.details["images"] == [placed.payload() for placed in batch.images], name
        for layer, weights in enumerate(expected):
            np.testing.assert_allclose(view.maps[layer], weights[0].numpy(), atol=1e-5)

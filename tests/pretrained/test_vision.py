"""Vision transformers from local directories: ViT, DeiT, DINOv2 (with registers).

Tiny random models built from configs at test time; the reference is transformers' own
model with ``attn_implementation="eager"`` and ``output_attentions``, run on the same
pixel values, and a brute-force rollout written out here.
"""

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from attnviz.pretrained import ModelRegistry
from attnviz.pretrained.loading import load_model
from attnviz.pretrained.vision import ImageError, ImageFormatError, ImageModel, decode_image

from tests.pretrained.media import VISION_KINDS, png_bytes, save_tiny_vision
from tests.pretrained.support import require_modules


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_modules("transformers and Pillow", "transformers", "PIL")
    root = tmp_path_factory.mktemp("vision")
    made = {kind: save_tiny_vision(kind, root / kind) for kind in VISION_KINDS}
    made["vit-classifier"] = save_tiny_vision("vit", root / "vit-classifier", classifier=True)
    return made


def loaded(folders: dict[str, Path], kind: str, tmp_path: Path) -> ImageModel:
    model = load_model(kind, folders[kind], tmp_path, None)
    assert isinstance(model, ImageModel)
    return model


def rollout(attentions: list[torch.Tensor]) -> list[torch.Tensor]:
    """Brute force: R_n = Â_n ... Â_0, Â = (0.5 A + 0.5 I) rows renormalised, in float64."""
    out, product = [], None
    for layer in attentions:
        mean = layer[0].double().mean(0)
        step = 0.5 * mean + 0.5 * torch.eye(mean.shape[0], dtype=torch.float64)
        step = step / step.sum(-1, keepdim=True)
        product = step if product is None else step @ product
        out.append(product)
    return out


@pytest.mark.parametrize("kind", VISION_KINDS)
def test_every_head_equals_transformers_output_attentions(
    folders: dict[str, Path], kind: str, tmp_path: Path
) -> None:
    from transformers import AutoModel

    model = loaded(folders, kind, tmp_path)
    result = model.analyse(decode_image(png_bytes()), device="cpu")
    reference = AutoModel.from_pretrained(folders[kind], attn_implementation="eager").eval()
    with torch.inference_mode():
        out = reference(pixel_values=result.pixel_values, output_attentions=True)
    assert result.num_layers == len(out.attentions) == 2
    for layer, expected in enumerate(out.attentions):
        torch.testing.assert_close(result.weights(layer), expected[0], atol=1e-5, rtol=0)
    # A query's rows and its rollout rows, for [CLS] and a patch.
    brute = rollout(list(out.attentions))
    for query in (0, result.num_tokens - 1):
        rows = torch.stack([a[0, :, query] for a in out.attentions])
        torch.testing.assert_close(result.query_rows(query), rows, atol=1e-5, rtol=0)
        expected_rollout = torch.stack([r[query] for r in brute]).float()
        torch.testing.assert_close(result.rollout_rows(query), expected_rollout, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("kind", "prefix"),
    [
        ("vit", ["[CLS]"]),
        ("deit", ["[CLS]", "[DIST]"]),
        ("dinov2", ["[CLS]"]),
        ("dinov2_with_registers", ["[CLS]", "[REG1]", "[REG2]", "[REG3]", "[REG4]"]),
    ],
)
def test_tokens_are_the_prefix_then_the_patch_grid(
    folders: dict[str, Path], kind: str, prefix: list[str], tmp_path: Path
) -> None:
    model = loaded(folders, kind, tmp_path)
    result = model.analyse(decode_image(png_bytes(80, 40)), device="cpu")
    assert result.prefix == prefix
    assert result.grid == (4, 4)  # 32 px / 8 px patches
    assert result.num_tokens == len(prefix) + 16
    assert model.modality == "image"
    assert model.patch_size == 8


def test_the_picture_is_what_the_model_saw(folders: dict[str, Path], tmp_path: Path) -> None:
    import base64
    import io

    from PIL import Image

    model = loaded(folders, "vit", tmp_path)
    image = decode_image(png_bytes(64, 64))
    result = model.analyse(image, device="cpu")
    data = result.picture
    assert data.startswith("data:image/png;base64,")
    shown = Image.open(io.BytesIO(base64.b64decode(data.split(",", 1)[1])))
    assert shown.size == (32, 32)
    # The processor resized 64 -> 32 px; un-normalised, the picture is that resize.
    expected = np.asarray(image.resize((32, 32), Image.Resampling.BILINEAR), dtype=np.float64)
    assert np.abs(np.asarray(shown, dtype=np.float64) - expected).mean() < 2.0


def test_a_classifier_gives_its_top_labels(folders: dict[str, Path], tmp_path: Path) -> None:
    from transformers import AutoModelForImageClassification

    model = loaded(folders, "vit-classifier", tmp_path)
    result = model.analyse(decode_image(png_bytes()), device="cpu")
    reference = AutoModelForImageClassification.from_pretrained(folders["vit-classifier"]).eval()
    with torch.inference_mode():
        probabilities = reference(pixel_values=result.pixel_values).logits[0].softmax(-1)
    labels = dict(result.labels)
    assert set(labels) == {"cat", "dog", "bird"}
    for index, name in reference.config.id2label.items():
        assert labels[name] == pytest.approx(float(probabilities[index]), abs=1e-6)
    assert [p for _, p in result.labels] == sorted(labels.values(), reverse=True)


def broken_png() -> bytes:
    """A PNG whose image data chunk is corrupted (Pillow raises SyntaxError or zlib's error)."""
    data = bytearray(png_bytes(64, 64))
    start = data.index(b"IDAT") + 8
    data[start : start + 40] = bytes(40)
    return bytes(data)


@pytest.mark.parametrize(
    ("data", "refusal"),
    [
        (b"", ImageFormatError),
        (b"not an image", ImageFormatError),
        (b"GIF89a not really", ImageError),  # a GIF by its first bytes, but damaged
        (png_bytes()[:100], ImageError),
        (broken_png(), ImageError),
    ],
)
def test_what_is_not_an_image_is_refused_by_name(data: bytes, refusal: type) -> None:
    require_modules("Pillow", "PIL")
    with pytest.raises(refusal) as caught:
        decode_image(data)
    assert caught.value.field == "image"


def test_the_registry_offers_a_local_vit_directory(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    registry = ModelRegistry()
    registry.configure([folders["dinov2"]], packaged=False, cache_dir=tmp_path)
    registry.load()
    model = registry.get("dinov2")
    assert (model.modality, model.family, model.architecture) == ("image", "encoder", "dinov2")
    assert registry.first_of("image") == "dinov2"


def test_a_model_offered_again_is_not_warmed_again(
    folders: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loaders keep a model once per process (load_model): a second app's registry (a
    # test's client, a server configured anew) gets the same warm model, and its warm-up
    # pass (an image through the model) ran once, not once per configuration.
    from attnviz.pretrained.vision import ImageModel

    passes: list[str] = []
    analyse = ImageModel.analyse

    def counted(self: ImageModel, *args: Any, **kwargs: Any) -> Any:
        passes.append(self.name)
        return analyse(self, *args, **kwargs)

    monkeypatch.setattr(ImageModel, "analyse", counted)
    models = []
    for _ in range(3):
        registry = ModelRegistry()
        registry.configure([folders["deit"]], packaged=False, cache_dir=tmp_path)
        registry.load()
        models.append(registry.get("deit"))
    assert models[0] is models[1] is models[2]
    assert passes == ["deit"]
    assert models[0].attention_path_found


@pytest.mark.slow  # runs the demo script in a subprocess
def test_the_demo_vit_script_makes_a_directory_attnviz_loads(tmp_path: Path) -> None:
    import subprocess
    import sys

    folder = tmp_path / "demo-vit"
    script = Path(__file__).parents[2] / "scripts" / "demo_vit.py"
    subprocess.run([sys.executable, str(script), str(folder), "--steps", "3"], check=True)
    model = load_model("demo-vit", folder, tmp_path / "cache", None)
    assert isinstance(model, ImageModel)
    result = model.analyse(decode_image((folder / "shapes.png").read_bytes()), device="cpu")
    assert result.grid == (8, 8)
    assert [label for label, _ in result.labels] != []
    assert {label for label, _ in result.labels} == {"red", "green", "blue"}


@pytest.mark.parametrize("mode", ["L", "LA", "P", "RGBA", "I;16", "CMYK"])
def test_any_pillow_mode_becomes_rgb(mode: str) -> None:
    import io

    from PIL import Image

    require_modules("Pillow", "PIL")
    image = Image.open(io.BytesIO(png_bytes(40, 30))).convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG" if mode == "CMYK" else "PNG")  # PNG keeps I;16
    decoded = decode_image(buffer.getvalue())
    assert (decoded.mode, decoded.size) == ("RGB", (40, 30))


def test_a_photos_exif_orientation_is_applied() -> None:
    import io

    from PIL import Image

    require_modules("Pillow", "PIL")
    image = Image.open(io.BytesIO(png_bytes(60, 20))).convert("RGB")
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 degrees clockwise to display
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", exif=exif)
    assert decode_image(buffer.getvalue()).size == (20, 60)


def test_an_image_over_the_pixel_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnviz.pretrained import vision

    require_modules("Pillow", "PIL")
    from PIL import Image

    # Pillow's own bound, which the decoder lowers to half of this, is restored afterwards too:
    # it is process-wide, and a later test's PNG would be a "decompression bomb".
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)
    monkeypatch.setattr(vision, "MAX_IMAGE_PIXELS", 50 * 70 - 1)
    with pytest.raises(ImageError, match="over 3,499 pixels"):
        decode_image(png_bytes(50, 70))

"""Images in, attention over patches out: any local ViT, DeiT or DINOv2 directory.

A vision transformer cuts the image into p x p patches (a rows x cols grid, row-major)
and reads them as tokens after one or more prefix tokens: ViT's [CLS], DeiT's [CLS] and
distillation token, DINOv2-with-registers' [CLS] and register tokens. Token i >= P
(P prefix tokens) is patch (r, c) = divmod(i - P, cols). :class:`ImageModel` runs the
model with AttnViz's recorder, like every other model: each head's weights come from
the model's own eager attention, to 1e-5 of transformers' ``output_attentions``.

The image goes through the model's own image processor (resize, crop, normalise;
transformers' PIL backend, so no torchvision is needed); the picture returned is that
processed image, un-normalised, so an overlay lies exactly on what the model saw.
Attention rollout (Abnar & Zuidema, ACL 2020;
:func:`attnviz.attention.rollout.attention_rollout`) is given after every layer.
"""

from __future__ import annotations

import base64
import functools
import io
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

import numpy as np
import torch

from ..attention.errors import AttentionInputError, UnsupportedInputError
from ..attention.rollout import rollout_step
from .calls import AttentionRecording
from .model import LoadedModel, ModelFormatError
from .placement import Placement
from .recorder import record_attention

if TYPE_CHECKING:
    from PIL import Image

MAX_IMAGE_PIXELS: Final = 40_000_000
"""The most pixels an accepted image may decode to (a 48 Mpx phone photo is refused, a
12 Mpx one taken): Pillow's ``Image.MAX_IMAGE_PIXELS`` is set to half of it, so that
Pillow's own guard (``DecompressionBombError`` above twice its value) refuses a larger
canvas before a decoder allocates it."""
ACCEPTED_FORMATS: Final = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
"""The image formats an upload may be in (Pillow's names); any other is a 415: every
format Pillow can read is more code reading hostile bytes, and these cover photos,
screenshots and drawings."""
TOP_LABELS: Final = 5
IMAGE_FIELD: Final = "image"


class ImageError(AttentionInputError):
    """The upload is a damaged image, or too large (field ``image``)."""

    def __init__(self, message: str) -> None:
        super().__init__(IMAGE_FIELD, message)


class ImageFormatError(UnsupportedInputError):
    """The upload is not a PNG, JPEG, WebP, GIF or BMP image (field ``image``; a 415)."""

    def __init__(self, message: str) -> None:
        super().__init__(IMAGE_FIELD, message)


def _pillow_guard() -> None:
    """Set Pillow's decompression-bomb guard to :data:`MAX_IMAGE_PIXELS` (process-wide).

    Pillow raises ``DecompressionBombError`` for more than ``2 * Image.MAX_IMAGE_PIXELS``
    pixels, checked on the size the decoder will produce (after a GIF frame grows the
    canvas, before WebP's decoder allocates its canvas), and warns above
    ``Image.MAX_IMAGE_PIXELS``; the warning is silenced here, the error is the bound.
    """
    import warnings

    from PIL import Image

    if Image.MAX_IMAGE_PIXELS != MAX_IMAGE_PIXELS // 2:
        Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS // 2
        warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


def image_format(prefix: bytes) -> str | None:
    """Which of :data:`ACCEPTED_FORMATS` a file's first bytes say it is; None for others.

    Pillow's own sniffers decide (its plugins' ``_accept``).
    """
    from PIL import Image

    Image.init()
    for name in ACCEPTED_FORMATS:
        accept = Image.OPEN[name][1]
        if accept is None or accept(prefix):
            return name
    return None


def decode_image(data: bytes) -> Image.Image:
    """Read a PNG, JPEG, WebP, GIF (first frame) or BMP image as RGB.

    Only Pillow's plugins for :data:`ACCEPTED_FORMATS` ever read the bytes. The size is
    checked before any pixel is decoded, on the size the decoder will produce (not a
    container's claim: an ICO's directory, a GIF's logical screen), by Pillow's own guard
    and by :data:`MAX_IMAGE_PIXELS`. Greyscale, palette and RGBA images become RGB
    (transparency on black, as Pillow converts); a photo's EXIF orientation is applied,
    so it is upright as shown.

    Returns:
        A PIL RGB image of the file's size (width x height pixels).

    Raises:
        ImageFormatError: (415) not one of the accepted formats.
        ImageError: (422) a damaged image, or over :data:`MAX_IMAGE_PIXELS` pixels.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    _pillow_guard()
    known = image_format(data[:64])
    if known is None:
        raise ImageFormatError(
            "not a PNG, JPEG, WebP, GIF or BMP image (the formats accepted; convert it "
            "to one of them)"
        )
    try:
        with Image.open(io.BytesIO(data), formats=[known]) as image:
            width, height = image.size  # what the decoder will write, before decoding
            if width * height > MAX_IMAGE_PIXELS:
                raise ImageError(
                    f"the image is {width} x {height} pixels, over {MAX_IMAGE_PIXELS:,}"
                )
            upright = ImageOps.exif_transpose(image) or image
            return upright.convert("RGB")
    except ImageError:
        raise
    except Image.DecompressionBombError as error:
        raise ImageError(
            f"the image is over {MAX_IMAGE_PIXELS:,} pixels: Pillow refused it ({error})"
        ) from error
    except UnidentifiedImageError as error:
        raise ImageError(f"a damaged {known} file: Pillow cannot read it") from error
    # Pillow reports a damaged file in many ways (a broken PNG chunk is a SyntaxError).
    except (OSError, ValueError, SyntaxError, EOFError, struct.error, zlib.error) as error:
        raise ImageError(f"the {known} image cannot be read: {error}") from error


@dataclass
class ImageAttention:
    """One image through a vision transformer, its attention recorded.

    Attributes:
        pixel_values: (1, 3, height, width) the processor's output.
        grid: (rows, cols) of patches.
        prefix: the prefix tokens' names ("[CLS]", "[DIST]", "[REG1]", ...).
        recording: one call per layer.
        labels: a classifier's top labels and probabilities, else [].
        compute_ms: the forward pass's wall time, in ms.
        device: where it ran.
        image_mean: the processor's per-channel mean (undone for :meth:`picture`).
        image_std: the processor's per-channel standard deviation.
    """

    pixel_values: torch.Tensor
    grid: tuple[int, int]
    prefix: list[str]
    recording: AttentionRecording
    labels: list[tuple[str, float]]
    compute_ms: float
    device: str
    image_mean: tuple[float, ...]
    image_std: tuple[float, ...]

    @property
    def num_tokens(self) -> int:
        """L = prefix tokens + rows x cols patches."""
        return len(self.prefix) + self.grid[0] * self.grid[1]

    @property
    def num_layers(self) -> int:
        """N, the layers recorded."""
        return len(self.recording.calls)

    def weights(self, layer: int) -> torch.Tensor:
        """Every head of one layer: (H, L, L) float32 on the CPU, rows summing to 1."""
        return self.recording.layer_weights(layer)[0]

    def query_rows(self, query: int) -> torch.Tensor:
        """One token's row in every layer and head: (N, H, L) float32."""
        return torch.stack(
            [self.recording.layer_weights(n, query=query)[0, :, 0] for n in range(self.num_layers)]
        )

    @functools.cached_property
    def rollouts(self) -> torch.Tensor:
        """Attention rollout through layers 0..n, for each n: (N, L, L) float32.

        Computed once per image (every layer's maps, N products of L^3), so that a click
        on another patch of the same image reads rows of it.
        """
        out = []
        rollout = None
        for n in range(self.num_layers):
            rollout = rollout_step(rollout, self.weights(n).mean(dim=0, keepdim=True))
            out.append(rollout[0].float())
        return torch.stack(out)

    def rollout_rows(self, query: int) -> torch.Tensor:
        """Row ``query`` of attention rollout through layers 0..n, for each n: (N, L) float32."""
        return self.rollouts[:, query]

    @functools.cached_property
    def picture(self) -> str:
        """The processed image (what the model saw), un-normalised, as a PNG data URL.

        Made once per image, as :attr:`rollouts`.
        """
        from PIL import Image

        mean = torch.tensor(self.image_mean).view(3, 1, 1)
        std = torch.tensor(self.image_std).view(3, 1, 1)
        pixels = (self.pixel_values[0].cpu().float() * std + mean).clamp(0, 1)
        array = (pixels.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(array).save(buffer, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


@dataclass
class ImageModel(LoadedModel):
    """A vision transformer (ViT, DeiT, DINOv2) recording its attention over patches.

    Attributes (besides :class:`.model.LoadedModel`'s; no tokenizer):
        image_processor: its transformers image processor (PIL backend).
    """

    image_processor: Any = None
    modality: ClassVar[str] = "image"

    @property
    def patch_size(self) -> int:
        """p, the side of a patch in pixels."""
        size = self.config.patch_size
        return int(size[0] if isinstance(size, (list, tuple)) else size)

    @property
    def prefix_names(self) -> list[str]:
        """The tokens before the patches: [CLS], DeiT's [DIST], DINOv2's registers."""
        names = ["[CLS]"]
        if self.architecture == "deit":
            names.append("[DIST]")
        registers = int(getattr(self.config, "num_register_tokens", 0) or 0)
        return names + [f"[REG{i + 1}]" for i in range(registers)]

    def warm_up(self) -> None:
        """A grey image through the model (torch's lazy start-up), once per loaded model.

        As :meth:`.speech.SpeechModel.warm_up`: a model offered again is warm already.
        """
        if self.attention_path_found:
            return
        from PIL import Image

        self.analyse(Image.new("RGB", (64, 64), (128, 128, 128)), device="auto")
        self.attention_path_found = True

    def pixels(self, image: Image.Image) -> torch.Tensor:
        """``image`` as the model's own processor makes it: (1, 3, height, width) float32."""
        pixels: torch.Tensor = self.image_processor(images=image, return_tensors="pt")[
            "pixel_values"
        ]
        return pixels.float()

    def num_tokens(self, pixels: torch.Tensor) -> int:
        """The tokens the model will read for ``pixels``: prefix + rows x cols patches."""
        rows, cols = (side // self.patch_size for side in pixels.shape[-2:])
        return len(self.prefix_names) + rows * cols

    def analyse(
        self, image: Image.Image, *, device: str = "auto", pixels: torch.Tensor | None = None
    ) -> ImageAttention:
        """Process ``image`` as the model's own processor does and run it, recording.

        Args:
            image: an RGB image (:func:`decode_image`).
            device: "auto", "cpu" or "cuda".
            pixels: :meth:`pixels` of ``image``, when already made.

        Returns:
            An :class:`ImageAttention` (one recorded call per layer).

        Raises:
            AttentionInputError: (field ``device``) as
                :func:`attnviz.attention.engine.resolve_device`; (field ``model``) nothing
                was recorded, or the patches and tokens do not add up (an architecture
                whose token layout this module does not know).
        """
        run_on, model = self.placed_on(device)
        pixels = self.pixels(image) if pixels is None else pixels
        rows, cols = (side // self.patch_size for side in pixels.shape[-2:])
        start = time.perf_counter()
        with torch.inference_mode(), record_attention() as recording:
            outputs = model(pixel_values=pixels.to(run_on, self.dtype))
        compute_ms = (time.perf_counter() - start) * 1000.0
        prefix = self.prefix_names
        if not recording.calls:
            raise AttentionInputError("model", f"{self.name}: no attention layer was recorded")
        length = recording.calls[0].key.shape[-2]
        if length != len(prefix) + rows * cols:
            raise AttentionInputError(
                "model",
                f"{self.name}: {length} tokens are not {len(prefix)} prefix tokens and "
                f"{rows} x {cols} patches",
            )
        labels: list[tuple[str, float]] = []
        logits = getattr(outputs, "logits", None)
        id2label = getattr(self.config, "id2label", None) or {}
        if logits is not None:
            probabilities = logits[0].float().softmax(-1).cpu()
            top = probabilities.topk(min(TOP_LABELS, probabilities.numel()))
            labels = [
                (str(id2label.get(int(i), f"LABEL_{int(i)}")), float(p))
                for p, i in zip(top.values, top.indices, strict=True)
            ]
        processor = self.image_processor
        return ImageAttention(
            pixel_values=pixels,
            grid=(rows, cols),
            prefix=prefix,
            recording=recording,
            labels=labels,
            compute_ms=compute_ms,
            device=str(run_on),
            image_mean=tuple(getattr(processor, "image_mean", None) or (0.0, 0.0, 0.0)),
            image_std=tuple(getattr(processor, "image_std", None) or (1.0, 1.0, 1.0)),
        )


def load_vision_dir(
    name: str,
    folder: Path,
    config: Any,
    *,
    source: str | None = None,
    placement: Placement | None = None,
) -> ImageModel:
    """Load a local ViT / DeiT / DINOv2 directory with its image processor.

    A directory whose ``architectures`` name an image classifier loads with its head
    (``AutoModelForImageClassification``: the top labels come too); any other loads as
    the backbone (``AutoModel``). The caller puts the model in eval mode and on the
    recorder (as :func:`.loading.load_model_dir` does). ``placement`` says its dtype
    and devices (default: float32 on the CPU, or the checkpoint's dtype on CUDA).

    Raises:
        ModelFormatError: transformers cannot load the weights or the image processor
            (``preprocessor_config.json``), or Pillow is not installed.
        PlacementError: a placement accelerate cannot apply.
    """
    import transformers

    start = time.perf_counter()
    architectures = getattr(config, "architectures", None) or []
    auto = (
        transformers.AutoModelForImageClassification
        if any(a.endswith("ForImageClassification") for a in architectures)
        else transformers.AutoModel
    )
    try:
        processor = transformers.AutoImageProcessor.from_pretrained(  # type: ignore[no-untyped-call]
            folder, local_files_only=True, backend="pil"
        )
        placement = placement or Placement()
        model = auto.from_pretrained(
            folder, local_files_only=True, **placement.loading_options(config)
        )
    except ImportError as error:
        raise ModelFormatError(f"{folder}: reading images needs Pillow: {error}") from error
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ModelFormatError(f"{folder}: transformers cannot load it: {error}") from error
    return ImageModel(
        name=name,
        source=source or str(folder),
        path=folder,
        family="encoder",
        model=model,
        load_s=time.perf_counter() - start,
        placement=placement,
        reload=lambda device: auto.from_pretrained(
            folder, local_files_only=True, **placement.single_device(device, config)
        ),
        image_processor=processor,
    )

"""Where each image token of a vision-language prompt lies on the image it was read from.

A vision-language model's processor resizes (and crops, or pads) each image, cuts it into
p x p patches, and the image encoder turns each patch, or each m x m block of patches
after merging, into one token of the prompt. :class:`ImageTokens` gives, for every such
token, the rectangle of the *original* image it covers, so that any map over the image
tokens (one query's attention, a head's share) can be drawn on the picture the user gave.

Each family's geometry follows its processor, with transformers' own resize rules
(:func:`resized_size`):

* LLaVA 1.5 (``llava``; ``CLIPImageProcessor`` / ``LlavaImageProcessor``): optionally
  padded to a square (centred), resized (shortest edge, or a fixed size), centre-cropped;
  a (crop / p) x (crop / p) grid of patches, row-major; with
  ``vision_feature_select_strategy="full"`` the [CLS] token comes first and covers the
  whole cropped view (Liu et al. 2023, "Improved Baselines with Visual Instruction
  Tuning").
* LLaVA-NeXT (``llava_next``): a base view of the whole image, then the tiles of its
  "any resolution" crop with the padding cut off and a newline token per row
  (:func:`llava_next_geometry`).
* Qwen2-VL and Qwen2.5-VL (``qwen2_vl``, ``qwen2_5_vl``): resized to h x w, multiples of
  p * m ("smart resize", no crop); ``image_grid_thw`` = (1, h / p, w / p); the encoder
  merges each m x m block of patches into one token, so the tokens are an (h / pm) x
  (w / pm) grid, row-major (Wang et al. 2024, "Qwen2-VL", §2.1).
* Idefics3 and SmolVLM (``idefics3``, ``smolvlm``): the image cut into M x M tiles and a
  global view of the whole, each tile's patches merged s x s by pixel shuffle
  (:func:`idefics3_geometry`).
* Gemma 3 and PaliGemma (``gemma3``, ``paligemma``): the image resized to SigLIP's square,
  its patches (PaliGemma) or their 4 x 4 averages (Gemma 3) a grid, row-major.

Rectangles are ``(x0, y0, x1, y1)`` in the original image's pixels (x right, y down,
edges: a token over pixel columns 0..13 is x0 = 0, x1 = 14), clipped to the image (the
padding of a square pad covers no pixel: a token over it alone has an empty rectangle).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np


@dataclass(frozen=True)
class TokenGrid:
    """Some of an image's tokens that tile one view of it as a rows x cols grid.

    Attributes:
        name: which view: "image" (the whole picture), "tiles" (Idefics3's crops, put
            back together), "global" (Idefics3's downscaled whole picture).
        rows: the grid's rows.
        cols: its columns.
        tokens: (rows * cols,) for each cell, row-major, which of the image's tokens it
            is (an index into :attr:`ImageTokens.positions`).
    """

    name: str
    rows: int
    cols: int
    tokens: tuple[int, ...]

    def payload(self) -> dict[str, Any]:
        """The JSON form: ``name``, ``rows``, ``cols`` and ``tokens``."""
        return {
            "name": self.name,
            "rows": self.rows,
            "cols": self.cols,
            "tokens": list(self.tokens),
        }


def row_major(name: str, rows: int, cols: int, first: int = 0) -> TokenGrid:
    """A grid whose cells are the tokens ``first``, ``first + 1``, ... in row-major order."""
    return TokenGrid(name, rows, cols, tuple(range(first, first + rows * cols)))


@dataclass(frozen=True)
class ImageTokens:
    """One image's tokens in a prompt and the rectangle of the image each covers.

    Attributes:
        image: which image of the prompt (0 for the first).
        width: the original image's width, in pixels.
        height: its height, in pixels.
        positions: (n,) the tokens' positions in the prompt, in order.
        rectangles: (n, 4) float64, each token's ``(x0, y0, x1, y1)`` in original pixels.
        grids: the views its tokens tile (:class:`TokenGrid`): one for LLaVA and Qwen
            (LLaVA's [CLS], with the "full" strategy, is in none: it covers the whole
            view), Idefics3's tiles and its global view.
    """

    image: int
    width: int
    height: int
    positions: tuple[int, ...]
    rectangles: np.ndarray
    grids: tuple[TokenGrid, ...]

    def payload(self) -> dict[str, Any]:
        """The JSON form of the tokens of one image.

        Returns:
            ``image``, ``width``, ``height``, ``positions``, ``grids``
            (:meth:`TokenGrid.payload`) and ``rectangles`` (lists of 4 numbers, pixels).
        """
        return {
            "image": self.image,
            "width": self.width,
            "height": self.height,
            "positions": list(self.positions),
            "grids": [grid.payload() for grid in self.grids],
            "rectangles": [[round(float(v), 4) for v in row] for row in self.rectangles],
        }


@dataclass(frozen=True)
class Geometry:
    """The token rectangles of one image before they are placed in a prompt.

    Attributes:
        rectangles: (n, 4) float64 ``(x0, y0, x1, y1)`` in original pixels.
        grids: the views the n tokens tile (:class:`TokenGrid`).
    """

    rectangles: np.ndarray
    grids: tuple[TokenGrid, ...]


def _size_value(size: Any, key: str) -> int | None:
    value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
    return int(value) if value else None


def resized_size(size: Any, height: int, width: int, *, default_to_square: bool) -> tuple[int, int]:
    """(height, width) an image processor's ``resize`` gives an image of ``height`` x ``width``.

    As transformers' image processors choose it (``image_processing_backends``, the PIL
    backend's ``resize``), with transformers' own functions: shortest and longest edge
    (aspect kept), shortest edge alone, a maximum height and width, or a fixed size.

    Raises:
        ValueError: a ``size`` with none of those keys (as transformers raises).
    """
    from transformers.image_transforms import get_resize_output_image_size
    from transformers.image_utils import ChannelDimension, get_image_size_for_max_height_width

    shortest, longest = _size_value(size, "shortest_edge"), _size_value(size, "longest_edge")
    max_h, max_w = _size_value(size, "max_height"), _size_value(size, "max_width")
    fixed_h, fixed_w = _size_value(size, "height"), _size_value(size, "width")
    new: tuple[int, int]
    if shortest and longest:
        from transformers.image_transforms import get_size_with_aspect_ratio

        new = get_size_with_aspect_ratio((height, width), shortest, longest)
    elif shortest:
        new = get_resize_output_image_size(
            np.zeros((1, height, width), dtype=np.uint8),
            size=shortest,
            default_to_square=default_to_square,
            input_data_format=ChannelDimension.FIRST,
        )
    elif max_h and max_w:
        new = get_image_size_for_max_height_width((height, width), max_h, max_w)
    elif fixed_h and fixed_w:
        new = (fixed_h, fixed_w)
    else:
        raise ValueError(f"an image processor's size without a rule: {size}")
    return int(new[0]), int(new[1])


def _grid_rectangles(
    rows: int, cols: int, cell: tuple[float, float], origin: tuple[float, float]
) -> np.ndarray:
    """(rows * cols, 4) rectangles of a row-major grid of ``cell`` (w, h) from ``origin``."""
    r, c = np.divmod(np.arange(rows * cols, dtype=np.float64), cols)
    x0 = origin[0] + c * cell[0]
    y0 = origin[1] + r * cell[1]
    return np.stack([x0, y0, x0 + cell[0], y0 + cell[1]], axis=1)


def _to_original(
    rectangles: np.ndarray,
    scale: tuple[float, float],
    shift: tuple[float, float],
    size: tuple[int, int],
) -> np.ndarray:
    """Processed-image rectangles in original pixels.

    Times ``scale`` (x, y), minus ``shift`` (a pad's offset), clipped to ``size`` (width,
    height).
    """
    out = rectangles.copy()
    out[:, [0, 2]] = out[:, [0, 2]] * scale[0] - shift[0]
    out[:, [1, 3]] = out[:, [1, 3]] * scale[1] - shift[1]
    out[:, [0, 2]] = out[:, [0, 2]].clip(0, size[0])
    out[:, [1, 3]] = out[:, [1, 3]].clip(0, size[1])
    return out


def llava_geometry(
    image_processor: Any, config: Any, width: int, height: int, inputs: dict[str, Any], index: int
) -> Geometry:
    """LLaVA 1.5's tokens of one ``width`` x ``height`` image (module docstring).

    Args:
        image_processor: the processor's image processor (its size, crop and pad settings).
        config: the ``LlavaConfig`` (patch size, ``vision_feature_select_strategy``).
        width: the original image's width, in pixels.
        height: its height, in pixels.
        inputs: the processor's outputs (unused: LLaVA's grid follows the settings).
        index: which image of the prompt (unused).
    """
    padded = max(width, height) if getattr(image_processor, "do_pad", False) else None
    shift = (0.0, 0.0)
    base_w, base_h = width, height
    if padded is not None and width != height:
        # pad_to_square: the image centred on the long side's square, floor offsets
        if width > height:
            shift = (0.0, float((padded - height) // 2))
        else:
            shift = (float((padded - width) // 2), 0.0)
        base_w = base_h = padded
    new_h, new_w = base_h, base_w
    if getattr(image_processor, "do_resize", True):
        new_h, new_w = resized_size(
            image_processor.size, base_h, base_w,
            default_to_square=bool(getattr(image_processor, "default_to_square", True)),
        )  # fmt: skip
    top = left = 0
    view_h, view_w = new_h, new_w
    if getattr(image_processor, "do_center_crop", False):
        crop = image_processor.crop_size
        view_h, view_w = _size_value(crop, "height") or new_h, _size_value(crop, "width") or new_w
        # transformers' center_crop: floor offsets (negative where it pads a small image)
        top, left = (new_h - view_h) // 2, (new_w - view_w) // 2
    patch = int(config.vision_config.patch_size)
    rows, cols = view_h // patch, view_w // patch
    cells = _grid_rectangles(rows, cols, (patch, patch), (left, top))
    first = 0
    if getattr(config, "vision_feature_select_strategy", "default") == "full":
        whole = np.array([[left, top, left + cols * patch, top + rows * patch]], dtype=np.float64)
        cells = np.concatenate([whole, cells])
        first = 1
    scale = (base_w / new_w, base_h / new_h)
    rectangles = _to_original(cells, scale, shift, (width, height))
    return Geometry(rectangles, (row_major("image", rows, cols, first),))


def qwen_vl_geometry(
    image_processor: Any, config: Any, width: int, height: int, inputs: dict[str, Any], index: int
) -> Geometry:
    """Qwen2-VL's and Qwen2.5-VL's tokens of one image (module docstring).

    Args:
        image_processor: the processor's image processor (``patch_size``, ``merge_size``).
        config: the model's config (unused: the processor's sizes are what it read).
        width: the original image's width, in pixels.
        height: its height, in pixels.
        inputs: the processor's outputs: ``image_grid_thw`` (images, 3), (t, h/p, w/p).
        index: which image of the prompt.
    """
    patch = int(image_processor.patch_size)
    merge = int(image_processor.merge_size)
    _, grid_h, grid_w = (int(v) for v in inputs["image_grid_thw"][index])
    rows, cols = grid_h // merge, grid_w // merge
    cells = _grid_rectangles(rows, cols, (patch * merge, patch * merge), (0.0, 0.0))
    scale = (width / (grid_w * patch), height / (grid_h * patch))
    rectangles = _to_original(cells, scale, (0.0, 0.0), (width, height))
    return Geometry(rectangles, (row_major("image", rows, cols),))


def idefics3_geometry(
    image_processor: Any, config: Any, width: int, height: int, inputs: dict[str, Any], index: int
) -> Geometry:
    """Idefics3's and SmolVLM's tokens of one image: tiles, then a global view.

    The processor resizes the image (longest edge ``size["longest_edge"]``, both sides
    even, below transformers' ``MAX_IMAGE_SIZE``); with ``do_image_splitting`` it resizes
    it again to multiples of M = ``max_image_size["longest_edge"]`` and crops it into
    rows x cols tiles of M x M, row-major, then adds the whole image resized to M x M (the
    global view); without (or for an image that is one tile), the whole image resized to
    M x M alone. The vision encoder cuts each M x M view into (M/p)^2 patches, and the
    connector's pixel shuffle merges each s x s block of them into one token (s the
    config's ``scale_factor``): a g x g grid per view, g = M / (p s), row-major
    (transformers' ``Idefics3Connector.pixel_shuffle``; Laurençon et al. 2024, "Building and
    better understanding vision-language models", §2.2).

    Args:
        image_processor: the processor's image processor (its sizes and splitting).
        config: the model's config (``vision_config.patch_size``, ``scale_factor``).
        width: the original image's width, in pixels.
        height: its height, in pixels.
        inputs: the processor's outputs (unused: the sizes follow the settings).
        index: which image of the prompt (unused).
    """
    from transformers.models.idefics3 import image_processing_pil_idefics3 as rules

    side = int(image_processor.max_image_size["longest_edge"])
    h, w = height, width
    if getattr(image_processor, "do_resize", True):
        longest = _size_value(image_processor.size, "longest_edge")
        h, w = rules._resize_output_size_rescale_to_max_len(h, w, max_len=longest)
        h, w = rules._resize_output_size_scale_below_upper_bound(
            h,
            w,
            max_len=rules.MAX_IMAGE_SIZE,  # type: ignore[arg-type]
        )
    tiles = (0, 0)
    if getattr(image_processor, "do_image_splitting", True):
        # resize_for_vision_encoder: multiples of M, the long side first
        aspect = w / h
        if w >= h:
            w = math.ceil(w / side) * side
            h = math.ceil(int(w / aspect) / side) * side
        else:
            h = math.ceil(h / side) * side
            w = math.ceil(int(h * aspect) / side) * side
        if h > side or w > side:
            tiles = ((h - side) // side + 1, (w - side) // side + 1)
    patch = int(config.vision_config.patch_size) * int(config.scale_factor)
    g = side // patch
    per_view = g * g
    rows, cols = tiles
    rectangles = []
    grids = []
    if rows:
        scale = (width / w, height / h)
        for r in range(rows):
            for c in range(cols):
                cells = _grid_rectangles(g, g, (patch, patch), (c * side, r * side))
                rectangles.append(_to_original(cells, scale, (0.0, 0.0), (width, height)))
        # the tiles put back together: cell (R, C) of the (rows g) x (cols g) grid is tile
        # (R // g, C // g)'s token (R % g, C % g)
        order = [
            ((R // g) * cols + C // g) * per_view + (R % g) * g + C % g
            for R in range(rows * g)
            for C in range(cols * g)
        ]
        grids.append(TokenGrid("tiles", rows * g, cols * g, tuple(order)))
    cells = _grid_rectangles(g, g, (patch, patch), (0.0, 0.0))
    rectangles.append(
        _to_original(cells, (width / side, height / side), (0.0, 0.0), (width, height))
    )
    grids.append(row_major("global" if rows else "image", g, g, rows * cols * per_view))
    return Geometry(np.concatenate(rectangles), tuple(grids))


def _fixed_side(image_processor: Any) -> tuple[int, int]:
    """(height, width) of a processor that resizes every image to one size (SigLIP's)."""
    size = image_processor.size
    height, width = _size_value(size, "height"), _size_value(size, "width")
    if not (height and width):
        raise ValueError(f"an image processor without a fixed size: {size}")
    return height, width


def llava_next_geometry(
    image_processor: Any, config: Any, width: int, height: int, inputs: dict[str, Any], index: int
) -> Geometry:
    """LLaVA-NeXT's tokens of one image ("any resolution"): a base view, then tiles.

    The processor squashes the whole image to the vision encoder's S x S (the base view:
    an f x f grid, f = S / p), and resizes it, aspect kept, into the best of
    ``image_grid_pinpoints`` (transformers' ``select_best_resolution``), centred on its
    padding and cut into S x S tiles. The model lays the tiles' features out as one
    (rows f) x (cols f) map, cuts the padding's rows or columns off
    (``modeling_llava_next.unpad_image``, applied here to the map's cell numbers) and
    writes a newline token after each row (Liu et al. 2024, "LLaVA-NeXT: Improved
    reasoning, OCR, and world knowledge"; transformers' ``pack_image_features``). A newline
    token covers no pixel: its rectangle is the right edge of its row, zero wide.

    Args:
        image_processor: the processor's image processor (``image_grid_pinpoints``).
        config: the model's config (``vision_config``, ``image_grid_pinpoints``).
        width: the original image's width, in pixels.
        height: its height, in pixels.
        inputs: the processor's outputs (unused).
        index: which image of the prompt (unused).
    """
    import torch
    from transformers.image_processing_utils import get_patch_output_size, select_best_resolution
    from transformers.image_utils import ChannelDimension
    from transformers.models.llava_next.modeling_llava_next import (
        get_anyres_image_grid_shape,
        unpad_image,
    )

    side = int(config.vision_config.image_size)
    patch = int(config.vision_config.patch_size)
    f = side // patch
    base = _grid_rectangles(f, f, (width / f, height / f), (0.0, 0.0))
    best_h, best_w = select_best_resolution((height, width), image_processor.image_grid_pinpoints)
    new_h, new_w = get_patch_output_size(  # type: ignore[no-untyped-call]
        np.zeros((1, height, width), dtype=np.uint8), (best_h, best_w),
        input_data_format=ChannelDimension.FIRST,
    )  # fmt: skip
    paste_x, paste_y = (best_w - new_w) // 2, (best_h - new_h) // 2
    rows, cols = get_anyres_image_grid_shape(  # type: ignore[no-untyped-call]
        (height, width), config.image_grid_pinpoints, side
    )
    cells = torch.arange(rows * f * cols * f).view(1, rows * f, cols * f)
    kept = unpad_image(cells, (height, width))[0]  # type: ignore[no-untyped-call]
    scale = (width / new_w, height / new_h)
    shift = (paste_x * scale[0], paste_y * scale[1])
    tile_rects: list[list[float | None]] = []  # the map's kept cells (h', w'), row by row
    order: list[int] = []
    for row in kept.tolist():
        for number in row:
            r, c = divmod(number, cols * f)
            order.append(f * f + len(tile_rects))
            tile_rects.append([c * patch, r * patch, (c + 1) * patch, (r + 1) * patch])
        r = row[0] // (cols * f)
        tile_rects.append([None, r * patch, None, (r + 1) * patch])  # the row's newline
    spans = np.array(
        [[0 if v is None else v for v in rect] for rect in tile_rects], dtype=np.float64
    )
    placed = _to_original(spans, scale, shift, (width, height))
    newline = np.array([rect[0] is None for rect in tile_rects])
    placed[newline, 0] = placed[newline, 2] = width
    tiles = TokenGrid("tiles", int(kept.shape[0]), int(kept.shape[1]), tuple(order))
    return Geometry(np.concatenate([base, placed]), (row_major("global", f, f), tiles))


def gemma3_geometry(
    image_processor: Any, config: Any, width: int, height: int, inputs: dict[str, Any], index: int
) -> Geometry:
    """Gemma 3's tokens of one image: SigLIP's patches, average-pooled.

    The image resized to S x S (no crop), SigLIP's patches average-pooled to
    ``mm_tokens_per_image`` tokens, a square grid, row-major (transformers'
    ``Gemma3MultiModalProjector``; Gemma Team 2025, "Gemma 3 Technical
    Report", §2.1). Pan and scan's crops are not placed (the token count then disagrees
    and the model is refused with the counts).

    Args:
        image_processor: the processor's image processor (its fixed size).
        config: the model's config (``mm_tokens_per_image``).
        width: the original image's width, in pixels.
        height: its height, in pixels.
        inputs: the processor's outputs (unused).
        index: which image of the prompt (unused).
    """
    side_h, side_w = _fixed_side(image_processor)
    per_side = math.isqrt(int(config.mm_tokens_per_image))
    cells = _grid_rectangles(per_side, per_side, (side_w / per_side, side_h / per_side), (0.0, 0.0))
    rectangles = _to_original(cells, (width / side_w, height / side_h), (0.0, 0.0), (width, height))
    return Geometry(rectangles, (row_major("image", per_side, per_side),))


def paligemma_geometry(
    image_processor: Any, config: Any, width: int, height: int, inputs: dict[str, Any], index: int
) -> Geometry:
    """PaliGemma's tokens of one image: SigLIP's patches.

    Resized to S x S, SigLIP's (S / p)^2 patches, one token each, row-major (Beyer et al.
    2024, "PaliGemma: A versatile 3B VLM for transfer", §3.2).

    Args:
        image_processor: the processor's image processor (its fixed size).
        config: the model's config (``vision_config.patch_size``).
        width: the original image's width, in pixels.
        height: its height, in pixels.
        inputs: the processor's outputs (unused).
        index: which image of the prompt (unused).
    """
    side_h, side_w = _fixed_side(image_processor)
    patch = int(config.vision_config.patch_size)
    rows, cols = side_h // patch, side_w // patch
    cells = _grid_rectangles(rows, cols, (patch, patch), (0.0, 0.0))
    rectangles = _to_original(cells, (width / side_w, height / side_h), (0.0, 0.0), (width, height))
    return Geometry(rectangles, (row_major("image", rows, cols),))


GeometryRule = Callable[[Any, Any, int, int, dict[str, Any], int], Geometry]

GEOMETRIES: Final[dict[str, GeometryRule]] = {
    "llava": llava_geometry,
    "llava_next": llava_next_geometry,
    "qwen2_vl": qwen_vl_geometry,
    "qwen2_5_vl": qwen_vl_geometry,
    "qwen3_vl": qwen_vl_geometry,
    "idefics3": idefics3_geometry,
    "smolvlm": idefics3_geometry,
    "gemma3": gemma3_geometry,
    "paligemma": paligemma_geometry,
}
"""Each vision-language ``model_type`` AttnViz runs, and its image tokens' geometry."""

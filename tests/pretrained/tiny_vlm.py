"""Tiny random vision-language models with their processors, saved as local folders.

Each family AttnViz runs (LLaVA 1.5, Qwen2-VL, Qwen2.5-VL, Idefics3, SmolVLM) in a real
architecture's shape
with hidden size 16, built from configs (nothing downloaded), its image processor built
here, and a word-level tokenizer with the family's image tokens. The image processors
resample with NEAREST and neither rescale nor normalise, so a processed pixel is an
original pixel: a test can read which original pixel each image token saw
(:func:`coordinate_image`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

WORDS = "what is in this picture a cat sat on the mat and dog describe it".split()  # noqa: SIM905
LLAVA_SPECIALS = ("<pad>", "<s>", "</s>", "<unk>", "<image>")
QWEN_SPECIALS = (
    "<pad>", "<s>", "</s>", "<unk>", "<|image_pad|>", "<|vision_start|>", "<|vision_end|>",
    "<|video_pad|>",
)  # fmt: skip


def tokenizer(specials: tuple[str, ...], extra: dict[str, str]) -> Any:
    """A word-level tokenizer of :data:`WORDS` after ``specials`` (ids 0, 1, ...)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate([*specials, *WORDS])}
    model = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=model, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
        unk_token="<unk>", extra_special_tokens=extra,
    )  # fmt: skip


RAW = {"do_rescale": False, "do_normalize": False, "resample": 0}  # PIL NEAREST


def _text(kv: int = 1) -> dict[str, Any]:
    return {
        "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": kv, "bos_token_id": 1,
        "eos_token_id": 2, "pad_token_id": 0,
    }  # fmt: skip


def llava(folder: Path, *, pad: bool = False, strategy: str = "default") -> Path:
    """LLaVA 1.5: CLIP ViT (30 px, 6 px patches) + Llama; shortest edge 30, centre crop.

    ``pad``: ``LlavaImageProcessor`` pads to a square first (LLaVA 1.5's own setting);
    ``strategy``: ``vision_feature_select_strategy`` ("full" keeps [CLS]).
    """
    import transformers

    vision = transformers.CLIPVisionConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        image_size=30, patch_size=6, projection_dim=16,
    )  # fmt: skip
    config = transformers.LlavaConfig(
        vision_config=vision, text_config=transformers.LlamaConfig(**_text()),
        image_token_index=LLAVA_SPECIALS.index("<image>"), vision_feature_select_strategy=strategy,
        vision_feature_layer=-1,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.LlavaForConditionalGeneration(config).save_pretrained(folder)
    images = transformers.LlavaImageProcessorPil(
        size={"shortest_edge": 30}, crop_size={"height": 30, "width": 30}, do_pad=pad,
        image_mean=[0.0, 0.0, 0.0], image_std=[1.0, 1.0, 1.0], **RAW,
    )  # fmt: skip
    words = tokenizer(LLAVA_SPECIALS, {"image_token": "<image>"})
    processor = transformers.LlavaProcessor(
        image_processor=images, tokenizer=words, patch_size=6,
        vision_feature_select_strategy=strategy, num_additional_image_tokens=1,
        image_token="<image>",
    )  # fmt: skip
    processor.save_pretrained(folder)
    return folder


def llava_next(folder: Path) -> Path:
    """LLaVA-NeXT: CLIP ViT (30 px, 6 px patches) + Llama; "any resolution" tiles of 30 px
    in the best of 30 x 60, 60 x 30 and 60 x 60, after a base view of the whole image."""
    import transformers

    pinpoints = [[30, 60], [60, 30], [60, 60]]
    vision = transformers.CLIPVisionConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        image_size=30, patch_size=6, projection_dim=16,
    )  # fmt: skip
    config = transformers.LlavaNextConfig(
        vision_config=vision, text_config=transformers.LlamaConfig(**_text()),
        image_token_index=LLAVA_SPECIALS.index("<image>"), image_grid_pinpoints=pinpoints,
        vision_feature_layer=-1,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.LlavaNextForConditionalGeneration(config).save_pretrained(folder)
    images = transformers.LlavaNextImageProcessorPil(
        size={"shortest_edge": 30}, crop_size={"height": 30, "width": 30},
        image_grid_pinpoints=pinpoints, image_mean=[0.0, 0.0, 0.0], image_std=[1.0, 1.0, 1.0],
        **RAW,
    )  # fmt: skip
    transformers.LlavaNextProcessor(
        image_processor=images,
        tokenizer=tokenizer(LLAVA_SPECIALS, {"image_token": "<image>"}),
        patch_size=6,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        image_token="<image>",
    ).save_pretrained(folder)
    return folder


def qwen_vl(folder: Path, *, version: str = "qwen2_vl") -> Path:
    """Qwen2-VL or Qwen2.5-VL: 2 px patches merged 2 x 2, 16..4096 pixels (smart resize).

    Saved as its parts (image processor, tokenizer, ``processor_config.json``): the
    processor itself cannot be built here without torchvision (its video processor), as
    with a real checkpoint.
    """
    import transformers

    text = {**_text(), "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]}}
    ids = {
        "image_token_id": QWEN_SPECIALS.index("<|image_pad|>"),
        "video_token_id": QWEN_SPECIALS.index("<|video_pad|>"),
        "vision_start_token_id": QWEN_SPECIALS.index("<|vision_start|>"),
        "vision_end_token_id": QWEN_SPECIALS.index("<|vision_end|>"),
    }
    torch.manual_seed(0)
    if version == "qwen3_vl":
        text = {
            **_text(), "head_dim": 8,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                "mrope_section": [1, 1, 2], "mrope_interleaved": True},
        }  # fmt: skip
        vision = {
            "depth": 2, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2,
            "patch_size": 2, "out_hidden_size": 16, "num_position_embeddings": 64,
            "deepstack_visual_indexes": [0],
        }  # fmt: skip
        config = transformers.Qwen3VLConfig(text_config=text, vision_config=vision, **ids)
        transformers.Qwen3VLForConditionalGeneration(config).save_pretrained(folder)
    elif version == "qwen2_vl":
        vision = {"depth": 2, "embed_dim": 16, "hidden_size": 16, "num_heads": 2, "patch_size": 2}
        config = transformers.Qwen2VLConfig(text_config=text, vision_config=vision, **ids)
        transformers.Qwen2VLForConditionalGeneration(config).save_pretrained(folder)
    else:
        vision = {
            "depth": 2, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2,
            "patch_size": 2, "out_hidden_size": 16, "fullatt_block_indexes": [1],
            "window_size": 8,
        }  # fmt: skip
        config = transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids)
        transformers.Qwen2_5_VLForConditionalGeneration(config).save_pretrained(folder)
    images = transformers.Qwen2VLImageProcessorPil(
        patch_size=2, merge_size=2, temporal_patch_size=2, min_pixels=16, max_pixels=64 * 64,
        **RAW,
    )  # fmt: skip
    images.save_pretrained(folder)
    extra = {
        "image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
        "vision_start_token": "<|vision_start|>", "vision_end_token": "<|vision_end|>",
    }  # fmt: skip
    tokenizer(QWEN_SPECIALS, extra).save_pretrained(folder)
    name = {"qwen2_vl": "Qwen2VLProcessor", "qwen2_5_vl": "Qwen2_5_VLProcessor"}.get(
        version, "Qwen3VLProcessor"
    )
    (folder / "processor_config.json").write_text(json.dumps({"processor_class": name}))
    return folder


IDEFICS_SPECIALS = (
    "<pad>", "<s>", "</s>", "<unk>", "<image>", "<fake_token_around_image>", "<global-img>",
    "<end_of_utterance>", *(f"<row_{r}_col_{c}>" for r in range(1, 5) for c in range(1, 5)),
)  # fmt: skip


def idefics3(folder: Path, *, smol: bool = False) -> Path:
    """Idefics3 (or SmolVLM): a SigLIP-style encoder of 16 px views (4 px patches, merged
    2 x 2 by pixel shuffle: 2 x 2 tokens a view) and Llama; images resized to 32 px on the
    long side and cut into 16 px tiles plus a global view.

    SmolVLM's processor (it also reads video) is saved as its parts, as with Qwen.
    """
    import transformers

    prefix = "SmolVLM" if smol else "Idefics3"
    vision = getattr(transformers, f"{prefix}VisionConfig")(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        image_size=16, patch_size=4,
    )  # fmt: skip
    config = getattr(transformers, f"{prefix}Config")(
        vision_config=vision, text_config=transformers.LlamaConfig(**_text()),
        image_token_id=IDEFICS_SPECIALS.index("<image>"), scale_factor=2,
    )  # fmt: skip
    torch.manual_seed(0)
    getattr(transformers, f"{prefix}ForConditionalGeneration")(config).save_pretrained(folder)
    images = getattr(transformers, f"{prefix}ImageProcessorPil")(
        size={"longest_edge": 32}, max_image_size={"longest_edge": 16}, **RAW
    )
    extra = {
        "image_token": "<image>", "fake_image_token": "<fake_token_around_image>",
        "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>",
    }  # fmt: skip
    words = tokenizer(IDEFICS_SPECIALS, extra)
    words.add_tokens(list(IDEFICS_SPECIALS[8:]), special_tokens=True)  # <row_r_col_c> whole
    if smol:
        images.save_pretrained(folder)
        words.save_pretrained(folder)
        processor = {"processor_class": "SmolVLMProcessor", "image_seq_len": 4}
        (folder / "processor_config.json").write_text(json.dumps(processor))
    else:
        transformers.Idefics3Processor(
            image_processor=images, tokenizer=words, image_seq_len=4
        ).save_pretrained(folder)
    return folder


GEMMA_SPECIALS = (
    "<pad>", "<bos>", "<eos>", "<unk>", "<image_soft_token>", "<start_of_image>",
    "<end_of_image>", "<image>",
)  # fmt: skip


def _gemma_words(extra: dict[str, str]) -> Any:
    words = tokenizer(GEMMA_SPECIALS, extra)
    words.bos_token, words.eos_token = "<bos>", "<eos>"
    return words


def _gemma_text(transformers: Any, config_class: str) -> Any:
    return getattr(transformers, config_class)(
        **{**_text(), "bos_token_id": 1, "eos_token_id": 2}, head_dim=8,
        **({"sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]}
           if config_class == "Gemma3TextConfig" else {}),
    )  # fmt: skip


def gemma3(folder: Path) -> Path:
    """Gemma 3: SigLIP over 16 px images (4 px patches, pooled to 2 x 2 = 4 tokens), the
    Gemma 3 decoder (a sliding layer and a global one); image tokens attend both ways."""
    import transformers

    vision = transformers.SiglipVisionConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        image_size=16, patch_size=4,
    )  # fmt: skip
    config = transformers.Gemma3Config(
        vision_config=vision, text_config=_gemma_text(transformers, "Gemma3TextConfig"),
        mm_tokens_per_image=4, image_token_index=4, boi_token_index=5, eoi_token_index=6,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.Gemma3ForConditionalGeneration(config).save_pretrained(folder)
    images = transformers.Gemma3ImageProcessorPil(size={"height": 16, "width": 16}, **RAW)
    extra = {
        "image_token": "<image_soft_token>", "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
    }  # fmt: skip
    transformers.Gemma3Processor(
        image_processor=images, tokenizer=_gemma_words(extra), image_seq_length=4
    ).save_pretrained(folder)
    return folder


def paligemma(folder: Path) -> Path:
    """PaliGemma: SigLIP over 16 px images (4 px patches: 16 tokens) and Gemma; the image
    and the prompt are a prefix that attends both ways."""
    import transformers

    vision = transformers.SiglipVisionConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        image_size=16, patch_size=4, projection_dim=16,
    )  # fmt: skip
    config = transformers.PaliGemmaConfig(
        vision_config=vision, text_config=_gemma_text(transformers, "GemmaConfig"),
        image_token_index=GEMMA_SPECIALS.index("<image>"), projection_dim=16,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.PaliGemmaForConditionalGeneration(config).save_pretrained(folder)
    images = transformers.SiglipImageProcessorPil(size={"height": 16, "width": 16}, **RAW)
    images.image_seq_length = 16
    transformers.PaliGemmaProcessor(
        image_processor=images, tokenizer=_gemma_words({"image_token": "<image>"})
    ).save_pretrained(folder)
    return folder


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "llava": llava,
    "llava-padded-full": lambda folder: llava(folder, pad=True, strategy="full"),
    "llava_next": llava_next,
    "qwen2_vl": qwen_vl,
    "qwen2_5_vl": lambda folder: qwen_vl(folder, version="qwen2_5_vl"),
    "qwen3_vl": lambda folder: qwen_vl(folder, version="qwen3_vl"),
    "idefics3": idefics3,
    "smolvlm": lambda folder: idefics3(folder, smol=True),
    "gemma3": gemma3,
    "paligemma": paligemma,
}
"""Each tiny vision-language folder the tests load, by name."""


def coordinate_image(width: int, height: int) -> Any:
    """An RGB image whose pixel (x, y) holds its coordinates: R = x % 256, G = y % 256,
    B = 1 + 16 * (x // 256) + y // 256 (B = 0 is no pixel of the image: a pad)."""
    from PIL import Image

    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([x % 256, y % 256, 1 + 16 * (x // 256) + y // 256], axis=-1)
    return Image.fromarray(pixels.astype(np.uint8), "RGB")


def decode_coordinates(rgb: np.ndarray) -> np.ndarray:
    """(n, 3) processed pixel values of a :func:`coordinate_image` -> (m, 2) (x, y) of the
    original pixels among them (pads, B = 0, left out)."""
    rgb = np.rint(rgb).astype(np.int64)
    real = rgb[:, 2] > 0
    high = rgb[real, 2] - 1
    return np.stack([rgb[real, 0] + 256 * (high // 16), rgb[real, 1] + 256 * (high % 16)], axis=1)

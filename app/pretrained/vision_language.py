"""Images and a prompt in, the decoder's attention over text and image tokens out.

A vision-language model (LLaVA 1.5, Qwen2-VL, Qwen2.5-VL, Idefics3, SmolVLM) is an image
encoder whose outputs stand in for the image tokens of a decoder's prompt (Liu et al. 2023, "Visual
Instruction Tuning"): the processor writes each image as n copies of an image token, one
per patch (or merged block of patches), and the model replaces their embeddings with the
encoder's. :class:`VisionLanguageModel` is a :class:`.model.PretrainedModel` whose
prompts may hold images (:meth:`VisionLanguageModel.tokenize_images`): the decoder's
layers are recorded as any decoder's, every head's weights over the whole prompt, text
and image tokens alike, exact to the model's own eager ``output_attentions``. The image
encoder's own attention is in no block (:meth:`VisionLanguageModel.block_of`).

Each image's tokens come with the rectangle of the original image each covers
(:mod:`.image_tokens`), so a map over them can be drawn on the picture.

The processor is the model's own (``AutoProcessor``). transformers builds Qwen2-VL's with
a video processor, which needs torchvision; AttnViz reads images only, so where that is
what fails, the processor is built from its image processor, tokenizer and chat template
with no video processor (:func:`load_processor`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import torch
from torch import nn

from ..attention.errors import AttentionInputError, UnsupportedInputError
from .blocks import Block
from .families import FamilySpec
from .image_tokens import GEOMETRIES, ImageTokens
from .loaded import ModelFormatError
from .model import PretrainedModel
from .tokens import TokenizedBatch, word_numbers

if TYPE_CHECKING:
    from PIL import Image
    from transformers import PreTrainedModel

MAX_IMAGES: Final = 8
"""The most images one prompt may hold."""
IMAGES_FIELD: Final = "images"
PLACEHOLDERS: Final[dict[str, str]] = {
    "llava": "{image}\n",
    "llava_next": "{image}\n",
    "qwen2_vl": "<|vision_start|>{image}<|vision_end|>",
    "qwen2_5_vl": "<|vision_start|>{image}<|vision_end|>",
    "qwen3_vl": "<|vision_start|>{image}<|vision_end|>",
    "idefics3": "{image}",
    "smolvlm": "{image}",
    "gemma3": "{image}\n",
    "paligemma": "{image}",
}
"""How a prompt without a chat template marks one image (``{image}``: the processor's
image mark, :data:`MARKS`), before the text: LLaVA 1.5's ``<image>\\n``, Qwen's vision
markers."""
MARKS: Final[dict[str, str]] = {"gemma3": "boi_token"}
"""The processor's attribute whose token marks an image in a text, where it is not the
image token itself (Gemma 3 writes ``<start_of_image>``, which its processor expands)."""
PREFIX_TYPES: Final = frozenset({"gemma3", "paligemma"})
"""Vision-language model types whose image tokens attend both ways (Gemma 3: within each
image; PaliGemma: the image and the prompt, a prefix): their decoder block is not causal."""


def decode_prompt_images(encoded: Sequence[str]) -> list[Image.Image]:
    """A request's base64 images (a ``data:`` URL's header allowed), decoded and checked.

    Each goes through :func:`.vision.decode_image` (the accepted formats, Pillow's size
    guard before any pixel is decoded, at most :data:`.vision.MAX_IMAGE_PIXELS`).

    Raises:
        UnsupportedInputError: (field ``images[i]``, a 415) not an accepted format.
        AttentionInputError: (field ``images[i]``) not base64, or a damaged or too large
            image.
    """
    import base64
    import binascii

    from .vision import decode_image

    images = []
    for i, text in enumerate(encoded):
        field_name = f"{IMAGES_FIELD}[{i}]"
        body = text.split(",", 1)[1] if text.startswith("data:") and "," in text else text
        try:
            data = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as error:
            raise AttentionInputError(field_name, f"not base64 ({error})") from error
        try:
            images.append(decode_image(data))
        except UnsupportedInputError as error:
            raise UnsupportedInputError(field_name, error.message) from error
        except AttentionInputError as error:
            raise AttentionInputError(field_name, error.message) from error
    return images


def image_prompt(
    model: Any,
    texts: Sequence[str],
    images: Sequence[Image.Image],
    *,
    chat: bool = False,
    removes_tokens: bool = False,
) -> TokenizedBatch:
    """The one text of a request with its decoded images, as ``model`` reads them.

    What the API (``images``) and :func:`attnviz.show` (``image``) check before
    :meth:`VisionLanguageModel.tokenize_images`.

    Args:
        model: the requested model (any :class:`.loaded.LoadedModel`).
        texts: the request's texts: one.
        images: RGB images (:func:`decode_prompt_images`, :func:`.vision.decode_image`).
        chat: the prompt as a user turn in the chat template.
        removes_tokens: whether an option hides or merges tokens (``hide_special_tokens``,
            ``merge_words``).

    Raises:
        AttentionInputError: (field ``images``) a model that reads no images, more than one
            text, or an option that removes or merges tokens (the image tokens keep their
            positions); as :meth:`VisionLanguageModel.tokenize_images`.
    """
    if not isinstance(model, VisionLanguageModel):
        raise AttentionInputError(
            IMAGES_FIELD, f"{model.name} is {model.described}, which reads no images"
        )
    if len(texts) != 1:
        raise AttentionInputError(IMAGES_FIELD, f"images go with one text; {len(texts)} were given")
    if removes_tokens:
        raise AttentionInputError(
            IMAGES_FIELD,
            "hide_special_tokens or merge_words with images: the image tokens keep their positions",
        )
    return model.tokenize_images(texts[0], images, chat=chat)


def runs_vision_language(model_type: str) -> bool:
    """Whether AttnViz runs a vision-language ``model_type`` (its geometry is known)."""
    return model_type in GEOMETRIES


def _images_only(processor_class: type) -> type:
    """``processor_class``, taking no video processor.

    None is not checked against transformers' video processor class, which needs
    torchvision.
    """

    def check(self: Any, name: str, argument: Any) -> Any:
        if argument is None and name == "video_processor":
            return None
        own = processor_class.check_argument_for_proper_class  # type: ignore[attr-defined]
        return own(self, name, argument)

    return type(
        processor_class.__name__, (processor_class,), {"check_argument_for_proper_class": check}
    )


def load_processor(folder: Path) -> Any:
    """The model's processor (image processor, tokenizer, chat template) from ``folder``.

    ``AutoProcessor`` first; where it fails because the processor also reads video and
    transformers' video processors need torchvision (Qwen2-VL), the same processor class
    with its image processor, tokenizer, chat template and ``processor_config.json``'s
    settings (SmolVLM's ``image_seq_len``) and no video processor.

    Raises:
        ModelFormatError: no processor can be built from the folder (the error named).
    """
    import transformers

    try:
        return transformers.AutoProcessor.from_pretrained(  # type: ignore[no-untyped-call]
            folder, local_files_only=True
        )
    except Exception as error:  # transformers raises ValueError, TypeError, AttributeError
        first = error
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        from transformers.models.auto import processing_auto

        names: dict[str, str] = processing_auto.PROCESSOR_MAPPING_NAMES  # type: ignore[attr-defined]
        name = names.get(config.model_type)
        if name is None:
            raise first
        processor_class = _images_only(getattr(transformers, name))
        image_processor = transformers.AutoImageProcessor.from_pretrained(  # type: ignore[no-untyped-call]
            folder, local_files_only=True
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
        template = getattr(tokenizer, "chat_template", None)
        options: dict[str, Any] = {"chat_template": template} if template else {}
        saved = folder / "processor_config.json"  # the processor's own settings
        if saved.is_file():
            settings = json.loads(saved.read_text(encoding="utf-8"))
            options.update({k: v for k, v in settings.items() if k != "processor_class"})
        return processor_class(
            image_processor=image_processor, tokenizer=tokenizer, video_processor=None, **options
        )
    except Exception as error:
        raise ModelFormatError(
            f"{folder}: no processor for its images ({type(first).__name__}: {first}; "
            f"without video: {type(error).__name__}: {error})"
        ) from error


@dataclass
class VisionLanguageModel(PretrainedModel):
    """A vision-language model, its processor, and its decoder's attention over text and images.

    Attributes (besides :class:`.model.PretrainedModel`'s):
        processor: the model's processor (image processor, tokenizer, chat template).
    """

    processor: Any = field(kw_only=True)

    @property
    def config(self) -> Any:
        """The text decoder's config (its layers, heads, vocabulary and positions)."""
        return self.model.config.get_text_config()

    @property
    def architecture(self) -> str:
        """The vision-language ``model_type`` ("llava", "qwen2_vl", ...)."""
        return str(self.model.config.model_type)

    @property
    def spec(self) -> FamilySpec:
        """The family's spec; not causal where image tokens attend both ways (PREFIX_TYPES)."""
        spec = super().spec
        if self.architecture in PREFIX_TYPES:
            return replace(spec, causal_blocks=())
        return spec

    @property
    def image_mark(self) -> str:
        """The token placing an image in a text (``<image>``; Gemma 3's ``<start_of_image>``)."""
        return str(getattr(self.processor, MARKS.get(self.architecture, "image_token")))

    @property
    def image_token_id(self) -> int:
        """The id of the token the processor writes once per image token."""
        config = self.model.config
        value = getattr(config, "image_token_id", None)
        if value is None:
            value = config.image_token_index
        return int(value)

    def block_of(self, model: PreTrainedModel) -> Callable[[nn.Module], Block | None]:
        """The text decoder's attention modules are in "decoder", the image encoder's in none."""
        decoder = {id(m) for m in model.get_decoder().modules()}  # type: ignore[no-untyped-call]
        return lambda module: "decoder" if id(module) in decoder else None

    def prompt_with_images(self, text: str, count: int, *, chat: bool) -> str:
        """``text`` with ``count`` images before it, as the model expects them.

        A text that already holds the image mark (:attr:`image_mark`) is taken as it is; else
        a chat prompt puts the images in the user's turn (the chat template's own
        markers), and a plain one writes :data:`PLACEHOLDERS` before the text.

        Raises:
            AttentionInputError: (field ``chat``) a chat prompt for a processor without a
                chat template.
        """
        image_token = self.image_mark
        if count == 0 or image_token in text:
            return text
        if chat:
            if not getattr(self.processor, "chat_template", None):
                raise AttentionInputError("chat", f"model {self.name!r} has no chat template")
            content = [{"type": "image"}] * count + [{"type": "text", "text": text}]
            return str(
                self.processor.apply_chat_template(
                    [{"role": "user", "content": content}],
                    tokenize=False,
                    add_generation_prompt=True,
                )
            )
        mark = PLACEHOLDERS[self.architecture].format(image=image_token)
        return mark * count + text

    def tokenize_images(
        self, text: str, images: Sequence[Image.Image], *, chat: bool = False
    ) -> TokenizedBatch:
        """One prompt with its images, as the model's processor writes them (B = 1).

        Args:
            text: the prompt; the processor's image token in it places each image,
                else the images come before it (:meth:`prompt_with_images`).
            images: RGB images (:func:`.vision.decode_image`), at most :data:`MAX_IMAGES`.
            chat: wrap the prompt as a user turn in the chat template.

        Returns:
            A :class:`.tokens.TokenizedBatch` (B = 1) with the processor's other outputs
            in ``model_inputs`` and each image's tokens in ``images``, their rectangles
            of the original image (:mod:`.image_tokens`).

        Raises:
            AttentionInputError: (field ``texts[0]``) an empty prompt, a number of image
                tokens in the text that is not the number of images, or more tokens than
                the model's positions; (``images``) more than :data:`MAX_IMAGES`.
        """
        if not text.strip():
            raise AttentionInputError("texts[0]", "the text is empty")
        if len(images) > MAX_IMAGES:
            raise AttentionInputError(
                IMAGES_FIELD, f"{len(images)} images; a prompt takes at most {MAX_IMAGES}"
            )
        prompt = self.prompt_with_images(text, len(images), chat=chat)
        marked = prompt.count(self.image_mark)
        if marked != len(images):
            raise AttentionInputError(
                "texts[0]",
                f"the prompt places {marked} images ({self.image_mark!r}) but "
                f"{len(images)} were given",
            )
        encoded = self.processor(
            images=list(images) or None, text=[prompt], return_tensors="pt",
            add_special_tokens=not chat,
        )  # fmt: skip
        input_ids = encoded["input_ids"].to(torch.int64)
        length = int(input_ids.shape[1])
        if self.max_tokens is not None and length > self.max_tokens:
            raise AttentionInputError(
                "texts[0]",
                f"{length} tokens with the images; {self.name} takes at most "
                f"{self.max_tokens} (max_position_embeddings)",
            )
        attention_mask = encoded["attention_mask"].to(torch.bool)
        special = ~attention_mask
        for token_id in self.special_ids | {self.image_token_id}:
            special |= input_ids == token_id
        others = {
            name: value
            for name, value in encoded.items()
            if name not in ("input_ids", "attention_mask") and isinstance(value, torch.Tensor)
        }
        batch = TokenizedBatch(
            tokens=[self.token_strings(input_ids[0].tolist())],
            input_ids=input_ids,
            token_type_ids=torch.zeros_like(input_ids),
            attention_mask=attention_mask,
            special_tokens_mask=special,
            word_ids=[word_numbers([None] * length, special[0].tolist(), length)],
            model_inputs=others,
        )
        return TokenizedBatch(**{**batch.__dict__, "images": self.image_tokens(batch, images)})

    def image_tokens(
        self, batch: TokenizedBatch, images: Sequence[Image.Image]
    ) -> list[ImageTokens]:
        """Each image's token positions in ``batch`` (B = 1) and their rectangles.

        Raises:
            ModelFormatError: the processor wrote another number of image tokens than the
                family's geometry gives (a processor AttnViz does not know).
        """
        positions = (batch.input_ids[0] == self.image_token_id).nonzero().flatten().tolist()
        rule = GEOMETRIES[self.architecture]
        placed: list[ImageTokens] = []
        start = 0
        for index, image in enumerate(images):
            width, height = image.size
            geometry = rule(
                self.processor.image_processor, self.model.config, width, height,
                batch.model_inputs, index,
            )  # fmt: skip
            count = len(geometry.rectangles)
            if start + count > len(positions):
                break
            placed.append(
                ImageTokens(
                    image=index,
                    width=width,
                    height=height,
                    positions=tuple(positions[start : start + count]),
                    rectangles=geometry.rectangles,
                    grids=geometry.grids,
                )
            )
            start += count
        if start != len(positions) or len(placed) != len(images):
            raise ModelFormatError(
                f"{self.name}: its processor wrote {len(positions)} image tokens for "
                f"{len(images)} images, not the {start} AttnViz places for a "
                f"{self.architecture} model"
            )
        return placed

    def forward_inputs(
        self, batch: TokenizedBatch, targets: TokenizedBatch | None, device: torch.device
    ) -> dict[str, torch.Tensor]:
        """A decoder's inputs and the processor's others (the pixels in the model's dtype)."""
        inputs = super().forward_inputs(batch, targets, device)
        for name, value in batch.model_inputs.items():
            moved = value.to(device)
            inputs[name] = moved.to(self.dtype) if moved.is_floating_point() else moved
        return inputs

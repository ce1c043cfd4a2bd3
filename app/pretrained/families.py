"""The model families AttnViz runs, each described once: one :class:`FamilySpec` per family.

A family is how a model reads its input and what its forward pass gives back:

* ``"encoder"`` (BERT, RoBERTa, DistilBERT, ViT, ...): one bidirectional block over the
  input; sentence pairs (segment ids); no head over a vocabulary, so a gradient method
  explains an embedding score.
* ``"decoder"`` (GPT-2, Llama, Qwen2, Mistral, SmolLM2, ...): one causal block; it continues
  a prompt (generation, next-token predictions); its backbone runs apart from its output
  head, so that only the positions asked for are projected onto the vocabulary.
* ``"encoder-decoder"`` (T5, BART, Marian, Whisper): encoder self-attention over the
  source, causal decoder self-attention over a teacher-forced target
  (``decoder_input_ids``) and cross attention from the target to the source (Vaswani et
  al. 2017, "Attention Is All You Need", §3.2.3).
* ``"vision-language"`` (LLaVA, Qwen2-VL, Qwen2.5-VL, Idefics3, SmolVLM): an image
  encoder whose outputs stand in for the image tokens of a decoder's prompt (Liu et al.
  2023, "Visual Instruction Tuning"); the decoder's causal block over text and image
  tokens, a decoder otherwise (:mod:`.vision_language`).

Whatever differs between families (the forward inputs, the decoder inputs, the blocks
and their shapes, generation, a gradient method's target, what the page asks for) is
read from the spec. No module outside this one compares a family's name
(``tests/pretrained/test_family_registry.py`` scans app/ and static/js/), and the page
reads :meth:`FamilySpec.page` from each model's description (``GET /api/v1/models``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from .blocks import BLOCKS, Block, Family

Outputs = Literal["hidden", "next-token", "target-logits"]
"""What a family's pass gives after its blocks: the last hidden states (an encoder); the
backbone's hidden states with the output head to apply at chosen positions (a decoder);
the logits over the teacher-forced target (an encoder-decoder)."""


@dataclass(frozen=True)
class BlockShape:
    """Where a block's depth and head count are in the config (BART's and T5's decoders').

    Names are tried in order and the first that holds an int wins; else the block has the
    model's ``num_hidden_layers`` / ``num_attention_heads``.
    """

    layers: tuple[str, ...] = ()
    heads: tuple[str, ...] = ()


@dataclass(frozen=True)
class FamilySpec:
    """One family: its blocks, its inputs and what its pass returns.

    Attributes:
        name: the family (:data:`.blocks.Family`).
        described: the family with its article, for messages ("an encoder").
        auto_class: the transformers auto class that loads it (``AutoModel``,
            ``AutoModelForCausalLM``, ``AutoModelForSeq2SeqLM``,
            ``AutoModelForImageTextToText``).
        text_pairs: whether it reads sentence pairs (``text_pairs``; segment ids as
            ``token_type_ids`` where the model's forward takes them).
        targets: whether its pass needs the decoder's input, a teacher-forced target text
            (``decoder_input_ids``, ``decoder_attention_mask``).
        generates: whether it continues a prompt token by token (``max_new_tokens``,
            top-k next tokens).
        outputs: what its pass gives after the blocks (:data:`Outputs`).
        gradient_target: what a gradient method explains by default: an ``"embedding"``
            score (of the first token) or a next-token ``"logit"`` (of the last word).
        output_attentions: each block's field in the model's own ``output_attentions``
            outputs (``attentions``; ``encoder_attentions``, ``decoder_attentions``,
            ``cross_attentions``).
        block_shapes: per block, where its depth and head count are in the config
            (:class:`BlockShape`); a block not listed has the model's.
        grouped_kv: whether its attention may share key/value heads among query heads
            (``num_key_value_heads``, grouped-query attention); if not, every block has
            one key/value head per query head.
        causal_blocks: the blocks whose maps are causal (no query sees a later key).
        input_label: what the page calls one input: "prompt", "sentence" or "text".
        scored_block: the block whose self-attention the head atlas scores: one that
            reads the text alone (an encoder-decoder's encoder, not its decoder).
        reads_images: whether a prompt may hold images (``images``), read by an image
            encoder into the prompt's image tokens.
    """

    name: Family
    described: str
    auto_class: str
    text_pairs: bool
    targets: bool
    generates: bool
    outputs: Outputs
    gradient_target: Literal["embedding", "logit"]
    output_attentions: dict[Block, str]
    grouped_kv: bool
    causal_blocks: tuple[Block, ...]
    input_label: Literal["prompt", "sentence", "text"]
    scored_block: Block
    block_shapes: dict[Block, BlockShape] = field(default_factory=dict)
    reads_images: bool = False

    @property
    def blocks(self) -> tuple[Block, ...]:
        """The attention blocks in the order the model runs them; the first is the default."""
        return BLOCKS[self.name]

    @property
    def reads_text_output(self) -> bool:
        """Whether its pass predicts text (next tokens, a target): it has logits to explain."""
        return self.outputs != "hidden"

    def page(self) -> dict[str, Any]:
        """What the /models page reads of the family (``family_spec`` in ``GET /api/v1/models``).

        Returns:
            A JSON object: ``name``, ``blocks``, ``text_pairs``, ``targets``,
            ``generates``, ``causal_blocks``, ``input_label``, ``gradient_target`` and
            ``reads_images``.
        """
        return {
            "name": self.name,
            "blocks": list(self.blocks),
            "text_pairs": self.text_pairs,
            "targets": self.targets,
            "generates": self.generates,
            "causal_blocks": list(self.causal_blocks),
            "input_label": self.input_label,
            "gradient_target": self.gradient_target,
            "reads_images": self.reads_images,
        }


_DECODER_SHAPE = BlockShape(
    layers=("num_decoder_layers", "decoder_layers"), heads=("decoder_attention_heads", "num_heads")
)
_DECODER = FamilySpec(
    name="decoder",
    described="a decoder",
    auto_class="AutoModelForCausalLM",
    text_pairs=False,
    targets=False,
    generates=True,
    outputs="next-token",
    gradient_target="logit",
    output_attentions={"decoder": "attentions"},
    grouped_kv=True,
    causal_blocks=("decoder",),
    input_label="prompt",
    scored_block="decoder",
)
FAMILIES: Final[dict[Family, FamilySpec]] = {
    "encoder": FamilySpec(
        name="encoder",
        described="an encoder",
        auto_class="AutoModel",
        text_pairs=True,
        targets=False,
        generates=False,
        outputs="hidden",
        gradient_target="embedding",
        output_attentions={"encoder": "attentions"},
        grouped_kv=True,
        causal_blocks=(),
        input_label="sentence",
        scored_block="encoder",
    ),
    "decoder": _DECODER,
    "encoder-decoder": FamilySpec(
        name="encoder-decoder",
        described="an encoder-decoder",
        auto_class="AutoModelForSeq2SeqLM",
        text_pairs=False,
        targets=True,
        generates=False,
        outputs="target-logits",
        gradient_target="logit",
        output_attentions={
            "encoder": "encoder_attentions",
            "decoder": "decoder_attentions",
            "cross": "cross_attentions",
        },
        grouped_kv=False,
        causal_blocks=("decoder",),
        input_label="text",
        scored_block="encoder",
        block_shapes={
            "encoder": BlockShape(heads=("encoder_attention_heads", "num_heads")),
            "decoder": _DECODER_SHAPE,
            "cross": _DECODER_SHAPE,
        },
    ),
    # a decoder whose prompts may hold images (its image encoder's attention in no block)
    "vision-language": replace(
        _DECODER,
        name="vision-language",
        described="a vision-language model",
        auto_class="AutoModelForImageTextToText",
        reads_images=True,
    ),
}
"""Every family AttnViz runs, by name (the keys of :data:`.blocks.BLOCKS`)."""


def family_spec(name: Family) -> FamilySpec:
    """The spec of the family ``name``.

    Raises:
        KeyError: a name that is not a :data:`.blocks.Family` (a programming error: the
            family of a loaded model comes from :func:`.architectures.family_of`).
    """
    return FAMILIES[name]

"""The attention blocks of each model family, and which block a module is in.

* ``"encoder"`` (BERT, RoBERTa, DistilBERT, ...): block ``"encoder"``, bidirectional;
* ``"decoder"`` (GPT-2, Llama, Qwen2, Mistral, SmolLM2, ...): block ``"decoder"``, causal;
* ``"encoder-decoder"`` (T5, BART, Marian, Whisper): ``"encoder"`` self-attention over the
  source, ``"decoder"`` causal self-attention over the target, ``"cross"`` attention from
  target queries to source keys.
* ``"vision-language"`` (LLaVA, Qwen2-VL, Qwen2.5-VL, Idefics3, SmolVLM): block
  ``"decoder"``, the causal self-attention of the text decoder over the prompt's text
  and image tokens; the image encoder's own attention is in no block
  (:mod:`.vision_language`).
"""

from __future__ import annotations

from typing import Final, Literal

Family = Literal["encoder", "decoder", "encoder-decoder", "vision-language"]
Block = Literal["encoder", "decoder", "cross"]
BLOCKS: Final[dict[Family, tuple[Block, ...]]] = {
    "encoder": ("encoder",),
    "decoder": ("decoder",),
    "encoder-decoder": ("encoder", "decoder", "cross"),
    "vision-language": ("decoder",),
}
"""The attention blocks of each family, in the order the model runs them."""

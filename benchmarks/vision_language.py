"""Vision-language benchmark: one image and a 500-token answer, its maps and one overlay.

Usage (from the repository root):
    .venv/bin/python -m benchmarks.vision_language --preset qwen2.5-vl-3b   # bfloat16
    .venv/bin/python -m benchmarks.vision_language --preset smolvlm-256m    # float32

Random weights in a real model's shape (nothing downloaded): ``qwen2.5-vl-3b`` is
Qwen2.5-VL-3B-Instruct's config (36 layers x 16 heads, 2 key/value heads, d_model 2048; a
32-block vision encoder of 1280) in bfloat16; ``smolvlm-256m`` SmolVLM-256M-Instruct's
(SmolLM2-135M's decoder, 30 layers x 9 heads, and a 12-block SigLIP of 768 over 512 px views,
pixel shuffle 4) in float32.

In one process, one run after a warm-up of the same steps on a short answer:

* prompt: the processor's inputs of a 448 x 448 image and a short question, ms (Qwen: 16 x
  16 = 256 image tokens after the 2 x 2 merge; SmolVLM: the image resized to 2048 px, 4 x 4
  tiles of 512 and a global view, 64 tokens each: 1,088);
* generate: ``max_new_tokens`` (500) greedy with the key/value cache, unrecorded (the
  server's path: record_pass, which a vision-language prompt leaves to the pass after), ms
  and tokens per second;
* pass: AttnViz's recorded pass over prompt + answer kept for exact tiles (q, k, the
  log-sum-exp), what every view of the page is drawn from, ms; beside it the model's own
  forward over the same inputs (transformers' SDPA), the ratio's base;
* overlay: one token's rows in every layer and head (N, H, L): what the page draws on the
  picture, ms;
* memory: the process's peak resident memory (VmHWM) after loading and after the whole
  run, and what transformers' eager ``output_attentions`` would hold for the pass:
  N x H x L^2 in the model's dtype.
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path
from typing import Any

import torch

PRESETS: dict[str, dict[str, Any]] = {
    "qwen2.5-vl-3b": {
        "dtype": torch.bfloat16,
        "text": {
            "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 11008,
            "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 2,
            "max_position_embeddings": 128000, "rope_theta": 1000000.0,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
        },
        "vision": {
            "depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
            "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
            "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31],
            "out_hidden_size": 2048,
        },
        "version": "qwen2_5_vl",
    },
    "smolvlm-256m": {
        "dtype": torch.float32,
        "text": {
            "vocab_size": 49280, "hidden_size": 576, "intermediate_size": 1536,
            "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
            "max_position_embeddings": 8192, "rope_theta": 100000.0, "tie_word_embeddings": True,
            "bos_token_id": 1, "eos_token_id": 2,
        },
        "vision": {
            "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
            "num_attention_heads": 12, "image_size": 512, "patch_size": 16,
        },
        "version": "smolvlm",
    },
}  # fmt: skip
QUESTION = "describe this picture"
IMAGE_SIDE = 448


def peak_rss_bytes(field: str = "VmHWM") -> int:
    """This process's peak resident memory so far (VmHWM), or another field (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field}")


def build(preset: str) -> Any:
    """The preset's random model wrapped for AttnViz with its processor (word tokenizer)."""
    import transformers
    from attnviz.pretrained import wrap_model
    from attnviz.pretrained.vision_language import _images_only

    from tests.pretrained import tiny_vlm

    spec = PRESETS[preset]
    if spec["version"] == "smolvlm":
        return build_smolvlm(preset)
    ids = {
        "image_token_id": tiny_vlm.QWEN_SPECIALS.index("<|image_pad|>"),
        "video_token_id": tiny_vlm.QWEN_SPECIALS.index("<|video_pad|>"),
        "vision_start_token_id": tiny_vlm.QWEN_SPECIALS.index("<|vision_start|>"),
        "vision_end_token_id": tiny_vlm.QWEN_SPECIALS.index("<|vision_end|>"),
    }
    qwen25 = spec["version"] == "qwen2_5_vl"
    config_class = transformers.Qwen2_5_VLConfig if qwen25 else transformers.Qwen2VLConfig
    model_class = (
        transformers.Qwen2_5_VLForConditionalGeneration
        if qwen25
        else transformers.Qwen2VLForConditionalGeneration
    )
    config = config_class(text_config=spec["text"], vision_config=spec["vision"], **ids)
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(spec["dtype"])
    try:
        model = model_class(config).eval()
    finally:
        torch.set_default_dtype(previous)
    extra = {
        "image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
        "vision_start_token": "<|vision_start|>", "vision_end_token": "<|vision_end|>",
    }  # fmt: skip
    words = tiny_vlm.tokenizer(tiny_vlm.QWEN_SPECIALS, extra)
    words.eos_token = None  # random weights: the answer runs its whole length
    images = transformers.Qwen2VLImageProcessorPil(
        patch_size=14, merge_size=2, temporal_patch_size=2, min_pixels=56 * 56,
        max_pixels=28 * 28 * 1280,
    )  # fmt: skip
    processor_class = transformers.Qwen2_5_VLProcessor if qwen25 else transformers.Qwen2VLProcessor
    processor = _images_only(processor_class)(
        image_processor=images, tokenizer=words, video_processor=None
    )
    return wrap_model(model, processor, name=preset)


def build_smolvlm(preset: str) -> Any:
    """SmolVLM-256M's shape, random, with its processor's settings (word tokenizer)."""
    import transformers
    from attnviz.pretrained import wrap_model
    from attnviz.pretrained.vision_language import _images_only

    from tests.pretrained import tiny_vlm

    spec = PRESETS[preset]
    config = transformers.SmolVLMConfig(
        vision_config=transformers.SmolVLMVisionConfig(**spec["vision"]),
        text_config=transformers.LlamaConfig(**spec["text"]),
        image_token_id=tiny_vlm.IDEFICS_SPECIALS.index("<image>"), scale_factor=4,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.SmolVLMForConditionalGeneration(config).eval()
    extra = {
        "image_token": "<image>", "fake_image_token": "<fake_token_around_image>",
        "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>",
    }  # fmt: skip
    words = tiny_vlm.tokenizer(tiny_vlm.IDEFICS_SPECIALS, extra)
    words.add_tokens(list(tiny_vlm.IDEFICS_SPECIALS[8:]), special_tokens=True)
    words.eos_token = None  # random weights: the answer runs its whole length
    images = transformers.SmolVLMImageProcessorPil(
        size={"longest_edge": 2048}, max_image_size={"longest_edge": 512}
    )
    processor = _images_only(transformers.SmolVLMProcessor)(
        image_processor=images, tokenizer=words, video_processor=None, image_seq_len=64
    )
    return wrap_model(model, processor, name=preset)


def timed(step: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = step()
    return value, (time.perf_counter() - start) * 1000.0


def run_once(model: Any, image: Any, new_tokens: int) -> dict[str, float]:
    """One image, a ``new_tokens`` answer, its recorded pass and one token's rows."""
    batch, prompt_ms = timed(lambda: model.tokenize_images(QUESTION, [image]))
    generation, generate_ms = timed(
        lambda: model.generate(
            batch, new_tokens, device="cpu", record_steps=False, record_pass=True
        )
    )
    whole = model.extended(batch, generation.new_ids)
    inputs = model.forward_inputs(whole, None, torch.device("cpu"))
    _, forward_ms = timed(lambda: _plain_forward(model, inputs))
    result, pass_ms = timed(lambda: model.run(whole, device="cpu", record=False, keep=True))
    query = int(whole.input_ids.shape[1]) - 1
    rows, overlay_ms = timed(lambda: result.query_rows("decoder", query))
    length = int(whole.input_ids.shape[1])
    return {
        "prompt_tokens": int(batch.input_ids.shape[1]),
        "image_tokens": len(batch.images[0].positions),
        "new_tokens": len(generation.new_ids),
        "length": length,
        "prompt_ms": prompt_ms,
        "generate_ms": generate_ms,
        "forward_ms": forward_ms,
        "pass_ms": pass_ms,
        "overlay_ms": overlay_ms,
        "rows_shape": tuple(rows.shape),
    }


def _plain_forward(model: Any, inputs: dict[str, torch.Tensor]) -> None:
    """The model's own forward (transformers' SDPA, no recorder), logits of the last token."""
    import transformers

    own = model.model
    own.set_attn_implementation("sdpa")
    try:
        with torch.inference_mode():
            own(**inputs, use_cache=False, logits_to_keep=1)
    finally:
        from attnviz.pretrained.recorder import RECORDER

        own.set_attn_implementation(RECORDER)
    del transformers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=list(PRESETS), default="smolvlm-256m")
    parser.add_argument("--new-tokens", type=int, default=500)
    args = parser.parse_args()
    from PIL import Image

    torch.set_num_threads(max(1, torch.get_num_threads()))
    picture = Image.open("static/samples/shapes.png").convert("RGB")
    image = picture.resize((IMAGE_SIDE, IMAGE_SIDE))
    before = peak_rss_bytes("VmRSS")
    model, load_ms = timed(lambda: build(args.preset))
    loaded = peak_rss_bytes()
    print(
        f"{args.preset}: {model.num_parameters / 1e9:.2f} B parameters, {model.dtype}, "
        f"{model.num_layers} layers x {model.num_heads} heads ({model.num_key_value_heads} kv), "
        f"built in {load_ms / 1000:.1f} s; "
        f"resident {before / 2**30:.2f} -> {loaded / 2**30:.2f} GiB"
    )
    run_once(model, image, 8)  # warm-up
    gc.collect()
    figures = run_once(model, image, args.new_tokens)
    peak = peak_rss_bytes()
    length = figures["length"]
    eager_bytes = model.num_layers * model.num_heads * length**2 * model.model.dtype.itemsize
    print(
        f"prompt: {figures['prompt_tokens']} tokens ({figures['image_tokens']} image tokens), "
        f"processor {figures['prompt_ms']:.0f} ms"
    )
    print(
        f"generate {figures['new_tokens']} tokens: {figures['generate_ms'] / 1000:.1f} s "
        f"({figures['new_tokens'] / figures['generate_ms'] * 1000:.1f} tokens/s)"
    )
    print(
        f"pass over {length} tokens kept for tiles: {figures['pass_ms']:.0f} ms; the model's "
        f"own forward {figures['forward_ms']:.0f} ms; ratio "
        f"{figures['pass_ms'] / figures['forward_ms']:.2f}"
    )
    print(f"overlay (one token's rows, {figures['rows_shape']}): {figures['overlay_ms']:.0f} ms")
    print(
        f"peak resident memory: {peak / 2**30:.2f} GiB "
        f"(weights {model.parameter_bytes / 2**30:.2f} GiB); "
        f"eager output_attentions of the pass would hold {eager_bytes / 2**30:.2f} GiB"
    )


if __name__ == "__main__":
    main()

"""Train a small ViT to name a shape's colour, offline, and save it as a local model directory.

No vision transformer ships inside a PyPI wheel, and AttnViz downloads nothing, so this
makes one to try the image view with (about a minute on 2 CPU cores)::

    .venv/bin/python scripts/demo_vit.py demo-vit          # writes demo-vit/ and shapes.png
    ATTNVIZ_MODEL_DIRS='["demo-vit"]' make run              # /models offers "demo-vit"

The model is transformers' ``ViTForImageClassification`` (4 layers x 4 heads, d_model 64,
64 x 64 images in 8 x 8 patches), trained on synthetic pictures: a red, green or blue
square, disc or triangle of a random size at a random place on a noisy grey background,
labelled by its colour. To classify, its [CLS] token has to find the shape, which is
what its attention over the patches then shows. The directory is a standard Hugging Face one
(config.json, model.safetensors, preprocessor_config.json).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

SIZE = 64
LABELS = ("red", "green", "blue")


def picture(rng: np.random.Generator, label: int) -> np.ndarray:
    """One (SIZE, SIZE, 3) uint8 picture of a shape of colour ``label`` (an index into
    LABELS)."""
    grey = rng.uniform(0.25, 0.75)
    background = grey + rng.normal(0, 0.1, (SIZE, SIZE, 3))
    shape = int(rng.integers(0, 3))
    side = int(rng.integers(14, 26))
    top, left = rng.integers(0, SIZE - side, 2)
    ys, xs = np.mgrid[0:side, 0:side]
    if shape == 0:
        mask = np.ones((side, side), bool)
    elif shape == 1:
        centre = (side - 1) / 2
        mask = (ys - centre) ** 2 + (xs - centre) ** 2 <= (side / 2) ** 2
    else:
        mask = np.abs(xs - (side - 1) / 2) <= ys / 2
    colour = rng.uniform(0.0, 0.35, 3)
    colour[label] = rng.uniform(0.7, 1.0)
    image = background.copy()
    region = image[top : top + side, left : left + side]
    region[mask] = colour + rng.normal(0, 0.03, (int(mask.sum()), 3))
    return (np.clip(image, 0, 1) * 255).astype(np.uint8)


def batch(rng: np.random.Generator, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` pictures normalised as the saved processor does (mean 0.5, std 0.5)."""
    labels = rng.integers(0, len(LABELS), count)
    pixels = np.stack([picture(rng, int(label)) for label in labels]).astype(np.float32)
    tensor = torch.from_numpy(pixels / 255.0).permute(0, 3, 1, 2)
    return (tensor - 0.5) / 0.5, torch.from_numpy(labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="where to save the model directory")
    parser.add_argument("--steps", type=int, default=400, help="training steps of 64 pictures")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from PIL import Image
    from transformers import ViTConfig, ViTForImageClassification
    from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    config = ViTConfig(
        image_size=SIZE,
        patch_size=8,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=128,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
    )
    model = ViTForImageClassification(config)
    optimiser = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, 2e-3, total_steps=args.steps)
    start = time.perf_counter()
    model.train()
    for step in range(args.steps):
        pixels, labels = batch(rng, 64)
        loss = torch.nn.functional.cross_entropy(model(pixel_values=pixels).logits, labels)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
        if step % 100 == 0:
            print(f"step {step}: loss {loss.item():.3f}")
    model.eval()
    pixels, labels = batch(np.random.default_rng(args.seed + 1), 512)
    with torch.no_grad():
        accuracy = (model(pixel_values=pixels).logits.argmax(-1) == labels).float().mean()
    print(
        f"trained in {time.perf_counter() - start:.0f} s; accuracy on 512 new pictures: "
        f"{accuracy:.1%}"
    )
    model.save_pretrained(args.folder)
    ViTImageProcessorPil(
        size={"height": SIZE, "width": SIZE}, image_mean=[0.5] * 3, image_std=[0.5] * 3
    ).save_pretrained(args.folder)
    example = picture(np.random.default_rng(args.seed + 3), 2)
    Image.fromarray(example).resize((256, 256), Image.Resampling.NEAREST).save(
        args.folder / "shapes.png"
    )
    print(f"saved {args.folder} (and an example picture, {args.folder / 'shapes.png'})")


if __name__ == "__main__":
    main()

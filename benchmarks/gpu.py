"""GPU benchmark (``make gpu-check``): the grid computed during the pass, in bfloat16 on CUDA.

Usage (from the repository root, on a machine with an NVIDIA GPU):  make gpu-check
                                                               or   python -m benchmarks.gpu

Without CUDA it says so and exits 0 (nothing to measure). With CUDA, in this process,
medians of 3 after one warm-up, for each model and length L:

* forward: transformers' own forward pass with SDPA, bfloat16, the baseline;
* first layer: from the start of an observed pass (:class:`attnviz.pretrained.display.WalkObserver`,
  every layer and head block-max pooled to 64, as the streamed grid) to its first layer's maps;
* grid: the whole observed pass and view; the ratio grid / forward;
* peak: the GPU memory allocated at the peak of the grid (``torch.cuda.max_memory_allocated``).

Models: SmolLM2-135M-Instruct (30 layers x 9 heads) at 4,096, 8,192 and 32,768 tokens (its
positions raised to 32,768 for the last: the timing is what matters there, not the maps of a
text longer than it was trained on), and a randomly initialised model with Llama-3-8B's shape
(32 layers, 32 query heads sharing 8 key/value heads, d_model 4096, 8.0 B parameters: 16 GB in
bfloat16) at 4,096 and 8,192 tokens.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

GiB = 2**30
SMOLLM2 = "SmolLM2-135M-Instruct"


def synchronize() -> None:
    """Wait for the GPU's queued work (nothing to wait for on the CPU)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(function: Callable[[], Any], reps: int) -> float:
    """Median seconds of ``function`` over ``reps`` runs after one warm-up, synchronised."""
    function()
    synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        function()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(model: Any, batch: Any, reps: int) -> dict[str, float]:
    """Forward, first layer, grid and peak memory of one model and input (see the docstring)."""
    from attnviz.pretrained import PretrainedAttentions
    from attnviz.pretrained.calls import AttentionRecording
    from attnviz.pretrained.display import LayerWalk

    from benchmarks.decoder import attention_implementation

    network = model.model
    ids = batch.input_ids.to(model.home)

    def forward() -> None:
        with attention_implementation(network, "sdpa"), torch.inference_mode():
            network(ids, logits_to_keep=1)

    firsts: list[float] = []

    def grid() -> None:
        placeholder = PretrainedAttentions(
            batch=batch,
            targets=None,
            recording=AttentionRecording(),
            block_calls={"decoder": list(range(model.num_layers))},
            decoder_head=None,
            compute_ms=0.0,
            device=str(model.home),
        )
        walk = LayerWalk(
            placeholder,
            display_size=64,
            pending=lambda observer: model.run(batch, observer=observer, record=False),
            block_of=model.block_of(network),
        )
        start = time.perf_counter()
        for i, _ in enumerate(walk.layers()):
            if i == 0:
                synchronize()
                firsts.append(time.perf_counter() - start)
        walk.view()

    forward_s = timed(forward, reps)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    grid_s = timed(grid, reps)
    return {
        "forward": forward_s,
        "first": statistics.median(firsts[1:]),
        "grid": grid_s,
        "peak": torch.cuda.max_memory_allocated() / GiB if cuda else 0.0,
    }


def random_batch(model: Any, length: int) -> Any:
    """A TokenizedBatch of ``length`` random token ids (a model without a tokenizer)."""
    from attnviz.pretrained import TokenizedBatch

    ids = torch.randint(
        0, model.vocab_size, (1, length), generator=torch.Generator().manual_seed(0)
    )
    mask = torch.ones_like(ids, dtype=torch.bool)
    return TokenizedBatch(
        tokens=[[str(i) for i in ids[0].tolist()]],
        input_ids=ids,
        token_type_ids=torch.zeros_like(ids),
        attention_mask=mask,
        special_tokens_mask=~mask,
    )


def llama3_8b_shaped() -> Any:
    """A randomly initialised Llama-3-8B-shaped decoder in bfloat16 on the GPU, wrapped."""
    import transformers
    from attnviz.pretrained import wrap_model

    config = transformers.LlamaConfig(
        vocab_size=128_256,
        hidden_size=4096,
        intermediate_size=14_336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=8192,
        rope_theta=500_000.0,
    )
    with torch.device("cuda"):
        network = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    return wrap_model(network.eval(), None, name="Llama-3-8B-shaped (random)")


def row(name: str, length: int, m: dict[str, float]) -> str:
    """One Markdown table row of :func:`measure`'s figures."""
    return (
        f"| {name} | {length} | {m['forward'] * 1000:.0f} ms | {m['first'] * 1000:.0f} ms "
        f"({m['first'] / m['forward']:.2f}x) | {m['grid'] * 1000:.0f} ms "
        f"({m['grid'] / m['forward']:.2f}x) | {m['peak']:.1f} GiB |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(
            f"gpu-check: torch {torch.__version__} sees no CUDA device here: "
            "no GPU figures to measure, skipped"
        )
        return 0
    from attnviz.pretrained import ModelRegistry
    from attnviz.pretrained.placement import Placement

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, bfloat16\n")
    print("| model | L | forward | first layer (x forward) | grid (x forward) | peak GPU memory |")
    print("|---|---|---|---|---|---|")
    registry = ModelRegistry()
    registry.configure(
        [], packaged=[SMOLLM2], placement=Placement(dtype="bfloat16", device_map="cuda")
    )
    registry.load()
    smollm2 = registry.get(SMOLLM2)
    smollm2.config.max_position_embeddings = 32_768  # see the module docstring
    for length in (4096, 8192, 32_768):
        print(row(SMOLLM2, length, measure(smollm2, random_batch(smollm2, length), args.reps)))
    llama = llama3_8b_shaped()
    for length in (4096, 8192):
        print(row(llama.name, length, measure(llama, random_batch(llama, length), args.reps)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

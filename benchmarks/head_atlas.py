"""Head atlas benchmark: every head of SmolLM2-135M scored cold, and its top heads per score.

Usage (from the repository root):  .venv/bin/python -m benchmarks.head_atlas [--reps N]
                                   [--model all-MiniLM-L6-v2] [--repeat-length 40]

In one fresh process, in seconds (s):

* load: the packaged model loaded through the registry (``ModelRegistry.load``: the
  dequantized GGUF from its cache, the model's warm-up pass);
* cold: the first :func:`attnviz.pretrained.atlas.head_scores` of the process, default
  settings (the shipped corpus, R and the induction sequences of the module's defaults);
  cold total = load + cold, the figure issue 33 bounds at 60 s on the 2-core machine;
* warm: the median of ``--reps`` more runs;
* forward: the same forward passes (each corpus paragraph alone, the repeated sequences
  in their batches) run by the model with no observer (SDPA, nothing recorded): the
  floor the scores' observed passes are compared with (median of ``--reps``).

Then the corpus it read, the top 5 heads of every score (entropy: the 5 lowest, the
sharpest heads, and the 5 highest) as layer.head = value, and a few figures of the known
structure (induction heads over 0.3 and their layers, the mean first-token weight).
Machines are shared and noisy: read the medians, and the ratio to the forward passes.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from attnviz.pretrained import ModelRegistry, PretrainedModel
from attnviz.pretrained.atlas import (
    INDUCTION_BATCH,
    INDUCTION_SEQUENCES,
    MAX_TOKENS,
    REPEAT_LENGTH,
    SCORES,
    HeadScores,
    head_scores,
    natural_tokens,
    repeated_tokens,
    shipped_corpus,
    unpadded_batch,
)

NAME = "SmolLM2-135M-Instruct"


def forward_floor_s(model: PretrainedModel, repeat_length: int) -> float:
    """The scores' forward passes without an observer or a recording, in seconds."""
    start = time.perf_counter()
    for text in shipped_corpus().texts:
        ids, _ = natural_tokens(model, text, MAX_TOKENS)
        model.run(unpadded_batch(model, torch.tensor([ids])), record=False)
    repeated, _ = repeated_tokens(model, INDUCTION_SEQUENCES, repeat_length, 0)
    for first in range(0, INDUCTION_SEQUENCES, INDUCTION_BATCH):
        model.run(unpadded_batch(model, repeated[first : first + INDUCTION_BATCH]), record=False)
    return time.perf_counter() - start


def heads_list(pairs: list[tuple[int, int, float]]) -> str:
    return ", ".join(f"{layer}.{head} = {value:.3f}" for layer, head, value in pairs)


def report(result: HeadScores) -> None:
    corpus = result.corpus
    print(
        f"\ncorpus: {corpus.name} v{corpus.version} ({corpus.sha256[:12]}), {corpus.sequences} "
        f"sequences, {corpus.tokens} tokens, {corpus.queries} queries, {corpus.truncated} cut "
        f"at {corpus.max_tokens}; induction: {corpus.induction_sequences} sequences of R = "
        f"{corpus.repeat_length} twice, {corpus.induction_tokens} tokens, seed {corpus.seed}"
    )
    print(f"\n### Top 5 heads per score (layer.head = value), {result.model}\n")
    print("| score | top 5 |")
    print("|---|---|")
    for name in SCORES:
        if name == "entropy":
            print(f"| entropy, lowest (nats) | {heads_list(result.top(name, 5, lowest=True))} |")
            print(f"| entropy, highest (nats) | {heads_list(result.top(name, 5))} |")
        else:
            print(f"| {name} | {heads_list(result.top(name, 5))} |")
    induction = result.scores["induction"]
    strong = [(layer, head) for layer, head, value in result.top("induction", 50) if value > 0.3]
    print(
        f"\ninduction heads over 0.3: {len(strong)}, in layers "
        f"{sorted({layer for layer, _ in strong})}; max {induction.max():.3f}"
    )
    first = result.scores["first_token"]
    print(
        f"first_token: mean {first.mean():.3f}, heads over 0.5: {(first > 0.5).sum()} of "
        f"{first.size}; mean entropy {result.scores['entropy'].mean():.2f} nats"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--model", default=NAME, help="a packaged model's name")
    parser.add_argument("--repeat-length", type=int, default=REPEAT_LENGTH)
    args = parser.parse_args()
    print(f"## Head atlas, {args.model}, torch threads {torch.get_num_threads()} (s)\n")
    start = time.perf_counter()
    registry = ModelRegistry()
    registry.configure([], packaged=[args.model])
    registry.load()
    model = registry.get(args.model)
    assert isinstance(model, PretrainedModel), f"{args.model} is not a text model"
    load_s = time.perf_counter() - start
    result = head_scores(model, repeat_length=args.repeat_length)
    cold_s = result.compute_ms / 1000
    warm = [
        head_scores(model, repeat_length=args.repeat_length).compute_ms / 1000
        for _ in range(args.reps)
    ]
    floor = [forward_floor_s(model, args.repeat_length) for _ in range(args.reps)]
    warm_s, floor_s = statistics.median(warm), statistics.median(floor)
    print("| load | cold | cold total | warm (median) | forward (median) | warm / forward |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {load_s:.1f} | {cold_s:.1f} | {load_s + cold_s:.1f} | {warm_s:.1f} | "
        f"{floor_s:.1f} | {warm_s / floor_s:.2f} |"
    )
    report(result)


if __name__ == "__main__":
    main()

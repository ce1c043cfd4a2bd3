"""The head atlas of a corpus on Ray against one process (issue 43): SmolLM2-135M.

Usage (from the repository root, with the ray extra):
    .venv/bin/python -m benchmarks.atlas_ray [--passages 512] [--max-tokens 64] [--reps 3]

The corpus: ``--passages`` passages of 40 words, windows over the shipped atlas corpus's
words (each starting 10 words after the last, wrapping), cut at ``--max-tokens`` tokens;
with the atlas's 16 induction sequences, in passes of one passage (2 for the sequences).

Side by side in one process, ``--reps`` rounds, each mode once a round in turn, in
seconds; medians and the ratio to one process:

* one process: :func:`attnviz.pretrained.atlas.shards.run_shard` over every pass, torch
  on all of this machine's cores (the model already loaded, as the atlas command's own
  load is the same in every mode);
* Ray, 1 worker: :func:`attnviz.pretrained.atlas.on_ray.run_on_ray` with one actor of
  every core's torch threads (reserving them all);
* Ray, 2 workers: two actors, the cores split between them (torch threads = cores / 2
  each; on 2 cores, one each).

A Ray run counts everything the command pays for after ``ray.init`` (timed apart, once):
the actors' start, their model load and plan, the passes, the shards' transfer and
merge. The results: every score of each Ray run against one process's (float32 matrix
products add in an order that depends on the thread count: about 1e-7 apart), and the
examples kept.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time

import numpy as np
import torch
from attnviz.pretrained.atlas import SCORES, plan_atlas, shipped_corpus
from attnviz.pretrained.atlas.on_ray import connect, run_on_ray
from attnviz.pretrained.atlas.shards import atlas_of, run_shard
from attnviz.views.show import text_model

NAME = "SmolLM2-135M-Instruct"


def passages(count: int, words: int = 40, step: int = 10) -> list[str]:
    """``count`` windows of ``words`` words over the shipped corpus, ``step`` apart."""
    every = " ".join(shipped_corpus().texts).split()
    return [
        " ".join(every[(i * step + j) % len(every)] for j in range(words)) for i in range(count)
    ]


def main() -> None:
    """Print the three modes' medians, their ratios and the results' agreement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=512)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    started = time.perf_counter()
    connect(None, num_cpus=cores)
    ray_start = time.perf_counter() - started
    torch.set_num_threads(cores)
    started = time.perf_counter()
    model = text_model(NAME)
    load_s = time.perf_counter() - started
    options = {"repeat_length": None, "max_tokens": args.max_tokens}
    plan = plan_atlas(model, passages(args.passages), **options)
    load = functools.partial(text_model, NAME)
    modes = {
        "one process": lambda: run_shard(plan, range(len(plan.passes))),
        "Ray, 1 worker": lambda: run_on_ray(plan, load, options, workers=1, threads=cores),
        "Ray, 2 workers": lambda: run_on_ray(
            plan, load, options, workers=2, threads=max(1, cores // 2)
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in modes}
    results = {}
    for _ in range(args.reps):
        for name, run in modes.items():
            started = time.perf_counter()
            shard = run()
            times[name].append(time.perf_counter() - started)
            results[name] = atlas_of(plan, shard, 0.0)
    print(
        f"{NAME}: {plan.info.sequences} passages ({plan.info.tokens:,} tokens, at most "
        f"{args.max_tokens} each) + {plan.info.induction_sequences} induction sequences = "
        f"{len(plan.passes)} passes; {cores} cores; medians of {args.reps}"
    )
    print(f"ray.init (local, once): {ray_start:.1f} s; the model's load in one process: "
          f"{load_s:.1f} s (every Ray run loads it again in each actor)")  # fmt: skip
    base = statistics.median(times["one process"])
    print("\n| mode | torch threads | median | x one process | runs |\n|---|---|---|---|---|")
    for name, runs in times.items():
        threads = {"one process": cores, "Ray, 1 worker": cores}.get(name, max(1, cores // 2))
        each = " per worker" if name == "Ray, 2 workers" else ""
        median = statistics.median(runs)
        print(
            f"| {name} | {threads}{each} | {median:.1f} s | {median / base:.2f}x | "
            f"{', '.join(f'{t:.1f}' for t in runs)} |"
        )
    one = results["one process"]
    for name in ("Ray, 1 worker", "Ray, 2 workers"):
        worst = max(
            float(np.max(np.abs(results[name].scores[s] - one.scores[s]) / np.abs(one.scores[s])))
            for s in SCORES
        )
        same = sum(
            a == b for a, b in zip(results[name].examples or (), one.examples or (), strict=True)
        )
        print(
            f"{name} against one process: scores within {worst:.1e} relative; "
            f"{same} of {len(one.examples or ())} examples identical"
        )


if __name__ == "__main__":
    main()

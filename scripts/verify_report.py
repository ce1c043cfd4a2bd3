"""Print the largest difference between AttnViz and PyTorch's references, per case.

Usage: .venv/bin/python scripts/verify_report.py
Cases: every mask x fill x dtype on the tutorials' batch, cross attention (L_q 12,
L_k 10), fully-masked rows, and 100 random batches per dtype (B 1-4, L 1-64, d_model <= 256).
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from attnviz.attention import LayerConfig, compute_attention
from attnviz.attention.tutorials import TUTORIAL_BATCH, TUTORIAL_TARGETS

MASKS = ["none", "padding", "causal", "padding_causal"]
FILLS = [float("-inf"), -1e9, -1e12]


def main() -> None:
    largest: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])

    def run(
        case: str, dtype: str, sequences: Any, config: LayerConfig | None = None, **kwargs: Any
    ) -> None:
        v = compute_attention(sequences, config, dtype=dtype, verify=True, **kwargs).verification
        assert v is not None
        diffs = (v.mha_weights_max_abs_diff, v.mha_output_max_abs_diff, v.sdpa_output_max_abs_diff)
        row = largest[(case, dtype)]
        for i, d in enumerate(diffs):
            row[i] = max(row[i], d)

    rng = random.Random(0)
    for dtype in ("float32", "float64"):
        for mask in MASKS:
            for fill in FILLS:
                run(f"tutorial batch, {mask}", dtype, TUTORIAL_BATCH, mask=mask, mask_fill=fill)
        for mask in ("none", "padding"):
            run(f"cross, {mask}", dtype, TUTORIAL_BATCH, targets=TUTORIAL_TARGETS, mask=mask)
        for fill in (float("-inf"), -1e9):
            run(
                "fully-masked rows",
                dtype,
                [[0, 0, 0], [0, 5, 6]],
                mask="padding_causal",
                mask_fill=fill,
            )
        for _ in range(100):
            num_heads = rng.choice([1, 2, 4, 8, 16])
            d_model = num_heads * rng.randint(1, 256 // num_heads)
            batch = [
                [rng.randrange(100) for _ in range(rng.randint(1, 64))]
                for _ in range(rng.randint(1, 4))
            ]
            mask = rng.choice(MASKS)
            run(
                f"random, {mask}",
                dtype,
                batch,
                LayerConfig(d_model=d_model, num_heads=num_heads),
                mask=mask,
                seed=rng.randrange(1000),
            )

    print(
        f"{'case':28s} {'dtype':8s} {'MHA weights':>12s} {'MHA output':>12s} {'SDPA output':>12s}"
    )
    for (case, dtype), diffs in sorted(largest.items()):
        print(f"{case:28s} {dtype:8s} " + " ".join(f"{d:12.3e}" for d in diffs))


if __name__ == "__main__":
    main()

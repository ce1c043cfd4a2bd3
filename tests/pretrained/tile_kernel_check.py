"""Run by tests/pretrained/test_tile_kernel.py in a process of its own with TRITON_INTERPRET=1.

Triton reads the variable when it is imported, so the kernel's checks cannot share the
test process. Prints one JSON line per case: its name and the largest difference of the
kernel's tile from the torch path's (``torch``) and from transformers' eager attention
(``eager``, where the case has it).
"""

import json
import os
import sys
import tempfile
from pathlib import Path

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402
from attnviz.attention.pooling import block_reduce  # noqa: E402
from attnviz.pretrained.loading import load_model_dir  # noqa: E402
from attnviz.pretrained.tile_kernel import kernel_tile, supports  # noqa: E402
from attnviz.pretrained.tiles import KeptLayer, tile  # noqa: E402

from tests.pretrained import tiny  # noqa: E402
from tests.pretrained.support import eager_model  # noqa: E402

TEXT = " ".join(tiny.WORDS[(i * 5) % len(tiny.WORDS)] for i in range(24))


def report(case: str, **differences: float) -> None:
    print(json.dumps({"case": case, **differences}), flush=True)


def main() -> None:
    root = Path(tempfile.mkdtemp())
    for name in ("llama", "gemma2", "gemma3_text", "bert", "mistral", "t5"):
        folder = tiny.save_tiny(name, root / name)
        model = load_model_dir(name, folder)
        batch = model.tokenize([TEXT])
        targets = model.decoder_inputs(tiny.TARGETS[:1]) if name == "t5" else None
        result = model.run(batch, targets, record=False, keep=True)
        assert result.kept is not None
        family = "encoder" if name == "bert" else "decoder"
        for index, layer in enumerate(result.kept.layers):
            if not supports(layer):
                report(f"{name} {index} unsupported")
                continue
            length_q, length_k = layer.shape[2:]
            for reduce in ("max", "mean"):
                for factor, rows, cols in (
                    ((4, 4), range(length_q), range(length_k)),
                    ((3, 5), range(2, length_q), range(1, length_k - 3)),
                ):
                    got = kernel_tile(layer, [3, 0], rows, cols, reduce, factor)
                    want = tile(result.kept, index, [3, 0], rows, cols, reduce, factor)
                    case = f"{name} {index} {reduce} {factor}"
                    report(case, torch=float((got - want).abs().max()))
        # exact weights (factor 1) of a corner against the model's own eager attention
        if name in ("llama", "gemma2", "bert"):
            with torch.inference_mode():
                expected = eager_model(folder, family)(
                    input_ids=batch.input_ids, output_attentions=True
                ).attentions
            last = len(result.kept.layers) - 1
            span = range(6, 14)
            got = kernel_tile(result.kept.layers[last], [1], span, span, "max", (1, 1))
            want = expected[last][:, 1:2, 6:14, 6:14]
            pooled = kernel_tile(result.kept.layers[last], [1], range(16), range(16), "max", (4, 4))
            want_pooled = block_reduce(expected[last][:, 1:2, :16, :16].float(), 4, 4, "max")
            report(
                f"{name} {last} eager",
                eager=max(
                    float((got - want).abs().max()), float((pooled - want_pooled).abs().max())
                ),
            )
    # 16-bit states with an LSE from their own scores: products as they are, float32 sums.
    # Triton's interpreter computes through NumPy, which has no bfloat16 (its bfloat16 dots
    # come out wrong here): float16 here, bfloat16 compiled on a GPU (the cuda test).
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(1, 4, 40, 64, generator=generator).half()
    key = torch.randn(1, 2, 40, 64, generator=generator).half()
    scores = (query.float() @ key.float().repeat_interleave(2, 1).transpose(-1, -2)) * 0.125
    causal = torch.ones(40, 40, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    from attnviz.pretrained.mask_rules import MaskRule
    from transformers.masking_utils import causal_mask_function

    rule = MaskRule(1, 40, 40, 0, 0, causal_mask_function, causal=True)
    layer = KeptLayer(
        module=torch.nn.Identity(), name="Float16", query=query, key=key,
        lse=scores.logsumexp(-1), scaling=0.125, rule=rule,
    )  # fmt: skip
    weights = (scores - scores.logsumexp(-1, keepdim=True)).exp()
    got = kernel_tile(layer, [0, 1, 2, 3], range(40), range(40), "max", (8, 8))
    report("float16 gqa", torch=float((got - block_reduce(weights, 8, 8, "max")).abs().max()))


if __name__ == "__main__":
    sys.exit(main())

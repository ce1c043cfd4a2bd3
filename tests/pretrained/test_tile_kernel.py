"""The Triton kernel of the tiles' GPU path, run here by Triton's interpreter on the CPU.

``tests/pretrained/tile_kernel_check.py`` runs in a process of its own with
``TRITON_INTERPRET=1`` (Triton reads it at import) and reports, for tiny Llama (grouped
heads), Gemma 2 (softcap, query_pre_attn_scalar), Gemma 3 (one key/value head), BERT (no
mask) and a float16 layer, the largest difference of the kernel's block-max and
block-mean tiles from the torch path's, and of its exact weights from transformers' eager
attention. Layers it does not take (sliding windows, T5's position bias) say so and keep
the torch path. On a GPU the same kernel is compiled: tests marked cuda.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from tests import REPO_ROOT
from tests.pretrained.support import require_modules, require_transformers

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cases() -> dict[str, dict[str, float]]:
    require_transformers()
    require_modules("Triton (its interpreter runs the kernel here)", "triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.pretrained.tile_kernel_check"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {line.pop("case"): line for line in lines}


def test_the_kernels_tiles_equal_the_torch_path_to_1e_6(cases: dict[str, dict[str, float]]) -> None:
    compared = {case: found["torch"] for case, found in cases.items() if "torch" in found}
    names = {case.split()[0] for case in compared}
    assert names >= {"llama", "gemma2", "gemma3_text", "bert", "float16"}
    assert any("mean" in case for case in compared) and any("max" in case for case in compared)
    for case, difference in compared.items():
        assert difference <= 1e-6, (case, difference)


def test_the_kernels_weights_equal_eager_attention_to_1e_5(
    cases: dict[str, dict[str, float]],
) -> None:
    compared = {case: found["eager"] for case, found in cases.items() if "eager" in found}
    assert {case.split()[0] for case in compared} == {"llama", "gemma2", "bert"}
    for case, difference in compared.items():
        assert difference <= 1e-5, (case, difference)


def test_layers_the_kernel_does_not_take_keep_the_torch_path(
    cases: dict[str, dict[str, float]],
) -> None:
    unsupported = {case for case in cases if case.endswith("unsupported")}
    assert "mistral 0 unsupported" in unsupported  # its sliding window
    assert any(case.startswith("t5") for case in unsupported)  # its position bias
    assert not any(case.startswith(("llama", "bert")) for case in unsupported)


@pytest.mark.cuda
def test_on_a_gpu_tiles_take_the_kernel_and_equal_the_cpu_s() -> None:
    """On CUDA with Triton installed, :func:`attnviz.pretrained.tiles.tile` takes the kernel."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    require_modules("Triton", "triton")
    from attnviz.pretrained import tile_kernel
    from attnviz.pretrained.mask_rules import MaskRule
    from attnviz.pretrained.tiles import KeptLayer, KeptPass, tile
    from transformers.masking_utils import causal_mask_function

    generator = torch.Generator().manual_seed(0)
    length = 3000
    query = torch.randn(1, 8, length, 128, generator=generator).bfloat16()
    key = torch.randn(1, 2, length, 128, generator=generator).bfloat16()
    scores = (query.float() @ key.float().repeat_interleave(4, 1).transpose(-1, -2)) / 128**0.5
    scores = scores.masked_fill(~torch.ones(length, length, dtype=torch.bool).tril(), -torch.inf)
    rule = MaskRule(1, length, length, 0, 0, causal_mask_function, causal=True)

    def kept(device: str) -> KeptPass:
        layer = KeptLayer(
            module=torch.nn.Identity(), name="Llama-shaped", query=query.to(device),
            key=key.to(device), lse=scores.logsumexp(-1).to(device), scaling=128**-0.5,
            rule=rule,
        )  # fmt: skip
        return KeptPass([layer])

    on_gpu, on_cpu = kept("cuda"), kept("cpu")
    assert tile_kernel.supports(on_gpu.layers[0])
    for reduce in ("max", "mean"):
        got = tile(on_gpu, 0, reduce=reduce, factor=(12, 12))
        want = tile(on_cpu, 0, reduce=reduce, factor=(12, 12))
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)

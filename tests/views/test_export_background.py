"""Images written from Python are opaque, for paper and slides (issue 32).

``attention_figure`` (attnviz.views.figure), ``AttentionView.save("x.png")`` and the CLI's
``attnviz export -o x.png`` go through Plotly's image export (kaleido, driving the
machine's Chromium): their paper is the figure's own, white under Plotly's default
template, never the transparent paper of the page's figures.
"""

import io
import subprocess
import sys
from pathlib import Path

import attnviz
import numpy as np
import pytest
from attnviz import attention_figure, compute_attention
from attnviz.devtools import chromium_path
from attnviz.views.notebook import AttentionView
from PIL import Image

from tests import REPO_ROOT

pytestmark = pytest.mark.browser  # kaleido drives the machine's Chromium

WHITE = (255, 255, 255)


@pytest.fixture(autouse=True)
def image_export() -> None:
    """Skip without kaleido or a Chromium for it (make install and make browser add them)."""
    pytest.importorskip("kaleido")
    if chromium_path() is None:
        pytest.skip("Debian's chromium is not installed (make browser installs it)")


def check_opaque_white(png: bytes) -> None:
    """Every pixel opaque; the paper (the corners) white, and darker text drawn on it."""
    image = Image.open(io.BytesIO(png))
    assert image.mode in ("RGB", "RGBA")
    if image.mode == "RGBA":
        assert image.getextrema()[3] == (255, 255)
    rgb = image.convert("RGB")
    for corner in [(0, 0), (image.width - 1, 0), (0, image.height - 1)]:
        assert rgb.getpixel(corner) == WHITE
    assert min(min(band) for band in rgb.getextrema()) < 80  # the title and the labels


def test_the_python_apis_figures_save_opaque_pngs(tmp_path: Path) -> None:
    result = compute_attention(["the cat sat", "on the mat"])
    figure = attention_figure(result)
    view = AttentionView(figure, result.attn_weights[0][None].numpy())
    check_opaque_white(view.save(tmp_path / "figure.png").read_bytes())
    weights = np.tril(np.ones((2, 4, 4), dtype=np.float32))
    weights /= weights.sum(axis=-1, keepdims=True)
    heads = attnviz.head_view(weights, ["I", "saw", "a", "cat"])
    check_opaque_white(heads.save(tmp_path / "heads.png").read_bytes())


@pytest.mark.slow  # the attnviz command in a subprocess
def test_the_cli_exports_an_opaque_png(tmp_path: Path) -> None:
    png = tmp_path / "attention.png"
    command = ["export", "--sequence", "the cat sat", "-o", str(png)]
    result = subprocess.run(
        [sys.executable, "-m", "attnviz.cli", *command],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    check_opaque_white(png.read_bytes())

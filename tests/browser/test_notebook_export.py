"""attnviz's saved views open offline in Chromium: every map drawn, nothing fetched.

The file is opened from disk with every request that is not that file aborted and
recorded: Plotly.js must come from inside the file.
"""

from pathlib import Path

import attnviz
import numpy as np
import pytest

from tests.support.browser import HANG_MS, close_page, open_offline

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("kind", ["head", "model"])
def test_a_saved_view_draws_every_map_offline(browser, tmp_path: Path, kind: str) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    weights = rng.random((3, 1, 4, 5, 5)).astype(np.float32)  # (N, B, H, L, L)
    weights /= weights.sum(axis=-1, keepdims=True)
    tokens = ["The", "cat", "<sat>", "on", "&mat"]
    if kind == "head":
        view = attnviz.head_view(weights, tokens, layer=2)
        expected = weights[2, 0]
    else:
        view = attnviz.model_view(weights, tokens)
        expected = weights[:, 0].reshape(12, 5, 5)
    path = view.save(tmp_path / f"{kind}.html", interactive=False)  # the Plotly figure
    page, outside, errors = open_offline(browser, path)
    page.wait_for_function(
        "() => document.querySelector('.attnviz-view') && "
        "document.querySelector('.attnviz-view').data !== undefined",
        timeout=HANG_MS,
    )
    drawn = page.evaluate(
        "() => document.querySelector('.attnviz-view').data"
        ".filter((t) => t.type === 'heatmap').map((t) => t.z)"
    )
    np.testing.assert_allclose(drawn, expected, rtol=1e-6)
    # Plotly drew them: one heatmap image layer per map in the SVG.
    assert page.locator(".attnviz-view .hm").count() == len(expected)
    assert outside == [] and errors == []
    close_page(page)


def test_images_for_papers_png_svg_pdf(tmp_path: Path) -> None:
    """Plotly's image export (kaleido driving the machine's Chromium): a PNG of the size
    asked, an SVG with one heatmap image per head, a PDF."""
    import struct
    import xml.etree.ElementTree as ElementTree

    weights = np.tril(np.ones((3, 4, 4), dtype=np.float32))
    weights /= weights.sum(axis=-1, keepdims=True)
    view = attnviz.head_view(weights, ["I", "saw", "a", "cat"])
    png = view.save(tmp_path / "heads.png", width=900, height=420).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (900, 420)  # IHDR: width, height
    svg = ElementTree.parse(view.save(tmp_path / "heads.svg")).getroot()
    images = [e for e in svg.iter() if e.tag.endswith("image")]  # a heatmap is drawn as one
    assert len(images) == 3
    assert view.save(tmp_path / "heads.pdf").read_bytes()[:5] == b"%PDF-"

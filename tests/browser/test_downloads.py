"""Download PNG / SVG / PDF and Plotly's modebar camera, with the page's CSP enforced.

Plotly's toImage draws the figure's SVG through a blob: image; under a policy
without img-src blob: the PNG never comes (issue 12). These tests run in a context
that enforces the policy and check the downloaded files' bytes.
"""

from pathlib import Path

import pytest

from tests.browser.strict import strict_page

pytestmark = pytest.mark.browser

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CAMERA = '.modebar-btn[data-title="Download plot as a PNG"]'
# Each page, the selector of its first drawn figure, and the file name prefix.
PAGES = [
    ("/", "#heads .head-plot", "attnviz-heads"),
    ("/models", "#view-model[data-drawn='true'] .js-plotly-plot", "attnviz-model-model"),
]


def check_pdf(pdf: bytes) -> None:
    """A PDF whose cross-reference table points at each object and whose one image is a whole
    JPEG of the stated length (read with the PDF reference's own rules, no PDF library)."""
    import re

    assert pdf.startswith(b"%PDF-1.4\n") and pdf.rstrip().endswith(b"%%EOF")
    start = int(re.search(rb"startxref\n(\d+)\n", pdf).group(1))  # type: ignore[union-attr]
    assert pdf[start:].startswith(b"xref\n0 6\n")
    rows = pdf[start:].split(b"\n")[3:8]
    for number, row in enumerate(rows, start=1):
        offset = int(row[:10])
        assert pdf[offset:].startswith(f"{number} 0 obj".encode()), number
    length = int(re.search(rb"/DCTDecode /Length (\d+)", pdf).group(1))  # type: ignore[union-attr]
    jpeg = pdf[pdf.index(b"stream\n") + 7 :][:length]
    assert jpeg[:2] == b"\xff\xd8" and jpeg[-2:] == b"\xff\xd9"  # JPEG start and end
    assert length > 1000
    # The image's stated size is the JPEG's own (its start-of-frame segment: height, width).
    width = int(re.search(rb"/Width (\d+)", pdf).group(1))  # type: ignore[union-attr]
    height = int(re.search(rb"/Height (\d+)", pdf).group(1))  # type: ignore[union-attr]
    frame = re.search(rb"\xff[\xc0\xc2]..\x08(..)(..)", jpeg, re.DOTALL)
    assert frame is not None
    assert (int.from_bytes(frame.group(2), "big"), int.from_bytes(frame.group(1), "big")) == (
        width,
        height,
    )


def downloaded(page, click) -> tuple[str, bytes]:  # type: ignore[no-untyped-def]
    with page.expect_download(timeout=15_000) as info:
        click()
    download = info.value
    assert download.failure() is None
    return download.suggested_filename, Path(download.path()).read_bytes()


@pytest.mark.parametrize(("path", "figure", "prefix"), PAGES)
def test_png_and_svg_downloads_work_under_the_pages_csp(
    browser, server_url, path: str, figure: str, prefix: str
) -> None:  # type: ignore[no-untyped-def]
    with strict_page(browser) as page:
        response = page.goto(server_url + path)
        assert "img-src 'self'" in response.headers["content-security-policy"]  # enforced
        page.locator(f"{figure} .main-svg").first.wait_for(timeout=30_000)

        name, png = downloaded(page, lambda: page.click("#download-png"))
        assert name == f"{prefix}.png"
        assert png[:8] == PNG_SIGNATURE
        assert len(png) > 1000  # a drawn figure, not an empty canvas

        name, svg = downloaded(page, lambda: page.click("#download-svg"))
        assert name == f"{prefix}.svg"
        text = svg.decode("utf-8")
        assert "<svg" in text
        # The figure itself: Plotly's main SVG with its heatmap images in it.
        assert "main-svg" in text and "<image" in text

        name, pdf = downloaded(page, lambda: page.click("#download-pdf"))
        assert name == f"{prefix}.pdf"
        check_pdf(pdf)

        # Plotly's own camera button in the modebar (it appears on hover).
        plot = page.locator(figure).first
        plot.hover()
        camera = plot.locator(CAMERA)
        camera.wait_for(state="visible")
        name, png = downloaded(page, camera.click)
        assert name.endswith(".png")
        assert png[:8] == PNG_SIGNATURE

        assert page.errors == []
        assert page.csp_violations == []

"""Download PNG / SVG / PDF and the modebar's camera, with the page's CSP enforced.

Plotly's toImage draws the figure's SVG through a blob: image; under a policy
without img-src blob: the PNG never comes (issue 12). These tests run in a context
that enforces the policy and check the downloaded files' bytes. The images leave the page
on an opaque paper of its theme (light or dark, as the system's colour scheme chooses),
with text of the theme's colour on it: readable on paper and on slides (issue 32).
"""

import io
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from PIL import Image

from tests.browser.strict import strict_page
from tests.support.browser import HANG_MS

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
    with page.expect_download(timeout=HANG_MS) as info:
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
        page.locator(f"{figure} .main-svg").first.wait_for(timeout=HANG_MS)

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


SVG_NS = "{http://www.w3.org/2000/svg}"


def rgb(text: str) -> tuple[int, int, int]:
    """ "#rrggbb" or "rgb(r, g, b)" as (r, g, b)."""
    if text.startswith("#"):
        return (int(text[1:3], 16), int(text[3:5], 16), int(text[5:7], 16))
    r, g, b = (int(v) for v in re.findall(r"\d+", text)[:3])
    return (r, g, b)


def contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """WCAG 2 contrast ratio of two sRGB colours (1 to 21)."""

    def luminance(colour: tuple[int, int, int]) -> float:
        srgb = [c / 255 for c in colour]
        linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in srgb]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def svg_colours(svg: bytes) -> tuple[tuple[int, int, int], list[tuple[int, int, int]]]:
    """The paper's colour (the SVG's first rectangle) and the fill of every title and tick
    label."""
    root = ElementTree.fromstring(svg)
    paper = root.find(f"{SVG_NS}rect")
    assert paper is not None
    style = paper.get("style", "")
    assert "fill-opacity: 1" in style, style
    labels = []
    for group in root.iter(f"{SVG_NS}g"):
        if not re.search(r"\b(xtick|ytick|cbaxis|infolayer)\b", group.get("class", "")):
            continue
        for text in group.iter(f"{SVG_NS}text"):
            fill = re.search(r"fill: (rgb\([^)]*\))", text.get("style", ""))
            if fill and (text.text or "").strip():
                labels.append(rgb(fill.group(1)))
    fill = re.search(r"fill: (rgb\([^)]*\))", style)
    assert fill is not None
    return rgb(fill.group(1)), labels


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize(("path", "figure", "prefix"), PAGES)
def test_images_have_the_themes_opaque_paper_and_text(
    browser, server_url, scheme: str, path: str, figure: str, prefix: str
) -> None:  # type: ignore[no-untyped-def]
    with strict_page(browser) as page:
        page.emulate_media(color_scheme=scheme)
        page.goto(server_url + path)
        page.locator(f"{figure} .main-svg").first.wait_for(timeout=HANG_MS)
        style = "getComputedStyle(document.documentElement)"
        panel = rgb(page.evaluate(f"() => {style}.getPropertyValue('--panel').trim()"))
        # The theme's panel: near white, or near black in the dark theme.
        assert min(panel) >= 240 if scheme == "light" else max(panel) <= 48, panel

        plot = page.locator(figure).first
        plot.hover()
        camera = plot.locator(CAMERA)
        camera.wait_for(state="visible")
        for click in (lambda: page.click("#download-png"), camera.click):
            _, png = downloaded(page, click)
            image = Image.open(io.BytesIO(png))
            assert image.mode == "RGBA"
            assert image.getextrema()[3] == (255, 255)  # every pixel opaque
            for corner in [(0, 0), (image.width - 1, image.height - 1)]:
                assert image.getpixel(corner)[:3] == panel

        _, svg = downloaded(page, lambda: page.click("#download-svg"))
        paper, labels = svg_colours(svg)
        assert paper == panel
        assert len(labels) > 5  # the title, the axes' titles, the tick labels
        for colour in labels:
            assert contrast(colour, paper) >= 4.5, (colour, paper)

        # The PDF's JPEG has no transparency: it is on the same paper.
        _, pdf = downloaded(page, lambda: page.click("#download-pdf"))
        check_pdf(pdf)
        jpeg = pdf[pdf.index(b"stream\n") + 7 :]
        corner = Image.open(io.BytesIO(jpeg)).convert("RGB").getpixel((0, 0))
        assert max(abs(a - b) for a, b in zip(corner, panel, strict=True)) <= 6, corner
        assert page.errors == []
        assert page.csp_violations == []

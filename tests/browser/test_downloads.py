"""Download PNG / SVG and Plotly's modebar camera, with the page's CSP enforced.

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

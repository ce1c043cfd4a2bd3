"""docs/attnviz.ipynb, executed by a real IPython kernel and read as a reader would.

nbclient runs every cell in a fresh kernel (the toy engine, MiniLM, SmolLM2, a numpy
array); nbconvert turns the executed notebook into HTML; Chromium opens that file with
every request that is not the file itself aborted (nbconvert's page asks for a CDN's
require.js and MathJax: refused, as on an offline machine) and every view must still be
drawn, one heatmap per map, from the Plotly.js the first view embedded.
"""

from pathlib import Path

import nbformat
import pytest

from tests.support.browser import open_offline

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "attnviz.ipynb"
EXPECTED_MAPS = [2, 6 * 12, 9, 2]
"""Heatmaps per view: the toy layer's 2 heads, MiniLM's 6 x 12, SmolLM2's layer of 9 heads,
the numpy array's 2 heads."""


def test_the_example_notebook_runs_and_its_html_draws_every_map_offline(  # type: ignore[no-untyped-def]
    browser, tmp_path: Path
) -> None:
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    ).execute()
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert errors == []
    assert (tmp_path / "causal-heads.html").stat().st_size > 1_000_000  # .save() wrote it
    html, _ = HTMLExporter().from_notebook_node(notebook)
    assert html.count("plotly.js (attnviz: core, heatmap, bar") == 1  # embedded once
    path = tmp_path / "attnviz.html"
    path.write_text(html, encoding="utf-8")
    page, _outside, page_errors = open_offline(browser, path)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.attnviz-view')]"
        ".every((view) => view.data !== undefined)",
        timeout=60_000,
    )
    maps = page.evaluate(
        "() => [...document.querySelectorAll('.attnviz-view')]"
        ".map((view) => view.data.filter((t) => t.type === 'heatmap').length)"
    )
    assert maps == EXPECTED_MAPS
    assert page.locator(".attnviz-view .hm").count() == sum(EXPECTED_MAPS)
    assert page_errors == []
    page.screenshot(path=str(tmp_path / "notebook.png"), full_page=True)
    page.context.close()

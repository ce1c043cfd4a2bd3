"""docs/attnviz.ipynb, executed by a real IPython kernel and read as a reader would.

nbclient runs every cell in a fresh kernel (the toy engine, MiniLM, SmolLM2, a numpy
array); nbconvert turns the executed notebook into HTML; Chromium opens that file with
every request that is not the file itself aborted (nbconvert's page asks for a CDN's
require.js and MathJax: refused, as on an offline machine) and every view must still be
drawn: the head views as lines, the model view's grid from the Plotly.js embedded once.
"""

from pathlib import Path

import nbformat
import pytest

from tests.support.browser import HANG_MS, close_page, open_offline

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("pretrained_extra")]

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "attnviz.ipynb"
EXPECTED_VIEWS = ["head", "model", "head", "head"]
"""The notebook's views: the toy layer's 2 heads, MiniLM's 6 x 12 model view, SmolLM2's
layer of 9 heads, the numpy array's 2 heads (interactive widgets: app/views/widget.py)."""
EXPECTED_HEADS = [2, 12, 9, 2]


def test_the_example_notebook_runs_and_its_html_draws_every_view_offline(  # type: ignore[no-untyped-def]
    browser, tmp_path: Path
) -> None:
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # Without the widget state nbconvert shows each view's offline HTML (the widget
    # manager of a saved notebook would come from a CDN).
    NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": tmp_path}},
        store_widget_state=False,
    ).execute()
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert errors == []
    # .save() wrote an interactive head view: lines, no Plotly.js (it was 1.2 MB).
    size = (tmp_path / "causal-heads.html").stat().st_size
    assert 10_000 < size < 300_000
    html, _ = HTMLExporter().from_notebook_node(notebook)
    assert html.count("plotly.js (attnviz: core, heatmap, bar") == 1  # embedded once
    path = tmp_path / "attnviz.html"
    path.write_text(html, encoding="utf-8")
    page, _outside, page_errors = open_offline(browser, path)
    page.wait_for_function(
        f"document.querySelectorAll('.attnviz-widget[data-drawn=\"true\"]').length"
        f" === {len(EXPECTED_VIEWS)}",
        timeout=HANG_MS,
    )
    views = page.evaluate(
        "() => [...document.querySelectorAll('.attnviz-widget')].map((w) => w.dataset.view)"
    )
    assert views == EXPECTED_VIEWS
    heads = page.evaluate(
        """() => [...document.querySelectorAll('.attnviz-widget')].map((w) => {
            const grid = w.querySelector('.js-plotly-plot');
            if (grid && grid.tiles) return grid.tiles.cols;
            return w.querySelectorAll('.head-toggle').length;
        })"""
    )
    assert heads == EXPECTED_HEADS
    assert page_errors == []
    page.screenshot(path=str(tmp_path / "notebook.png"), full_page=True)
    close_page(page)

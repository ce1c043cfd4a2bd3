"""First visit and view switches in headless Chromium, side by side in one run.

Usage (from the repository root):  make bench   or   .venv/bin/python -m benchmarks.first_visit

1. Navigation to the default preset drawn: AttnViz's / (its own timing,
   ``window.attnviz.timings.sinceLoadMs``) against a bare page that loads the full
   plotly.min.js of the plotly Python package and draws one 10 x 10 heatmap, served by
   Python's http.server. Every visit opens a fresh browser context (an empty cache), and
   the two pages alternate, so both see the same machine. Target: AttnViz <= 0.6 x the
   bare page (the median of the repetitions' own ratios).
2. Every view switch on / and /models: the time from the view's data arriving (or from
   the click, when it needed none) to the view drawn, as the pages measure it
   (``viewTimings``): until the maps on screen are drawn (``drawMs``; the /models layer
   view draws its off-screen heads after them) and until every map is (``allDrawnMs``).
   Target: the maps on screen under 500 ms.

Timings are medians in milliseconds (ms); machines are shared and noisy, so read the
ratios. Traffic goes to 127.0.0.1 only, bounded in count and time.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import plotly
from attnviz.devtools import CHROMIUM_ARGS, chromium_path, live_process

BARE_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>bare Plotly page</title></head>
<body><div id="plot" style="width: 600px; height: 500px"></div>
<script src="plotly.min.js"></script>
<script>
const z = Array.from({ length: 10 }, (_, i) =>
  Array.from({ length: 10 }, (_, j) => (j <= i ? 1 / (i + 1) : null)));
Plotly.newPlot("plot", [{ type: "heatmap", z, texttemplate: "%{z:.2f}" }])
  .then(() => { window.drawnMs = performance.now(); });
</script></body></html>
"""
"""The baseline: the full Plotly.js bundle and one heatmap, nothing else."""

VIEWPORT = {"width": 1400, "height": 1000}
TARGET_RATIO = 0.6
TARGET_SWITCH_MS = 500.0


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def bare_site() -> Iterator[str]:
    """Serve the bare page and the plotly package's plotly.min.js on loopback; yields its URL."""
    plotly_js = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(plotly_js, Path(folder) / "plotly.min.js")
        (Path(folder) / "index.html").write_text(BARE_PAGE)
        handler = functools.partial(_QuietHandler, directory=folder)
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_port}/index.html"
        finally:
            server.shutdown()
            server.server_close()


def visit_ms(browser: Any, url: str, done: str, value: str) -> float:
    """Milliseconds from navigation to ``value`` once ``done`` holds, in a fresh context."""
    # bypass_csp: Playwright evaluates string predicates with eval, which AttnViz's
    # Content-Security-Policy forbids; the page itself is unchanged.
    context = browser.new_context(viewport=VIEWPORT, bypass_csp=True)
    try:
        page = context.new_page()
        page.goto(url)
        page.wait_for_function(done, timeout=60_000)
        return float(page.evaluate(value))
    finally:
        context.close()


def first_visits(browser: Any, attnviz_url: str, bare_url: str, reps: int) -> dict[str, Any]:
    """Alternating fresh visits of AttnViz's / and the bare page; medians and ratio."""
    ours, bare = [], []
    # One visit of each first, not counted: the server's first request and the disk.
    visit_ms(browser, attnviz_url, "window.attnviz && window.attnviz.timings", "0")
    visit_ms(browser, bare_url, "window.drawnMs !== undefined", "window.drawnMs")
    for _ in range(reps):
        ours.append(
            visit_ms(
                browser,
                attnviz_url,
                "window.attnviz && window.attnviz.timings !== undefined",
                "window.attnviz.timings.sinceLoadMs",
            )
        )
        bare.append(visit_ms(browser, bare_url, "window.drawnMs !== undefined", "window.drawnMs"))
    return {
        "attnviz": statistics.median(ours),
        "bare": statistics.median(bare),
        "ratio": statistics.median(a / b for a, b in zip(ours, bare, strict=True)),
    }


def view_switches(
    browser: Any, url: str, ready: str, timings: str, reps: int
) -> list[tuple[str, float, float, float]]:
    """Each tab of the page at ``url`` clicked ``reps`` times in turn once ``ready`` holds:
    (view, median ms its requests took, median ms until the maps on screen were drawn after
    its data arrived, median ms until every map was)."""
    context = browser.new_context(viewport=VIEWPORT, bypass_csp=True)
    try:
        page = context.new_page()
        page.goto(url)
        page.wait_for_function(ready, timeout=120_000)
        views = page.eval_on_selector_all("[role=tab]", "tabs => tabs.map(t => t.dataset.view)")
        measured: dict[str, list[tuple[float, float, float]]] = {view: [] for view in views}
        for _ in range(reps):
            for view in [*views[1:], views[0]]:
                page.evaluate(f"{timings} = null")
                page.click(f"[role=tab][data-view={view}]")
                page.wait_for_function(
                    f"{timings} && {timings}.view === '{view}'"
                    f" && document.getElementById('view-{view}').dataset.drawn === 'true'",
                    timeout=120_000,
                )
                t = page.evaluate(timings)
                measured[view].append((t["fetchMs"], t["drawMs"], t["allDrawnMs"]))
        return [
            (
                view,
                statistics.median(f for f, _, _ in triples),
                statistics.median(d for _, d, _ in triples),
                statistics.median(a for _, _, a in triples),
            )
            for view, triples in measured.items()
        ]
    finally:
        context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9, help="first visits of each page")
    parser.add_argument("--switch-reps", type=int, default=3, help="clicks on each tab")
    args = parser.parse_args()
    executable = chromium_path()
    if executable is None:
        print("Chromium is not installed (make browser): nothing to measure.")
        return
    from playwright.sync_api import sync_playwright

    with (
        live_process() as (url, _),
        bare_site() as bare_url,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        visits = first_visits(browser, url + "/", bare_url, args.reps)
        page_switches = view_switches(
            browser,
            url + "/",
            "window.attnviz && window.attnviz.timings",
            "window.attnviz.viewTimings",
            args.switch_reps,
        )
        model_switches = view_switches(
            browser,
            url + "/models",
            "window.attnvizModels && window.attnvizModels.timings",
            "window.attnvizModels.viewTimings",
            args.switch_reps,
        )
        browser.close()

    print("## First visit, headless Chromium (ms from navigation to drawn, medians)\n")
    print(f"{args.reps} fresh visits of each page, alternating.\n")
    print("| page | drawn after navigation | ratio (target <= 0.6) |")
    print("|---|---|---|")
    print(f"| AttnViz /, default preset | {visits['attnviz']:.0f} | {visits['ratio']:.2f}x |")
    print(f"| bare page, full plotly.min.js, one heatmap | {visits['bare']:.0f} | 1.00x |")
    verdict = "met" if visits["ratio"] <= TARGET_RATIO else "NOT met"
    print(f"\nTarget AttnViz <= {TARGET_RATIO} x the bare page: {verdict}.")
    print(f"\n## View switches (ms, medians of {args.switch_reps} clicks per tab)\n")
    print(
        "| page | view | its requests | on screen drawn after its data (target < 500) | all maps |"
    )
    print("|---|---|---|---|---|")
    for page_name, switches in (("/", page_switches), ("/models", model_switches)):
        for view, fetch_ms, draw_ms, all_ms in switches:
            print(f"| {page_name} | {view} | {fetch_ms:.0f} | {draw_ms:.0f} | {all_ms:.0f} |")
    slowest = max(d for _, _, d, _ in page_switches + model_switches)
    verdict = "met" if slowest < TARGET_SWITCH_MS else "NOT met"
    print(f"\nSlowest view drawn {slowest:.0f} ms after its data: target {verdict}.")


if __name__ == "__main__":
    main()

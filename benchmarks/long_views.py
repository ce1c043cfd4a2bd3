"""Every /models view of SmolLM2 at long inputs in headless Chromium: what drawing costs.

Usage (from the repository root):
    .venv/bin/python -m benchmarks.long_views [--lengths 2000,3000,8000] [--views layer,...]

For each length, a prompt of about that many SmolLM2 tokens is computed on /models (no
chat template, no generation) by a real server (``python -m attnviz``, its compute budget
raised to 900 s: a pass over 8,000 tokens takes about 90 s on two cores), then every view
is opened in turn. Measured by the page itself (``window.attnvizModels``):

* the model view's grid: the drawing after the stream's last line (``wholeGridMs -
  responseMs``). Targets (issue 42): <= 1 s at 2,000 tokens and <= 3 s at 8,000;
* each other view: the server's time (``fetchMs``: from the click to its last answer) and
  the drawing after it (``drawMs``: the maps on screen; ``allDrawnMs``: every map).
  Targets: the Neuron and Tokens (generation) views <= 3 s at 3,000 tokens.

An error shown by the page, or a request of the page's answered 4xx or 5xx, is printed
and fails the run (exit status 1). Times in ms, one run per length (each costs minutes);
machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from attnviz.devtools import CHROMIUM_ARGS, chromium_path, live_process

SMOLLM2 = "SmolLM2-135M-Instruct"
SENTENCE = "Sentence {i} says that every head weighs the earlier tokens."
TOKENS_PER_SENTENCE = 13.6  # SmolLM2's tokenizer on SENTENCE, measured
VIEWS = ("layer", "averages", "lines", "neuron", "generation", "compare")
GRID_TARGET_MS = {2000: 1000.0, 8000: 3000.0}
VIEW_TARGET_MS = {("neuron", 3000): 3000.0, ("generation", 3000): 3000.0}
WAIT_MS = 900_000


def prompt(tokens: int) -> str:
    """About ``tokens`` SmolLM2 tokens of numbered sentences."""
    return " ".join(SENTENCE.format(i=i) for i in range(round(tokens / TOKENS_PER_SENTENCE)))


def target_for(length: int, table: dict[int, float]) -> float | None:
    """The target of the nearest length within 15%, else None."""
    for nominal, target in table.items():
        if abs(length - nominal) <= 0.15 * nominal:
            return target
    return None


def verdict(ms: float, target: float | None) -> str:
    if target is None:
        return ""
    return f"target <= {target:.0f} ms: {'met' if ms <= target else 'MISSED'}"


def shown_error(page: Any) -> str:
    return str(
        page.evaluate(
            "document.getElementById('error').hidden ? '' : "
            "document.getElementById('error').textContent"
        )
    )


def wait_view(page: Any, view: str) -> None:
    page.wait_for_function(
        f"document.getElementById('view-{view}').dataset.drawn === 'true' || "
        "!document.getElementById('error').hidden",
        timeout=WAIT_MS,
    )


def measure(page: Any, length: int, views: tuple[str, ...], failures: list[str]) -> None:
    if page.get_attribute(".tabs button[data-view=model]", "aria-selected") != "true":
        page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
        page.click(".tabs button[data-view=model]")  # Compute draws the open view
        wait_view(page, "model")
    page.fill("#texts", prompt(length))
    page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
    page.click("#compute")
    wait_view(page, "model")
    if error := shown_error(page):
        failures.append(f"{length} model: {error}")
        print(f"  model view: ERROR {error}", flush=True)
        return
    tokens, timings = page.evaluate(
        "() => [window.attnvizModels.lastResponse.tokens[0].length, window.attnvizModels.timings]"
    )
    grid = timings["wholeGridMs"] - timings["responseMs"]
    print(f"{tokens} tokens", flush=True)
    print(
        f"  model view: stream {timings['responseMs'] / 1000:.1f} s, grid drawn "
        f"{grid:.0f} ms after it  {verdict(grid, target_for(tokens, GRID_TARGET_MS))}",
        flush=True,
    )
    for view in views:
        page.evaluate(f"document.getElementById('view-{view}').dataset.drawn = 'stale'")
        page.click(f".tabs button[data-view={view}]")
        wait_view(page, view)
        if error := shown_error(page):
            failures.append(f"{tokens} {view}: {error}")
            print(f"  {view}: ERROR {error}", flush=True)
            continue
        t = page.evaluate("() => window.attnvizModels.viewTimings")
        target = VIEW_TARGET_MS.get((view, 3000)) if target_for(tokens, {3000: 0}) == 0 else None
        print(
            f"  {view}: server {t['fetchMs'] / 1000:.1f} s, drawn {t['drawMs']:.0f} ms "
            f"(every map {t['allDrawnMs']:.0f} ms)  {verdict(t['allDrawnMs'], target)}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="2000,3000,8000")
    parser.add_argument("--views", default=",".join(VIEWS))
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from tests.support.browser import wait_model_option

    lengths = [int(n) for n in args.lengths.split(",")]
    views = tuple(v for v in args.views.split(",") if v)
    failures: list[str] = []
    env = {"ATTNVIZ_COMPUTE_TIMEOUT_S": "900"}
    with live_process(env=env, timeout_s=120) as (url, _), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000}, bypass_csp=True)
        page = context.new_page()
        statuses: list[str] = []
        page.on(
            "response",
            lambda r: (
                statuses.append(f"{r.status} {r.url}")
                if "/api/" in r.url and r.status >= 400
                else None
            ),
        )
        page.goto(url + "/models")
        wait_view(page, "model")
        wait_model_option(page, SMOLLM2, WAIT_MS)
        page.evaluate("document.getElementById('view-model').dataset.drawn = 'stale'")
        page.select_option("#model", SMOLLM2)
        wait_view(page, "model")
        page.uncheck("#chat")
        page.fill("#max-new-tokens", "0")
        started = time.monotonic()
        for length in lengths:
            measure(page, length, views, failures)
        browser.close()
    failures += [f"answered {s}" for s in statuses]
    print(f"{time.monotonic() - started:.0f} s in all")
    for failure in failures:
        print("FAILED:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

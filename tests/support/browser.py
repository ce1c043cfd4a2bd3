"""Helpers of the browser tests (tests/browser): pages, views, links and Plotly's drawing.

Nothing here is a test; the test modules import from here, never from each other.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

HANG_MS = 180_000
"""The browser tests' bound on a hang (ms): every wait is on an event (a view drawn, a
request answered); this only ends one that never comes. A busy 2-core machine has taken
over 60 s to draw /models' first view."""


PAGES: list[object] = []
"""The pages the running test opened (:func:`watched`), for its report if it fails;
emptied as each browser test starts (tests/browser/conftest.py)."""


def watched(page) -> None:  # type: ignore[no-untyped-def]
    """Record what the page does, for the tests and for a failed test's report
    (:func:`failure_report`), from Playwright's events (a renderer that hangs cannot hang
    the report); the page joins :data:`PAGES`.

    The page gets ``errors`` (its uncaught errors, checked by the tests), ``console_errors``
    (its console's error lines) and ``requests``: each request's method, path, start and
    end (time.monotonic(), s, as Playwright hands the events over), status or failure
    (:func:`requests_report`).
    """
    log: list[dict[str, object]] = []
    open_: dict[int, dict[str, object]] = {}

    def started(request) -> None:  # type: ignore[no-untyped-def]
        if request.url.startswith("http"):
            what = f"{request.method} {urlsplit(request.url).path}"
            entry = {"what": what, "start": time.monotonic()}
            open_[id(request)] = entry
            log.append(entry)

    def ended(request, outcome: str) -> None:  # type: ignore[no-untyped-def]
        entry = open_.pop(id(request), None)
        if entry is not None:
            entry["end"], entry["outcome"] = time.monotonic(), outcome

    page.on("request", started)
    page.on("response", lambda response: ended(response.request, str(response.status)))
    page.on("requestfailed", lambda request: ended(request, f"failed: {request.failure}"))
    page.errors, page.console_errors, page.requests = [], [], log
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on(
        "console",
        lambda message: (
            page.console_errors.append(message.text) if message.type == "error" else None
        ),
    )
    PAGES.append(page)


AS_JSON = r"""(...args) => Promise.resolve((FUNCTION)(...args)).then((value) => {
    const text = JSON.stringify(value, (key, item) =>
        ArrayBuffer.isView(item) ? Array.from(item)
        : typeof item === "number" && !Number.isFinite(item) ? "\u0000" + item : item);
    return text === undefined ? "null" : text.replace(/"\\u0000(NaN|-?Infinity)"/g, "$1");
})"""
"""A JavaScript function (``FUNCTION``: the one to call) whose value comes back as one JSON
string: typed arrays as arrays, NaN and ±Infinity as Python's ``json`` writes them."""


def evaluate_json(target, function: str, arg: object = None) -> Any:  # type: ignore[no-untyped-def]
    """``target.evaluate(function, arg)`` (a page, locator or element handle) for a large
    plain value (a response, a heatmap's z), sent as one JSON string.

    Playwright checks a value it receives item by item, in Python: a page's last response
    of 8–11 MB took 2–4 CPU-s of the test's process; an object of 2.9 million numbers (53 MB
    of JSON) 19–22 CPU-s there and 51–98 s in all, against 1.4–2.2 CPU-s and 6–15 s as one
    string (three reads each way, on a busy machine). The value must be plain data (objects,
    arrays, numbers, strings, booleans, null; typed arrays become lists): -0 arrives as
    0, a Date as its ISO string, ``undefined`` in an array as None.
    """
    return json.loads(target.evaluate(AS_JSON.replace("FUNCTION", function, 1), arg))


def requests_report(log: list[dict[str, object]]) -> str:
    """One line per request the page made: answered (status, s) or still open (s)."""
    now = time.monotonic()
    lines = []
    for entry in log:
        start = float(entry["start"])  # type: ignore[arg-type]
        if "end" in entry:
            took = float(entry["end"]) - start  # type: ignore[arg-type]
            lines.append(f"{entry['what']}: {entry['outcome']} after {took:.1f} s")
        else:
            lines.append(f"{entry['what']}: no answer after {now - start:.1f} s")
    return "\n".join(lines) or "(no request)"


def failure_report(server_url: str | None, server_log: Path | None) -> list[tuple[str, str]]:
    """What a failed browser test's report adds: for each page it opened, its requests
    (:func:`requests_report`), uncaught errors and console errors; the server's
    ``/healthz`` (its computations queued and running) and the end of its log. Was the
    server still computing, had the page its answers, did the renderer stall?"""
    sections = []
    for number, page in enumerate(PAGES, 1):
        try:
            url = page.url  # type: ignore[attr-defined]
        except Exception:  # a closed page
            url = "(closed)"
        requests = requests_report(page.requests)  # type: ignore[attr-defined]
        errors = "\n".join(getattr(page, "errors", [])) or "(none)"
        console = "\n".join(getattr(page, "console_errors", [])) or "(none)"
        sections.append(
            (
                f"page {number}: its requests, uncaught errors and console errors",
                f"{url}\n{requests}\n-- uncaught errors:\n{errors}\n-- console errors:\n{console}",
            )
        )
    if server_url is not None:
        try:
            with urllib.request.urlopen(server_url + "/healthz", timeout=10) as response:
                health = response.read().decode(errors="replace")
        except OSError as error:
            health = f"no answer in 10 s: {error}"
        sections.append(("the server's /healthz", health))
    if server_log is not None and server_log.is_file():
        tail = server_log.read_bytes()[-6000:].decode(errors="replace")
        sections.append(("the end of the server's log", tail))
    return sections


# The attention page (/) -------------------------------------------------------------

HEADS = "#heads .head-plot"
"""The per-head maps of the Heads tab."""


def wait_for_heads(page, count: int) -> None:  # type: ignore[no-untyped-def]
    """Until ``count`` heads are drawn."""
    page.wait_for_function(
        f"document.querySelectorAll('{HEADS} .main-svg').length >= {count}"
        f" && document.getElementById('heads').dataset.drawnHeads === '{count}'",
        timeout=HANG_MS,
    )


def compute_heads(page, count: int) -> None:  # type: ignore[no-untyped-def]
    """Press Compute on / and wait until the new response's ``count`` heads are drawn (the
    heads of the last response stay drawn, and counted, until the new one arrives)."""
    page.evaluate("document.getElementById('heads').dataset.drawnHeads = 'stale'")
    page.click("#compute")
    wait_for_heads(page, count)


def wait_heads(page, count: int) -> None:  # type: ignore[no-untyped-def]
    """Until ``count`` heads are drawn, waited for as elements."""
    page.locator(f"{HEADS} .main-svg").nth(count - 1).wait_for(timeout=HANG_MS)
    page.wait_for_selector(f"#heads[data-drawn-heads='{count}']", timeout=HANG_MS)


def open_view(page, view: str) -> None:  # type: ignore[no-untyped-def]
    """Click the tab of ``view`` and wait until it is drawn afresh."""
    page.evaluate(f"document.getElementById('view-{view}').dataset.drawn = 'stale'")
    page.click(f".tabs button[data-view={view}]")
    page.wait_for_function(
        f"document.getElementById('view-{view}').dataset.drawn === 'true'", timeout=HANG_MS
    )


SHARED_CONTEXTS: dict[int, object] = {}
"""The shared context of each session browser (by ``id(browser)``; tests/conftest.py's
``browser`` fixture): the persistent context Chromium was launched with, whose disk cache
keeps the static files and V8's compiled code between tests. A page opened in a context of
its own compiles Plotly's bundle and the page's modules afresh in a new renderer: /models
cost 2.4 CPU-s of Chromium that way, and 1.1 in the shared context (docs/development.md)."""


def opened_page(browser, width: int, height: int, **options):  # type: ignore[no-untyped-def]
    """A page at ``width`` x ``height``, :data:`HANG_MS` its default timeout,
    :func:`watched`; close it with :func:`close_page`.

    With ``options`` (the context's others) exactly ``bypass_csp=True``, the page opens in
    the browser's shared context (:data:`SHARED_CONTEXTS`: CSP bypassed, the viewport set
    on the page); with any other options, or a browser without one, in a context of its
    own. Either way it is a new page: a renderer and a document of its own, nothing of
    another test's page but the cache (the pages keep no cookie or storage)."""
    shared = SHARED_CONTEXTS.get(id(browser))
    if shared is not None and options == {"bypass_csp": True}:
        page = shared.new_page()  # type: ignore[attr-defined]
        page.set_viewport_size({"width": width, "height": height})
    else:
        context = browser.new_context(viewport={"width": width, "height": height}, **options)
        context.set_default_timeout(HANG_MS)  # a bound on a hang: a busy machine draws slowly
        page = context.new_page()
    watched(page)
    return page


def close_page(page) -> None:  # type: ignore[no-untyped-def]
    """Close a page of :func:`opened_page`, and its context when it has one of its own."""
    if page.context in SHARED_CONTEXTS.values():
        page.close()
    else:
        page.context.close()


def close_shared_pages(browser) -> None:  # type: ignore[no-untyped-def]
    """Close every page a test left open in the browser's shared context (a second tab
    opened from ``page.context``), but the blank one the context was launched with."""
    shared = SHARED_CONTEXTS.get(id(browser))
    if shared is not None:
        for page in shared.pages[1:]:  # type: ignore[attr-defined]
            page.close()


def another_page(page):  # type: ignore[no-untyped-def]
    """A second page in ``page``'s context at its viewport (a link opened in a new tab)."""
    other = page.context.new_page()
    other.set_viewport_size(page.viewport_size)
    return other


class HeldResponses:
    """Requests to ``pattern`` wait until ``release``; the others go through. Playwright hands
    a route to the test's thread between its calls: :meth:`wait_for` waits on that event,
    so a test sees the page waiting for an answer before it lets the answer come."""

    def __init__(self, page, pattern: str) -> None:  # type: ignore[no-untyped-def]
        self.page = page
        self.pattern = pattern
        self.held: list[object] = []
        page.route(pattern, self.hold)

    def hold(self, route) -> None:  # type: ignore[no-untyped-def]
        self.held.append(route)

    def wait_for(self, count: int) -> None:
        for _ in range(200):
            if len(self.held) >= count:
                return
            self.page.wait_for_timeout(50)
        raise AssertionError(f"{count} requests to {self.pattern} never came")

    def release(self) -> None:
        for route in self.held:
            route.continue_()  # type: ignore[attr-defined]
        self.page.unroute(self.pattern, self.hold)


def new_page(browser, width: int, height: int):  # type: ignore[no-untyped-def]
    """A page at ``width`` x ``height`` (the `page` fixture's is 1400 x 950), its CSP bypassed
    for Playwright's string waits, in the shared context (:func:`opened_page`: ``errors``,
    ``requests``; :func:`close_page`)."""
    return opened_page(browser, width, height, bypass_csp=True)


# The page position of cell (row, col) of subplot `subplot` of the index-th plot matching
# `selector`, from Plotly's own axes (rows and columns are the indices 0, 1, ...).
CELL_CENTRE = """([selector, index, row, col, subplot]) => {
    const div = document.querySelectorAll(selector)[index];
    const suffix = subplot > 1 ? String(subplot) : "";
    const xa = div._fullLayout["xaxis" + suffix];
    const ya = div._fullLayout["yaxis" + suffix];
    const box = div.querySelector(".main-svg").getBoundingClientRect();
    // Whole pixels: the mouse events Chromium sends carry integer coordinates, and on a
    // map of cells under 2 px a fractional centre could be read in the next cell.
    return [Math.round(box.left + xa._offset + xa.l2p(col)),
            Math.round(box.top + ya._offset + ya.l2p(row))];
}"""


# The models page (/models) ----------------------------------------------------------

# The model view's grid is one tiled heatmap (heatmap.js tiledGrid): div.cell(r, c) is
# thumbnail (r, c)'s matrix as drawn, div.tiles places it in the big matrix.
GRID = "document.getElementById('model-grid')"


def grid_point(page, r: int, c: int, i: int | None = None, j: int | None = None) -> list[int]:  # type: ignore[no-untyped-def]
    """The big matrix's (row, column) of cell (i, j) of thumbnail (r, c) (its centre if None)."""
    return page.evaluate(  # type: ignore[no-any-return]
        f"""([r, c, i, j]) => {{
            const t = {GRID}.tiles;
            const row = i ?? Math.floor(t.height / 2);
            return [t.y[r] + row, t.x[c] + (j ?? Math.floor(t.width / 2))];
        }}""",
        [r, c, i, j],
    )


def wait_drawn(page, view: str) -> None:  # type: ignore[no-untyped-def]
    """Until the view ``view`` of /models is drawn; past :data:`HANG_MS`, an AssertionError
    that says what the page showed (its error, progress, models' states, the view's mark)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            f"document.getElementById('view-{view}').dataset.drawn === 'true'", timeout=HANG_MS
        )
    except PlaywrightTimeout:
        shown = page.evaluate(
            f"""() => {{
                const text = (id) => document.getElementById(id)?.textContent?.trim() ?? null;
                return {{
                    drawn: document.getElementById('view-{view}')?.dataset.drawn ?? null,
                    error: text('error'),
                    progress: text('layer-progress'),
                    compute_disabled: document.getElementById('compute')?.disabled ?? null,
                    models: [...document.querySelectorAll('#model option')].map(
                        (o) => [o.value, o.dataset.state]),
                }};
            }}"""
        )
        raise AssertionError(f"view {view!r} not drawn in {HANG_MS} ms: {shown}") from None


def redraw(page, view: str, action) -> None:  # type: ignore[no-untyped-def]
    """Mark ``view`` stale, run ``action`` and wait until the view is drawn again."""
    page.evaluate(f"document.getElementById('view-{view}').dataset.drawn = 'stale'")
    action()
    wait_drawn(page, view)


def wait_model_option(page, name: str, timeout_ms: float) -> None:  # type: ignore[no-untyped-def]
    """Until /models' picker offers ``name`` (its option enabled: the model is loaded)."""
    page.wait_for_function(
        f"(() => {{ const o = document.querySelector(\"#model option[value='{name}']\");"
        " return o !== null && !o.disabled; })()",
        timeout=timeout_ms,
    )


def type_and_compute(page, text: str) -> None:  # type: ignore[no-untyped-def]
    """Type ``text`` into /models' form, compute, and wait for the model view."""
    page.fill("#texts", text)
    redraw(page, "model", lambda: page.click("#compute"))


# Links ------------------------------------------------------------------------------


def encode_link(request: object) -> str:
    """A link's request parameter, as the page writes it."""
    deflate = zlib.compressobj(wbits=-15)
    raw = deflate.compress(json.dumps(request).encode()) + deflate.flush()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_link(url: str) -> object:
    """The request a link written by the page carries."""
    value = parse_qs(urlsplit(url).query)["request"][0]
    raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    return json.loads(zlib.decompress(raw, wbits=-15))


# Saved views (HTML files) -----------------------------------------------------------


def open_offline(browser, path: Path):  # type: ignore[no-untyped-def]
    """A page showing ``path`` with every other request aborted; (page, outside URLs,
    page errors)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    outside: list[str] = []
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    def handle(route) -> None:  # type: ignore[no-untyped-def]
        if route.request.url == path.as_uri():
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", handle)
    page.goto(path.as_uri())
    return page, outside, errors

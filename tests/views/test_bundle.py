"""attnviz.views.bundle: the page's ES modules as one module, as the browser would run them.

The reference is Chromium's own module loader: the same modules, served over a routed
URL and imported natively, must give the same exports and run in the same order as their
bundle imported from a blob: URL (as anywidget imports a widget's _esm).
"""

from pathlib import Path

import pytest
from attnviz.resources import STATIC_DIR
from attnviz.views.bundle import BundleError, bundle
from attnviz.views.interactive import JS_ROOT, WIDGET_ENTRY, widget_esm

# Every form the bundler takes, across folders, with a module loaded twice (evaluated
# once) and each module recording when it runs.
MODULES = {
    "entry.js": """
import "./side.js";
import { a, b as renamed } from "./lib/one.js";
import * as two from "./lib/two.js";
import three from "./three.js";
import { again } from "./again.js";
export { renamed as reexported };
export default {
  a, renamed, twoKeys: Object.keys(two).sort(), doubled: two.double(21), three, again,
  order: globalThis.order.slice(), star: two.fromStar, counter: globalThis.counter,
};
""",
    "side.js": "globalThis.order = ['side']; globalThis.counter = 0;\n",
    "lib/one.js": """
globalThis.order.push('one');
globalThis.counter += 1;
export const a = 1;
export function b() { return 'b'; }
""",
    "lib/two.js": """
import { a } from "./one.js";
export * from "../star.js";
globalThis.order.push('two');
export async function double(x) { return 2 * x + a - 1; }
export class Thing {}
""",
    "star.js": "globalThis.order.push('star');\nexport const fromStar = 'star';\n",
    "three.js": "globalThis.order.push('three');\nexport default 3;\n",
    "again.js": 'import { a } from "./lib/one.js";\nexport const again = a + 1;\n',
}


def write(root: Path, modules: dict[str, str]) -> Path:
    for name, source in modules.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    return root


RUN_BLOB = """async (source) => {
    const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
    const module = await import(url);
    const value = module.default;
    return { ...value, reexported: undefined, renamed: value.renamed(),
             doubled: await value.doubled, keys: Object.keys(module) };
}"""

RUN_NATIVE = """async (url) => {
    const module = await import(url);
    const value = module.default;
    return { ...value, reexported: undefined, renamed: value.renamed(),
             doubled: await value.doubled, keys: Object.keys(module) };
}"""


def test_the_bundle_runs_as_the_browser_runs_the_modules(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = write(tmp_path, MODULES)
    source = bundle(root, "entry.js")
    context = browser.new_context()
    try:
        page = context.new_page()

        def serve(route) -> None:  # type: ignore[no-untyped-def]
            name = route.request.url.removeprefix("http://modules.test/")
            route.fulfill(
                body=(root / name).read_text(), content_type="text/javascript", status=200
            )

        page.route("http://modules.test/**", serve)
        page.route(
            "http://page.test/",
            lambda route: route.fulfill(body="<p>x</p>", content_type="text/html"),
        )
        page.goto("http://page.test/")
        native = page.evaluate(RUN_NATIVE, "http://modules.test/entry.js")
        page.goto("http://page.test/")  # a fresh global object
        bundled = page.evaluate(RUN_BLOB, source)
    finally:
        context.close()
    assert native["order"] == ["side", "one", "star", "two", "three"]  # the reference
    assert native["counter"] == 1  # one.js, imported three times, ran once
    # The bundle exports the entry's default only (what anywidget reads).
    assert native.pop("keys") == ["default", "reexported"] and bundled.pop("keys") == ["default"]
    assert bundled == native


@pytest.mark.parametrize(
    ("modules", "words"),
    [
        (
            {
                "entry.js": 'import { a } from "./a.js";\nexport default a;\n',
                "a.js": 'import "./entry.js";\nexport const a = 1;\n',
            },
            "import cycle: entry.js -> a.js -> entry.js",
        ),
        ({"entry.js": "export let count = 0;\nexport default 1;\n"}, "export let"),
        ({"entry.js": 'import x from "lodash";\nexport default x;\n'}, "not a relative import"),
        (
            {"entry.js": 'import x from "../out.js";\nexport default x;\n'},
            "leaves the modules' folder",
        ),
        (
            {"entry.js": 'import x from "./gone.js";\nexport default x;\n'},
            "gone.js, which is not there",
        ),
        ({"entry.js": 'export default await import("./a.js");\n'}, "import("),
        ({"entry.js": "export default import.meta.url;\n"}, "import.meta"),
        (
            {
                "entry.js": 'import d, { a } from "./a.js";\nexport default d;\n',
                "a.js": "export const a = 1;\n",
            },
            "import d, { a }",
        ),
        ({"entry.js": "export const { a, b } = {};\nexport default 1;\n"}, "export const {"),
        ({"entry.js": "export const a = 1;\n"}, "no default export"),
    ],
)
def test_what_the_bundler_does_not_take_is_refused_with_the_module_named(
    tmp_path: Path, modules: dict[str, str], words: str
) -> None:
    with pytest.raises(BundleError) as error:
        bundle(write(tmp_path, modules), "entry.js")
    assert words in str(error.value)


def test_the_widget_bundle_holds_the_page_modules_it_imports_once_each() -> None:
    source = widget_esm()
    chunks = [
        line.removeprefix("// ---- ") for line in source.splitlines() if line.startswith("// ---- ")
    ]
    assert len(chunks) == len(set(chunks))
    # The widget's own modules and the page's views it is built from, not copies of them.
    for name in (
        "widget/plotly.js",
        "tokenviews.js",
        "tokens.js",
        "plots/tiles.js",
        "plots/figure.js",
        "lib/display.js",
        WIDGET_ENTRY,
    ):
        assert name in chunks
    for name in chunks:  # each as the file is now, "export " dropped
        text = (STATIC_DIR / JS_ROOT / name).read_text("utf-8")
        declared = [line for line in text.splitlines() if line.startswith("export function ")]
        assert all(line.removeprefix("export ") in source for line in declared)
    # widget/plotly.js before draw.js: its stand-in #plotly-js exists when draw.js runs.
    assert chunks.index("widget/plotly.js") < chunks.index("plots/draw.js")
    assert chunks[-1] == WIDGET_ENTRY
    assert source.rstrip().endswith(f'export default __attnviz_modules["{WIDGET_ENTRY}"].default;')

"""The pages' JavaScript modules (static/js), read as text: no browser, no node.

Every static ``import ... from "..."`` (and ``export ... from "..."``) names a module that
exists, the imports have no cycle, no module is over MAX_LINES lines, and /models keeps its
page state in one module (static/js/models/state.js): ``state`` is declared there only, and
its other modules have no module-level ``let`` or ``var``. Each check is also run once on a
few modules written here that break it, so that it is seen to fail.
"""

import re
from pathlib import Path

import pytest

from tests import REPO_ROOT

JS = REPO_ROOT / "static" / "js"
MAX_LINES = 500
STATE_MODULE = JS / "models" / "state.js"
MODELS_PAGE = JS / "models.js"
# The modules of /models itself (beside what it shares with /): its page state is theirs.
PAGE_MODULES = ("models.js", "models/**/*.js", "media.js", "media/**/*.js")

# A static import or re-export at the start of a line, its names possibly over several
# lines: `import { a, b } from "./x.js";`, `export * from "./x.js";`, `import "./x.js";`.
IMPORT = re.compile(
    r"""^(?:import|export)\s+(?:[^;"']*?\s*from\s*)?["']([^"']+)["']""", re.MULTILINE
)
STATE_DECLARATION = re.compile(
    r"^\s*(?:export\s+)?(?:const|let|var|function|class)\s+state\b", re.MULTILINE
)
MUTABLE_BINDING = re.compile(r"^(?:export\s+)?(?:let|var)\s+(\w+)", re.MULTILINE)
# Two leading axes of an answer stripped by index (`res.attentions[0][0]`): the page reads
# one layer's maps off the stream's layer lines, which have no batch axis, and an answer
# for one sequence and head through lib/arrays.js oneHeadAnswer, which checks the axes.
STRIPPED_AXES = re.compile(r"\[0\]\s*\[0\]")


def modules(root: Path) -> list[Path]:
    """Every .js file under root."""
    return sorted(root.rglob("*.js"))


def imports(module: Path) -> list[str]:
    """The specifiers of a module's static imports and re-exports, in order."""
    return IMPORT.findall(module.read_text(encoding="utf-8"))


def resolve(module: Path, specifier: str) -> Path:
    """The file a relative specifier of `module` names (it need not exist)."""
    assert specifier.startswith(("./", "../")), f"{module}: {specifier!r} is not relative"
    return (module.parent / specifier).resolve()


def graph(root: Path) -> dict[Path, list[Path]]:
    """Each module under root and the modules it imports."""
    return {m.resolve(): [resolve(m, s) for s in imports(m)] for m in modules(root)}


def find_cycle(edges: dict[Path, list[Path]]) -> list[Path] | None:
    """A cycle of imports (its modules, the first again at the end), or None: a DFS that
    meets a module still on its path has found one."""
    done: set[Path] = set()
    path: list[Path] = []
    on_path: set[Path] = set()

    def visit(node: Path) -> list[Path] | None:
        if node in on_path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        path.append(node)
        on_path.add(node)
        for target in edges.get(node, []):
            cycle = visit(target)
            if cycle is not None:
                return cycle
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for start in sorted(edges):
        cycle = visit(start)
        if cycle is not None:
            return cycle
    return None


def reachable(edges: dict[Path, list[Path]], start: Path) -> set[Path]:
    """The modules `start` imports, directly or not, itself included."""
    seen: set[Path] = set()
    stack = [start.resolve()]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(edges.get(node, []))
    return seen


def missing_imports(root: Path) -> list[str]:
    """'module: specifier' for each import under root that names no file."""
    return [
        f"{m.relative_to(root)}: {s}"
        for m in modules(root)
        for s in imports(m)
        if not resolve(m, s).is_file()
    ]


def long_modules(root: Path, limit: int = MAX_LINES) -> list[str]:
    """'module: n lines' for each module under root over `limit` lines."""
    counts = {m: len(m.read_text(encoding="utf-8").splitlines()) for m in modules(root)}
    return [f"{m.relative_to(root)}: {n} lines" for m, n in counts.items() if n > limit]


def page_modules(root: Path) -> list[Path]:
    """The modules of /models itself under root (PAGE_MODULES)."""
    return sorted({m for pattern in PAGE_MODULES for m in root.glob(pattern)})


def state_outside(root: Path, state_module: Path) -> list[str]:
    """The modules of /models other than `state_module` that declare page state: `state`,
    or a module-level let or var."""
    found = []
    for m in page_modules(root):
        if m.resolve() == state_module.resolve():
            continue
        text = m.read_text(encoding="utf-8")
        if STATE_DECLARATION.search(text):
            found.append(f"{m.relative_to(root)}: declares state")
        found.extend(f"{m.relative_to(root)}: let/var {n}" for n in MUTABLE_BINDING.findall(text))
    return found


def stripped_axes(root: Path) -> list[str]:
    """'module:line' for each place under root that indexes [0][0]."""
    return [
        f"{m.relative_to(root)}:{n}"
        for m in modules(root)
        for n, line in enumerate(m.read_text(encoding="utf-8").splitlines(), 1)
        if STRIPPED_AXES.search(line)
    ]


def write(root: Path, files: dict[str, str]) -> Path:
    """Modules written under root (path: text); returns root."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_the_pages_have_modules_and_the_parser_reads_their_imports() -> None:
    assert len(modules(JS)) > 30
    assert STATE_MODULE.is_file()
    # A multi-line import, a re-export and a one-line import are all read.
    assert "./lib/requests.js" in imports(JS / "api.js")
    assert "./models/state.js" in imports(MODELS_PAGE)
    assert "./models/elements.js" in imports(MODELS_PAGE)


def test_every_imported_module_exists() -> None:
    assert missing_imports(JS) == []


def test_the_modules_import_each_other_without_a_cycle() -> None:
    cycle = find_cycle(graph(JS))
    assert cycle is None, " -> ".join(str(m.relative_to(JS)) for m in cycle or [])


def test_no_module_is_over_500_lines() -> None:
    assert long_modules(JS) == []


def test_the_models_page_state_is_declared_in_models_state_js_only() -> None:
    assert STATE_DECLARATION.search(STATE_MODULE.read_text(encoding="utf-8"))
    assert set(page_modules(JS)) <= reachable(graph(JS), MODELS_PAGE)
    assert state_outside(JS, STATE_MODULE) == []


def test_no_module_strips_an_answers_leading_axes_by_index() -> None:
    assert stripped_axes(JS) == []


def test_one_ndjson_reader_serves_the_streamed_grid_and_the_atlas() -> None:
    reader = (JS / "lib" / "ndjson.js").resolve()
    users = {m.relative_to(JS).as_posix() for m, targets in graph(JS).items() if reader in targets}
    assert users == {"models/stream.js", "atlas.js"}
    # Nothing else reads a response body line by line.
    readers = [m for m in modules(JS) if "response.body.getReader" in m.read_text("utf-8")]
    assert readers == [JS / "lib" / "ndjson.js"]


@pytest.mark.parametrize(
    ("template", "entry"), [("index.html", "attnviz.js"), ("models.html", "models.js")]
)
def test_every_module_of_a_page_is_preloaded(template: str, entry: str) -> None:
    """A page's template preloads the modules its entry module reaches (lib/ and plots/
    come from the route's shared_modules): none waits for the module that imports it."""
    html = (REPO_ROOT / "templates" / template).read_text(encoding="utf-8")
    preloaded = set(re.findall(r'rel="modulepreload" href="/static/js/([^"{]+)"', html))
    needed = {m.relative_to(JS).as_posix() for m in reachable(graph(JS), JS / entry)}
    shared = {m for m in needed if m.startswith(("lib/", "plots/"))}
    assert needed - shared - preloaded == set()
    assert preloaded - needed == set()


def test_the_checks_find_a_missing_module_a_cycle_a_long_module_stray_state_and_stripped_axes(
    tmp_path: Path,
) -> None:
    root = write(
        tmp_path,
        {
            "models.js": 'import { state } from "./models/state.js";\nimport "./models/b.js";\n',
            "models/state.js": "export const state = {};\n",
            "models/b.js": 'import {\n  c,\n} from "./c.js";\nexport const b = 1;\n',
            "models/c.js": 'export { b } from "./b.js";\nexport const c = 2;\n',
            "models/d.js": 'import { gone } from "../gone.js";\nlet count = 0;\n',
            "media/e.js": "const state = { speech: null };\n",
            "long.js": "// a line\n" * (MAX_LINES + 1),
            "media/f.js": "export const z = (res) => res.attentions[0] [0][2];\n",
        },
    )
    assert stripped_axes(root) == ["media/f.js:1"]
    assert missing_imports(root) == ["models/d.js: ../gone.js"]
    cycle = find_cycle(graph(root))
    assert cycle is not None
    assert [m.name for m in cycle] in (["b.js", "c.js", "b.js"], ["c.js", "b.js", "c.js"])
    assert long_modules(root) == ["long.js: 501 lines"]
    assert state_outside(root, root / "models" / "state.js") == [
        "media/e.js: declares state",
        "models/d.js: let/var count",
    ]
    # Without the cycle's back edge, no cycle.
    (root / "models" / "c.js").write_text("export const c = 2;\n", encoding="utf-8")
    assert find_cycle(graph(root)) is None

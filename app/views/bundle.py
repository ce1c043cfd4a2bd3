"""The page's ES modules as ONE module, for the notebook widget (no build step).

anywidget loads a widget's ``_esm`` from a blob: URL, where a relative import
(``import { lineView } from "../tokenviews.js"``) resolves against nothing; the widget's
modules (static/js/widget/) import the page's own (static/js/tokenviews.js, tokens.js,
heatmap.js, plots/*, lib/*), so the widget needs them as one module without imports.

Decision: a small bundler here, run once per process (cached) from the installed static
files, rather than an esbuild/rollup step at install or release (no Node toolchain to
install, nothing generated to keep in step with the sources) or data: URLs (each module
inlined, base64, in its importer's URL: the page's import chains are 9 modules deep, and
each level of nesting grows by 4/3, 13x for the deepest). Each module becomes a function
scope evaluated once, in ES evaluation order (depth first, in the order of its import
statements: a dependency before its importer), its imports read from the modules
evaluated before it, its exports returned as a frozen object::

    const __attnviz_modules = Object.create(null);
    __attnviz_modules["lib/form.js"] = (() => {
    ...the module's source, "export " dropped from its declarations...
    return __attnviz_exports([], { option, fillIndexSelect, ... });
    })();

The entry's default export is the bundle's default export (what anywidget reads).

It takes the module syntax the page's modules are written in, one statement per form,
each starting a line: ``import { a, b as c } from "./x.js"``, ``import * as ns from``,
``import d from``, ``import "./x.js"``, ``export function | async function | const |
class``, ``export { a, b as c }``, ``export default``, ``export * from``,
``export { a } from``. Anything else (``export let``, whose later assignments an importer
would not see; ``import(``; ``import.meta``; a bare or URL specifier; an import cycle)
raises a :class:`BundleError` naming the module, rather than bundle something that
behaves differently from the page.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Final

REGISTRY: Final = "__attnviz_modules"
"""The bundle's table of evaluated modules (name -> frozen exports)."""

EXPORTS: Final = "__attnviz_exports"
"""The bundle's helper that builds a module's exports object."""

_NAME = r"[A-Za-z_$][\w$]*"
_SPEC = r'"(?P<spec>[^"\n]+)"'
_IMPORT = re.compile(
    rf"^import\s+(?:(?:\{{(?P<names>[^}}]*)\}}|\*\s+as\s+(?P<namespace>{_NAME})"
    rf"|(?P<default>{_NAME}))\s+from\s+)?{_SPEC}[ \t]*;?",
    re.MULTILINE,
)
_EXPORT_FROM = re.compile(
    rf"^export\s+(?:\*|\{{(?P<names>[^}}]*)\}})\s+from\s+{_SPEC}[ \t]*;?", re.MULTILINE
)
_EXPORT_DECLARATION = re.compile(
    rf"^export\s+(?=(?:async\s+function\*?|function\*?|const|class)\s+\*?\s*(?P<name>{_NAME}))",
    re.MULTILINE,
)
_EXPORT_LIST = re.compile(r"^export\s+\{(?P<names>[^}]*)\}[ \t]*;?", re.MULTILINE)
_EXPORT_DEFAULT = re.compile(r"^export\s+default\s+", re.MULTILINE)
_LEFT_OVER = re.compile(r"^(?:import|export)\b.*$|\bimport\s*\(|\bimport\.meta\b", re.MULTILINE)


class BundleError(ValueError):
    """A module the bundler cannot turn into a function scope faithfully."""


@dataclass
class _Module:
    """One module, parsed: what it imports and exports."""

    name: str  # its path under the root, e.g. "plots/figure.js"
    source: str
    requests: list[str] = field(default_factory=list)  # the modules it loads, in order
    body: str = ""  # the source with its import and export syntax rewritten
    exports: list[tuple[str, str]] = field(default_factory=list)  # (exported, local)
    star: list[str] = field(default_factory=list)  # `export * from` these modules


def _resolve(importer: str, specifier: str) -> str:
    """The module name ``specifier`` names in ``importer`` (both relative to the root)."""
    if not specifier.startswith(("./", "../")):
        raise BundleError(f"{importer}: {specifier!r} is not a relative import")
    parts: list[str] = []
    for part in (PurePosixPath(importer).parent / specifier).parts:
        if part == "..":
            if not parts:
                raise BundleError(f"{importer}: {specifier!r} leaves the modules' folder")
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts)


def _names(listed: str, module: str) -> list[tuple[str, str]]:
    """``a, b as c`` as [("a", "a"), ("b", "c")] (imported or local, then bound name)."""
    pairs = []
    for item in listed.split(","):
        words = item.split()
        if not words:
            continue
        if len(words) == 1:
            pairs.append((words[0], words[0]))
        elif len(words) == 3 and words[1] == "as":
            pairs.append((words[0], words[2]))
        else:
            raise BundleError(f"{module}: cannot read {item.strip()!r} in an import or export")
    return pairs


def _module_ref(name: str) -> str:
    """The JS expression of an evaluated module's exports."""
    return f"{REGISTRY}[{json.dumps(name)}]"


def _parse(name: str, source: str) -> _Module:
    """``source`` with its imports read from the registry and its exports collected.

    Raises:
        BundleError: a form of import or export the bundler does not take (see the module
            docstring), or the bundle's own names used in the source.
    """
    if REGISTRY in source or EXPORTS in source:
        raise BundleError(f"{name}: uses the bundle's own names {REGISTRY} or {EXPORTS}")
    if re.search(r"^export\s+(?:let|var)\b", source, re.MULTILINE):
        raise BundleError(f"{name}: `export let` or `export var` (a live binding) is not taken")
    module = _Module(name, source)
    bindings: list[str] = []  # the const declarations that replace its imports

    def importing(match: re.Match[str]) -> str:
        target = _resolve(name, match["spec"])
        module.requests.append(target)
        ref = _module_ref(target)
        if match["names"] is not None:
            pairs = _names(match["names"], name)
            fields = ", ".join(i if i == b else f"{i}: {b}" for i, b in pairs)
            bindings.append(f"const {{ {fields} }} = {ref};")
        elif match["namespace"]:
            bindings.append(f"const {match['namespace']} = {ref};")
        elif match["default"]:
            bindings.append(f"const {match['default']} = {ref}.default;")
        return ""

    def exporting_from(match: re.Match[str]) -> str:
        target = _resolve(name, match["spec"])
        module.requests.append(target)
        if match["names"] is None:
            module.star.append(target)
        else:
            ref = _module_ref(target)
            for imported, exported in _names(match["names"], name):
                local = f"__reexport_{len(bindings)}"
                bindings.append(f"const {local} = {ref}.{imported};")
                module.exports.append((exported, local))
        return ""

    def declaring(match: re.Match[str]) -> str:
        module.exports.append((match["name"], match["name"]))
        return ""

    def listing(match: re.Match[str]) -> str:
        module.exports.extend((exported, local) for local, exported in _names(match[1], name))
        return ""

    # Imports and re-exports in source order (the order their modules are evaluated in).
    statements = sorted(
        [*_IMPORT.finditer(source), *_EXPORT_FROM.finditer(source)], key=lambda m: m.start()
    )
    body, last = [], 0
    for match in statements:
        body.append(source[last : match.start()])
        body.append(importing(match) if match.re is _IMPORT else exporting_from(match))
        last = match.end()
    body.append(source[last:])
    text = _EXPORT_DECLARATION.sub(declaring, "".join(body))
    text = _EXPORT_LIST.sub(listing, text)
    if _EXPORT_DEFAULT.search(text):
        text = _EXPORT_DEFAULT.sub("const __default = ", text, count=1)
        module.exports.append(("default", "__default"))
    left = _LEFT_OVER.search(text)
    if left:
        line = text[: left.start()].count("\n") + 1
        raise BundleError(f"{name}: line {line} (after rewriting): {left[0].strip()!r}")
    module.body = "\n".join([*bindings, text])
    return module


def _ordered(root: Path, entry: str) -> list[_Module]:
    """Every module ``entry`` loads, read from ``root``, in ES evaluation order.

    Raises:
        BundleError: an import cycle, or a module that is not there.
    """
    done: dict[str, _Module] = {}
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        if name in visiting:
            cycle = " -> ".join([*visiting[visiting.index(name) :], name])
            raise BundleError(f"import cycle: {cycle}")
        visiting.append(name)
        try:
            source = (root / name).read_text(encoding="utf-8")
        except FileNotFoundError:
            importer = visiting[-2] if len(visiting) > 1 else "the entry"
            raise BundleError(f"{importer} imports {name}, which is not there") from None
        module = _parse(name, source)
        for request in module.requests:
            visit(request)
        visiting.pop()
        done[name] = module

    visit(entry)
    return list(done.values())


_PRELUDE: Final = f"""\
const {REGISTRY} = Object.create(null);
// A module's exports: `export * from` each of `stars` (never their default), then its own.
function {EXPORTS}(stars, own) {{
  const exports = Object.create(null);
  for (const star of stars) {{
    for (const key of Object.keys(star)) if (key !== "default") exports[key] = star[key];
  }}
  return Object.freeze(Object.assign(exports, own));
}}
"""


def bundle(root: Path, entry: str) -> str:
    """The module ``entry`` and every module it loads, as one ES module without imports.

    Args:
        root: the folder the module names are relative to (static/js).
        entry: the entry module's path under ``root``, e.g. ``"widget/attention.js"``.

    Returns:
        The bundle's source: an ES module whose default export is the entry's.

    Raises:
        BundleError: a module the bundler does not take (see the module docstring).
    """
    chunks = [f"// AttnViz: {entry} and the modules it imports, bundled by attnviz.views.bundle\n"]
    chunks.append(_PRELUDE)
    modules = _ordered(root, entry)
    for module in modules:
        own = ", ".join(
            e if e == local else f"{json.dumps(e)}: {local}" for e, local in module.exports
        )
        stars = ", ".join(_module_ref(star) for star in module.star)
        chunks.append(
            f"\n// ---- {module.name}\n{_module_ref(module.name)} = (() => {{\n{module.body}\n"
            f"return {EXPORTS}([{stars}], {{ {own} }});\n}})();\n"
        )
    if not any(exported == "default" for exported, _ in modules[-1].exports):
        raise BundleError(f"{entry} has no default export (the widget anywidget loads)")
    chunks.append(f"\nexport default {_module_ref(entry)}.default;\n")
    return "".join(chunks)

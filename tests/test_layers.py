"""The import contracts in pyproject.toml ([tool.importlinter]) catch a wrong-way import.

`make lint` runs lint-imports against the installed attnviz. Here it runs against a
copy of app/ as attnviz/ in a temporary folder (first on the path: PYTHONPATH and the
current directory; the editable install's finder comes after the path): unmodified it
passes, and one import added the wrong way breaks the contract it should. The reported
line of the added import (past the end of the repository's file) shows that the copy,
not the repository's app/, is what was analysed.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import REPO_ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
LAYERS = "Layers: cli > server > views > pretrained > attention (the engine)"
ENGINE = "The engine is torch only: no web, validation, tokenizer, transformers or plotting package"
NO_WEB = "Pretrained models and views know no web server"
NO_ROUTER = "The CLI imports no router: it reaches the server's work through payloads and settings"
ROUTERS = "No router imports another router: what they share is in dependencies, payloads, schemas"
BLOCKS = (
    "Layers in the pretrained package: architectures (by transformers' names) over families "
    "over blocks"
)
CHECKS = "Layers in the server: the limit checks over the settings over the fixed limits"
ACYCLIC = (
    "No import cycles: no module or package imports, even for type checking, one that "
    "imports it back"
)
CONTRACTS = (LAYERS, ENGINE, NO_WEB, NO_ROUTER, ROUTERS, BLOCKS, CHECKS, ACYCLIC)


def copy_package(tmp_path: Path) -> Path:
    """app/ copied to tmp_path/attnviz; returns tmp_path."""
    shutil.copytree(
        REPO_ROOT / "app", tmp_path / "attnviz", ignore=shutil.ignore_patterns("__pycache__")
    )
    return tmp_path


def lint_imports(root: Path) -> tuple[int, str]:
    """Run lint-imports with the repository's contracts on the package under root."""
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "250"}
    result = subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO_ROOT / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # One space between words: long contract names may be wrapped.
    return result.returncode, " ".join((result.stdout + result.stderr).split())


def verdicts(output: str) -> dict[str, str]:
    return {
        name: match.group(1)
        for name in CONTRACTS
        if (match := re.search(re.escape(name) + r" (KEPT|BROKEN)", output))
    }


def test_the_unmodified_package_keeps_every_contract(tmp_path: Path) -> None:
    code, output = lint_imports(copy_package(tmp_path))
    assert code == 0, output
    assert verdicts(output) == dict.fromkeys(CONTRACTS, "KEPT"), output
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in output


@pytest.mark.parametrize(
    ("module", "wrong_import", "imported", "broken", "kept"),
    [
        # The engine importing the server: the lowest layer reaching up.
        (
            "attention/masks.py",
            "from ..server import settings",
            "attnviz.server.settings",
            LAYERS,
            [],
        ),
        # The engine importing a web framework.
        ("attention/engine.py", "import fastapi", "fastapi", ENGINE, [LAYERS]),
        # A view importing the server's template engine.
        ("views/figure.py", "import jinja2", "jinja2", NO_WEB, [LAYERS, ENGINE]),
        # The CLI reaching into a route module (the layers allow it: the server is below).
        (
            "cli/atlas.py",
            "from ..server.routers import attention",
            "attnviz.server.routers.attention",
            NO_ROUTER,
            [LAYERS, ENGINE, NO_WEB],
        ),
        # One router reaching into another for what they share.
        (
            "server/routers/heads.py",
            "from .pretrained import router",
            "attnviz.server.routers.pretrained",
            ROUTERS,
            [LAYERS, NO_ROUTER, CHECKS],
        ),
        # The families' blocks reaching back into the architecture tables (a circle).
        (
            "pretrained/blocks.py",
            "from .architectures import CROSS_MODULES",
            "attnviz.pretrained.architectures",
            BLOCKS,
            [LAYERS, ENGINE, NO_WEB],
        ),
        # The family registry reaching up into the architecture tables.
        (
            "pretrained/families.py",
            "from .architectures import CROSS_MODULES",
            "attnviz.pretrained.architectures",
            BLOCKS,
            [LAYERS, ENGINE, NO_WEB],
        ),
        # The fixed limits reaching up into the settings (a circle).
        (
            "server/limits.py",
            "from .settings import Settings",
            "attnviz.server.settings",
            CHECKS,
            [LAYERS, ROUTERS, BLOCKS],
        ),
    ],
    ids=[
        "engine-imports-server",
        "engine-imports-fastapi",
        "view-imports-jinja2",
        "cli-imports-a-router",
        "router-imports-a-router",
        "blocks-import-architectures",
        "families-import-architectures",
        "limits-import-settings",
    ],
)
def test_a_wrong_way_import_breaks_its_contract(
    tmp_path: Path, module: str, wrong_import: str, imported: str, broken: str, kept: list[str]
) -> None:
    root = copy_package(tmp_path)
    path = root / "attnviz" / module
    lines = path.read_text().splitlines()
    assert lines == (REPO_ROOT / "app" / module).read_text().splitlines()
    path.write_text("\n".join([*lines, wrong_import, ""]))
    line = len(lines) + 1

    code, output = lint_imports(root)
    assert code == 1, output
    found = verdicts(output)
    assert found[broken] == "BROKEN", output
    assert all(found[name] == "KEPT" for name in kept), output
    # The chain starts at the added line of the copy: the copy is what was analysed.
    module_name = "attnviz." + module.removesuffix(".py").replace("/", ".")
    assert f"{module_name} -> {imported} (l.{line})" in output, output


@pytest.mark.parametrize(
    ("module", "wrong_import", "package", "dependency"),
    [
        # Architecture review round 5, circle 1: the methods' bounds reading the lengths
        # from admission, which reads the methods (now: pretrained/lengths.py), even only
        # for type checking.
        (
            "pretrained/methods/registry.py",
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from ..admission import InputLengths",
            "attnviz.pretrained",
            ".methods -> .admission",
        ),
        # Circle 2: the atlas plan running its passes through the shards, which read plans
        # (now: shards.head_scores), even from inside a function.
        (
            "pretrained/atlas/plan.py",
            "def run():\n    from .shards import run_shard",
            "attnviz.pretrained.atlas",
            ".plan -> .shards",
        ),
        # The tiles' Triton kernel typing its layer from the tiles (now: kept_layer.py).
        (
            "pretrained/tile_kernel.py",
            "from .tiles import tile",
            "attnviz.pretrained",
            ".tile_kernel -> .tiles",
        ),
    ],
    ids=["methods-import-admission", "atlas-plan-imports-shards", "kernel-imports-tiles"],
)
def test_an_import_cycle_breaks_the_acyclic_contract(
    tmp_path: Path, module: str, wrong_import: str, package: str, dependency: str
) -> None:
    root = copy_package(tmp_path)
    path = root / "attnviz" / module
    path.write_text(path.read_text() + "\n" + wrong_import + "\n")

    code, output = lint_imports(root)
    assert code == 1, output
    found = verdicts(output)
    assert found[ACYCLIC] == "BROKEN", output
    assert all(found[name] == "KEPT" for name in CONTRACTS if name != ACYCLIC), output
    # lint-imports names the package and one dependency of the circle that would open it
    # (whichever way round it chooses)
    assert f"No cycles are allowed in {package}." in output, output
    importer, imported = dependency.split(" -> ")
    assert re.search(
        rf"- ({re.escape(dependency)}|{re.escape(imported)} -> {re.escape(importer)}) "
        r"\(\d+ imports?\)",
        output,
    ), output


MAX_MODULE_LINES = 600
"""The most lines of one Python module in app/ (architecture review, round 5): a longer
one is split by what it does (the CLI by command, a view's pipeline from its helpers)."""


def test_no_module_in_app_is_over_600_lines() -> None:
    sizes = {
        str(path.relative_to(REPO_ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in (REPO_ROOT / "app").rglob("*.py")
    }
    assert len(sizes) > 100  # the whole package was read
    over = {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert not over, f"split these modules (over {MAX_MODULE_LINES} lines): {over}"

"""make install's bytecode: uv compiles nothing at install; one process then imports what
AttnViz and the suite's first processes import (scripts/image_build.py bytecode), so that
Python writes their .pyc files once. pip (INSTALLER=pip) compiles every module itself."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests import REPO_ROOT
from tests.support.make import install_dry_run


def image_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "image_build", REPO_ROOT / "scripts" / "image_build.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def module_file_exists(name: str) -> bool:
    """Whether ``name`` (dotted) is a module or package in this environment, found without
    importing it (its top-level package's folder, then the path of its parts)."""
    top, *parts = name.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None:
        return False
    if not parts:
        return True
    for folder in spec.submodule_search_locations or []:
        base = Path(folder).joinpath(*parts)
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return True
    return False


def test_uv_installs_without_compiling_then_one_process_imports_what_is_used() -> None:
    lines = install_dry_run("uv")
    installs = [i for i, line in enumerate(lines) if "/uv pip install" in line]
    assert len(installs) == 2, lines  # the project with its extras, then SmolLM2's wheel
    assert not any("--compile-bytecode" in lines[i] for i in installs)
    steps = [i for i, line in enumerate(lines) if "scripts/image_build.py bytecode" in line]
    assert len(steps) == 1 and steps[0] > max(installs), lines
    names = lines[steps[0]].split(" bytecode ", 1)[1].split()
    assert {"pytest", "playwright.sync_api", "ray", "transformers.models.llama.modeling_llama"} <= (
        set(names)
    )
    # a module renamed by its package would only be skipped (and compiled later, in each of
    # the suite's processes that imports it at once): every name must still be there
    missing = [name for name in names if not module_file_exists(name)]
    assert not missing, f"BYTECODE_IMPORTS names modules this environment lacks: {missing}"


def test_pip_compiles_at_install_and_no_import_step_runs() -> None:
    lines = install_dry_run("pip")
    assert any("-m pip install" in line and "--no-deps" in line for line in lines), lines
    assert not any("image_build.py bytecode" in line for line in lines)


def test_the_bytecode_step_imports_each_module_named_and_skips_those_that_fail(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    name = "xml.dom.pulldom"  # imported by neither AttnViz nor the suite
    monkeypatch.delitem(sys.modules, name, raising=False)
    # a module of the list that raises at import (not an ImportError) only loses its head
    # start: make install goes on
    (tmp_path / "raises_at_import.py").write_text("raise RuntimeError('no display here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    extra = [name, "no_such_module_here", "raises_at_import"]
    assert image_build().main(["image_build.py", "bytecode", *extra]) == 0
    assert name in sys.modules
    skipped = capsys.readouterr().out.split("skipped:", 1)[1]
    assert "no_such_module_here (ModuleNotFoundError: No module named" in skipped
    assert "raises_at_import (RuntimeError: no display here)" in skipped
    assert name not in skipped

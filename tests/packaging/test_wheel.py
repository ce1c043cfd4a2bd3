"""The wheel: built from the repository, it is the package attnviz, complete.

The repository keeps the source in app/ with templates/ and static/ beside it;
pyproject.toml maps them to attnviz, attnviz.templates and attnviz.static with an
explicit packages list. These tests build the wheel from a copy of what the Dockerfile
copies (no network, the venv's setuptools), compare its file list with the repository,
install it into a fresh --target folder and run it from a folder of the user's own that
has an app.py and an app/ package: the installed attnviz is the one imported, the user's
app is not shadowed, and a real server serves the page and the static files from inside
the installed package.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from attnviz.devtools import live_process

from tests import REPO_ROOT

pytestmark = pytest.mark.slow  # builds and installs the wheel in a fresh virtual environment


SOURCES = ("pyproject.toml", "README.md", "app", "templates", "static")
"""What the Dockerfile's build stage copies to build the wheel."""


def build_wheel(destination: Path, workdir: Path) -> Path:
    """The wheel of a copy of the repository's SOURCES (the working tree, as Docker sees it)."""
    src = workdir / "src"
    src.mkdir()
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            _copytree(path, src / name)
        else:
            (src / name).write_bytes(path.read_bytes())
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            "--wheel-dir",
            str(destination),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = destination.glob("attnviz-*.whl")
    return wheel


def _copytree(source: Path, destination: Path) -> None:
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns("__pycache__"))


def tracked_files(folder: str) -> list[str]:
    """The files git tracks under ``folder`` (relative to it)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", folder],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        timeout=30,
    ).stdout.decode()
    return [name.removeprefix(f"{folder}/") for name in listed.split("\0") if name]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"), tmp_path_factory.mktemp("wheel-build"))


@pytest.fixture(scope="module")
def target(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh folder the wheel is installed into (pip install --no-deps --target)."""
    folder = tmp_path_factory.mktemp("target")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--quiet",
            "--target",
            str(folder),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return folder


@pytest.fixture
def users_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The current directory: a user's project with its own app.py and app/ package."""
    folder = tmp_path / "project"
    (folder / "app").mkdir(parents=True)
    (folder / "app" / "__init__.py").write_text('OWNER = "the user"\n')
    (folder / "app.py").write_text('OWNER = "the user (module)"\n')
    monkeypatch.chdir(folder)
    yield folder


def test_the_wheel_holds_every_module_template_and_static_file(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
    modules = sorted(
        "attnviz/" + path.relative_to(REPO_ROOT / "app").as_posix()
        for path in (REPO_ROOT / "app").rglob("*.py")
        if "__pycache__" not in path.parts
    )
    templates = ["attnviz/templates/" + name for name in tracked_files("templates")]
    static = ["attnviz/static/" + name for name in tracked_files("static")]
    # The head atlas's corpus and its provenance (package data of attnviz itself).
    corpus = ["attnviz/corpus/" + name for name in tracked_files("app/corpus")]
    assert "attnviz/corpus/head_atlas.txt" in corpus
    assert len(modules) > 40, modules
    assert any(name.endswith(".html") for name in templates), templates
    assert {"attnviz/static/js/attnviz.js", "attnviz/static/css/attnviz.css"} <= set(static)

    package = sorted(n for n in names if not n.startswith("attnviz-"))
    # Every module of app/ (no subpackage left out of the packages list), every tracked
    # template and static file (no file type left out of package-data), and nothing else:
    # no top-level app/, no stale build leftovers.
    assert sorted([*modules, *templates, *static, *corpus]) == package
    assert not [n for n in names if n.startswith("app/") or n.split("/")[0] == "app.py"]
    metadata = {n.split("/", 1)[1] for n in names if n.startswith("attnviz-")}
    assert {"METADATA", "RECORD", "WHEEL", "entry_points.txt"} <= metadata
    with zipfile.ZipFile(wheel) as archive:
        dist_info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = archive.read(dist_info).decode()
        assert "attnviz = attnviz.cli:main" in entry_points
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert archive.read(top_level).decode().split() == ["attnviz"]
    # The files inside are the repository's, byte for byte.
    with zipfile.ZipFile(wheel) as archive:
        for name, source in (
            ("attnviz/resources.py", "app/resources.py"),
            ("attnviz/templates/base.html", "templates/base.html"),
            ("attnviz/static/js/attnviz.js", "static/js/attnviz.js"),
        ):
            assert archive.read(name) == (REPO_ROOT / source).read_bytes(), name


def test_the_installed_wheel_is_imported_beside_a_users_own_app(
    target: Path, users_folder: Path
) -> None:
    check = textwrap.dedent(
        """
        import json
        import attnviz, app
        from attnviz import resources
        # Notebook views saved offline: the interactive one runs the installed package's
        # bundled modules, the figure embeds its Plotly.js.
        view = attnviz.head_view([[[0.5, 0.5], [1.0, 0.0]]], ["a", "b"])
        view.save("view.html")
        view.save("figure.html", interactive=False)
        print(json.dumps({
            "attnviz": attnviz.__file__,
            "compute_attention": callable(getattr(attnviz, "compute_attention", None)),
            "templates": str(resources.TEMPLATES_DIR),
            "static": str(resources.STATIC_DIR),
            "app": app.__file__,
            "owner": app.OWNER,
        }))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run(
        [sys.executable, "-c", check],
        cwd=users_folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    installed = target.resolve() / "attnviz"
    assert Path(found["attnviz"]).resolve() == installed / "__init__.py"
    assert found["compute_attention"] is True
    # The templates and static files are the ones inside the installed package.
    assert Path(found["templates"]) == installed / "templates"
    assert Path(found["static"]) == installed / "static"
    # The user's own app is theirs: the installed package brings no top-level app.
    assert Path(found["app"]).resolve() == users_folder.resolve() / "app" / "__init__.py"
    assert found["owner"] == "the user"
    assert 'class="attnviz-widget-data"' in (users_folder / "view.html").read_text(encoding="utf-8")
    assert "plotly.js (attnviz" in (users_folder / "figure.html").read_text(encoding="utf-8")
    assert not (target / "app").exists()
    assert not (target / "app.py").exists()


def test_the_installed_wheel_serves_the_page_and_static_files(
    target: Path, users_folder: Path
) -> None:
    with live_process(env={"PYTHONPATH": str(target)}) as (url, process):
        # The server is `python -m attnviz`, run from the user's folder.
        assert process.args[1:] == ["-m", "attnviz"]
        with urllib.request.urlopen(url + "/", timeout=10) as page:
            assert page.status == 200
            assert page.headers["content-type"].startswith("text/html")
            html = page.read().decode()
        assert "<title>AttnViz</title>" in html
        assert "/static/js/attnviz.js" in html
        for path in ("static/js/attnviz.js", "static/css/attnviz.css"):
            with urllib.request.urlopen(f"{url}/{path}", timeout=10) as response:
                assert response.status == 200, path
                assert response.read() == (REPO_ROOT / path).read_bytes(), path

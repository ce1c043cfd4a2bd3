"""The Dockerfile's steps, run outside Docker (no engine on our machines).

Reads the torch version, the extras and the HEALTHCHECK command from the Dockerfile,
then does what its stages do: a fresh venv, torch, `pip install .[extras]` and uninstall of the
package, the app run from a copy of app/, templates/ and static/ with
`python -m app`, and the HEALTHCHECK command against it.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from attnviz.devtools import free_port

from tests import REPO_ROOT

DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()


def run(*command: str, cwd: Path, env: dict[str, str] | None = None) -> None:
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True, timeout=600)


@pytest.mark.skipif(sys.platform != "linux", reason="the image is Linux")
def test_the_images_install_and_start_commands_work(tmp_path: Path) -> None:
    torch_version = re.search(r"ARG TORCH_VERSION=(\S+)", DOCKERFILE).group(1)  # type: ignore[union-attr]
    extras = re.search(r"ARG EXTRAS=(\S*)", DOCKERFILE).group(1)  # type: ignore[union-attr]
    assert 'pip install ".${EXTRAS:+[$EXTRAS]}"' in DOCKERFILE
    healthcheck = json.loads(
        re.search(r"HEALTHCHECK .*?CMD (\[[^\n]*\])", DOCKERFILE, re.S).group(1)
    )  # type: ignore[union-attr]
    assert re.search(r'CMD \["python", "-m", "app"\]\s*$', DOCKERFILE)

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", str(venv), cwd=tmp_path)
    python = str(venv / "bin" / "python")
    # Build stage: torch first (here from the machine's wheel source), then the project.
    run(python, "-m", "pip", "install", "--quiet", f"torch=={torch_version}", cwd=tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, src / name)
    shutil.copytree(REPO_ROOT / "app", src / "app")
    run(python, "-m", "pip", "install", "--quiet", f".[{extras}]" if extras else ".", cwd=src)
    run(python, "-m", "pip", "uninstall", "-y", "--quiet", "attnviz", cwd=src)
    # Final stage: the app runs from /srv/attnviz beside its templates and static files.
    srv = tmp_path / "srv"
    srv.mkdir()
    for name in ("app", "templates", "static"):
        shutil.copytree(REPO_ROOT / name, srv / name)
    port = free_port()
    env = {
        **os.environ,
        "ATTNVIZ_HOST": "127.0.0.1",
        "ATTNVIZ_PORT": str(port),
        "PYTHONUNBUFFERED": "1",
    }
    with open(tmp_path / "server.log", "wb") as log:
        server = subprocess.Popen(
            [python, "-m", "app"], cwd=srv, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "no answer on /healthz"
                time.sleep(0.2)
        command = [python if part == "python" else part for part in healthcheck]
        assert subprocess.run(command, env=env, timeout=30).returncode == 0
        for path in ("/", "/models", "/static/vendor/plotly.min.js", "/static/js/attnviz.js"):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as page:
                assert page.status == 200, path
        # The image's default extras bring the pretrained model.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/models", timeout=10) as r:
            names = [m["name"] for m in json.load(r)["models"]]
        assert names == (["all-MiniLM-L6-v2"] if "pretrained" in extras else [])
    finally:
        server.terminate()
        server.wait(timeout=10)

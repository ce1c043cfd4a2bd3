"""scripts/install_torch.sh (make install's torch): a local wheel first, else TORCH_INDEX.

A fake python records the pip commands it is given; its ``--no-index`` install succeeds only
when the test says a local wheel matches.
"""

import os
import subprocess
from pathlib import Path

import pytest

from tests import REPO_ROOT
from tests.support.make import DRY_RUN_VENV, install_dry_run

SCRIPT = REPO_ROOT / "scripts/install_torch.sh"
FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "$CALLS"
case " $* " in
  *" --no-index "*) [ "$LOCAL_WHEEL" = yes ] || { echo "no matching distribution" >&2; exit 1; } ;;
esac
"""


def install(tmp_path: Path, local_wheel: bool, *args: str) -> tuple[list[str], str]:
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    calls = tmp_path / "calls"
    env = {**os.environ, "CALLS": str(calls), "LOCAL_WHEEL": "yes" if local_wheel else "no"}
    done = subprocess.run(
        [str(SCRIPT), str(python), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return calls.read_text().splitlines(), done.stdout


def test_a_matching_local_wheel_is_installed_then_its_dependencies_from_the_index(
    tmp_path: Path,
) -> None:
    calls, said = install(tmp_path, True, "torch==2.13.0", "https://download.pytorch.org/whl/cpu")
    assert calls == [
        "-m pip install --quiet --no-index --no-deps torch==2.13.0",
        "-m pip install --quiet torch==2.13.0",
    ]
    assert "local wheel" in said


@pytest.mark.parametrize("index", [None, "https://download.pytorch.org/whl/cu128"])
def test_without_a_local_wheel_torch_comes_from_the_index(
    tmp_path: Path, index: str | None
) -> None:
    spec = "torch==2.13.0+cu128" if index else "torch==2.13.0"
    calls, said = install(tmp_path, False, spec, *([index] if index else []))
    wanted = index or "https://download.pytorch.org/whl/cpu"  # the default: the CPU build
    assert calls == [
        f"-m pip install --quiet --no-index --no-deps {spec}",
        f"-m pip install --quiet {spec} --index-url {wanted}",
    ]
    assert wanted in said


def test_a_failed_install_fails(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nexit 1\n")
    python.chmod(0o755)
    done = subprocess.run(
        [str(SCRIPT), str(python), "torch==2.13.0"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode != 0


def test_wheel_only_installs_the_local_wheel_alone(tmp_path: Path) -> None:
    # make install's uv step then resolves torch's dependencies with the project's.
    calls, said = install(tmp_path, True, "torch==2.13.0", "", "wheel-only")
    assert calls == ["-m pip install --quiet --no-index --no-deps torch==2.13.0"]
    assert "local wheel" in said


def test_wheel_only_without_a_local_wheel_installs_torch_and_its_dependencies(
    tmp_path: Path,
) -> None:
    calls, _ = install(tmp_path, False, "torch==2.13.0", "", "wheel-only")
    assert calls[-1] == (
        "-m pip install --quiet torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    )


def test_an_unknown_mode_is_refused_before_any_install(tmp_path: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as refused:
        install(tmp_path, True, "torch==2.13.0", "", "some")
    assert refused.value.returncode == 2
    assert "MODE is full or wheel-only" in refused.value.stderr
    assert not (tmp_path / "calls").exists()


@pytest.mark.parametrize(("installer", "mode"), [("uv", "wheel-only"), ("pip", "full")])
def test_make_install_runs_it_with_torch_spec_torch_index_and_the_installers_mode(
    installer: str, mode: str
) -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "TORCH_INDEX ?= https://download.pytorch.org/whl/cpu" in makefile
    wanted = (
        f"scripts/install_torch.sh {DRY_RUN_VENV}/bin/python"
        f' "torch==2.13.0" "https://download.pytorch.org/whl/cpu" {mode}'
    )
    assert wanted in install_dry_run(installer)

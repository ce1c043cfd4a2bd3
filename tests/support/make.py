"""What ``make install`` would run (``make -n``), for the tests of the install's steps."""

from __future__ import annotations

import subprocess

from tests import REPO_ROOT

DRY_RUN_VENV = "/nonexistent/venv"
"""The VENV the dry run names: nothing is created there (``make -n`` only prints)."""


def install_dry_run(installer: str) -> list[str]:
    """The commands ``make install`` would run with INSTALLER=``installer`` ("uv" or "pip"),
    one per line, forced as if nothing were installed (``-B``).

    Raises:
        subprocess.CalledProcessError: make refused (a Makefile error).
    """
    return subprocess.run(
        ["make", "-n", "-B", "install", f"INSTALLER={installer}", f"VENV={DRY_RUN_VENV}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.splitlines()

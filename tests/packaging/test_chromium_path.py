"""Which Chromium the tests, benchmarks and scripts launch (attnviz.devtools.chromium_path)."""

from pathlib import Path

import pytest
from attnviz import devtools


def _executable(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def test_the_headless_shell_comes_before_the_whole_browser_and_the_setting_before_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell = tmp_path / "usr" / "chromium-headless-shell"
    whole = tmp_path / "usr" / "chromium"
    monkeypatch.setattr(devtools, "CHROMIUM_CANDIDATES", (str(shell), str(whole)))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("ATTNVIZ_CHROMIUM", raising=False)
    assert devtools.chromium_path() is None

    _executable(whole)
    assert devtools.chromium_path() == str(whole)
    _executable(shell)
    assert devtools.chromium_path() == str(shell)

    chosen = _executable(tmp_path / "opt" / "my-chromium")
    monkeypatch.setenv("ATTNVIZ_CHROMIUM", chosen)
    assert devtools.chromium_path() == chosen
    # A setting that names no file is passed over, not returned.
    monkeypatch.setenv("ATTNVIZ_CHROMIUM", str(tmp_path / "missing"))
    assert devtools.chromium_path() == str(shell)


def test_on_the_path_the_headless_shell_is_found_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(devtools, "CHROMIUM_CANDIDATES", ())
    monkeypatch.delenv("ATTNVIZ_CHROMIUM", raising=False)
    bin_folder = tmp_path / "bin"
    monkeypatch.setenv("PATH", str(bin_folder))
    whole = _executable(bin_folder / "chromium")
    assert devtools.chromium_path() == whole
    shell = _executable(bin_folder / "chromium-headless-shell")
    assert devtools.chromium_path() == shell

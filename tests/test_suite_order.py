"""The suite's order: the longest test files first (tests/conftest.py, LONGEST_FIRST)."""

import subprocess
import sys

import pytest

from tests import REPO_ROOT
from tests.conftest import LONGEST_FIRST


def test_each_file_named_longest_first_exists_once() -> None:
    missing = [name for name in LONGEST_FIRST if not (REPO_ROOT / "tests" / name).is_file()]
    assert not missing, f"LONGEST_FIRST names files that are gone: {missing}"
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


@pytest.mark.slow  # a pytest of its own collects
def test_the_longest_files_are_collected_first_and_xdist_keeps_that_order(
    pytestconfig: pytest.Config,
) -> None:
    # given in another order on the command line: the one named in LONGEST_FIRST comes first,
    # then the others as given
    files = ["tests/attention/test_masks.py", "tests/attention/test_cache.py"]
    assert files[1].removeprefix("tests/") in LONGEST_FIRST
    assert files[0].removeprefix("tests/") not in LONGEST_FIRST
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    order = [line.split("::")[0] for line in listed if "::" in line]
    assert order[0] == files[1] and order[-1] == files[0], order
    assert order == sorted(order, key=lambda path: path != files[1]), order
    # pytest-xdist hands the files out in that order (not those with most tests first)
    if pytestconfig.pluginmanager.has_plugin("xdist"):
        assert pytestconfig.option.loadscopereorder is False

"""The suite's order: the longest test files first (tests/conftest.py, LONGEST_FIRST); the
tests marked ray in the files of make test's Ray pass (scripts/suite.py, RAY_FILES)."""

import subprocess
import sys

import pytest

from tests import REPO_ROOT
from tests.conftest import LONGEST_FIRST, check_ray_files, ray_pass_files


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


def test_the_ray_pass_files_exist_and_a_ray_test_elsewhere_is_refused(
    request: pytest.FixtureRequest,
) -> None:
    for name in ray_pass_files():
        assert "pytest.mark.ray" in (REPO_ROOT / "tests" / name).read_text(), name
    # an item of this file (not one of the Ray pass's): refused once marked ray
    item = pytest.Function.from_parent(request.node.parent, name="test_x", callobj=lambda: None)
    check_ray_files([item])
    item.add_marker(pytest.mark.ray)
    with pytest.raises(pytest.UsageError, match=r"test_suite_order\.py.*RAY_FILES"):
        check_ray_files([item])

"""The settings documented where the README says they are."""

import pytest
from attnviz.server.settings import Settings

from tests import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()
ENV_EXAMPLE = (REPO_ROOT / ".env.example").read_text()


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_is_in_the_readme_table_and_the_env_example(name: str) -> None:
    variable = f"ATTNVIZ_{name.upper()}"
    assert f"| `{variable}` |" in README
    assert variable in ENV_EXAMPLE

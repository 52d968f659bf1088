"""The README stays honest: every command has help text and is documented there."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from agenteval.cli import main

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


@pytest.mark.parametrize("name", sorted(main.commands))
def test_every_command_has_help_and_is_in_the_readme(name):
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0 and main.commands[name].help
    assert f"agenteval {name}" in README


def test_readme_quick_start_matches_ci():
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in README

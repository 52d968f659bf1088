"""The README stays honest: every command has help text and is documented there."""

import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from packaging.requirements import Requirement
from packaging.version import Version

from agenteval.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


@pytest.mark.parametrize("name", sorted(main.commands))
def test_every_command_has_help_and_is_in_the_readme(name):
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0 and main.commands[name].help
    assert f"agenteval {name}" in README


def test_readme_quick_start_matches_ci():
    """CI runs the README's test command first, as written (then the suite again on the oldest SDK)."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    first_test_run = next(line for line in ci if "pytest" in line)
    assert first_test_run in README and first_test_run.startswith("python3 -m venv .venv && ")


def test_ci_pins_the_oldest_opentelemetry_the_distributions_accept():
    """.ci/oldest-otel.txt pins exactly the lower bounds the three pyproject.toml files declare."""
    lower_bounds: dict[str, set[Version]] = {}
    for folder in (ROOT, ROOT / "instrumentation", ROOT / "exporters"):
        project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
        requirements = [*project["dependencies"], *sum(project.get("optional-dependencies", {}).values(), [])]
        for requirement in map(Requirement, requirements):
            if requirement.name.startswith("opentelemetry-"):
                (bound,) = (s.version for s in requirement.specifier if s.operator == ">=")
                lower_bounds.setdefault(requirement.name, set()).add(Version(bound))
    pins = {}
    for line in (ROOT / ".ci" / "oldest-otel.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[name] = Version(version)
    assert {"opentelemetry-api", "opentelemetry-sdk", "opentelemetry-exporter-otlp"} <= lower_bounds.keys()
    assert {name: {pin} for name, pin in pins.items()} == lower_bounds

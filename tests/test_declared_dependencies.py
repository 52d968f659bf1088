"""Each of the three distributions declares every third-party package its code imports, so installing one alone
(the exporter under `opentelemetry-instrument`, the decorators in a production agent) brings what it runs with."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = {
    "agenteval-instrumentation": (ROOT / "instrumentation", "src/agenteval_instrumentation"),
    "agenteval-exporters": (ROOT / "exporters", "src/agenteval_exporters"),
    "agenteval": (ROOT, "agenteval"),
}
OPTIONAL = {
    # A store on object storage: storefs imports the file system the URL's scheme needs, and says what to install.
    "agenteval-exporters": {"fsspec"},
    # Jinja2's own dependency, imported beside it by the dashboard (the dashboard extra); and fsspec, which the s3
    # extra's s3fs brings, imported only for a store on object storage (agenteval.store._listed_objects).
    "agenteval": {"markupsafe", "fsspec"},
}


def imported(package: Path) -> set[str]:
    """The top-level names the package's modules import, anywhere in them (imports inside functions included)."""
    names: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {name for name in names if name not in sys.stdlib_module_names}


def declared(folder: Path) -> set[str]:
    """The distributions the pyproject.toml requires, its extras' included, in normalised form."""
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *sum(project.get("optional-dependencies", {}).values(), [])]
    return {normalised(Requirement(r).name) for r in requirements}


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize("distribution", sorted(DISTRIBUTIONS))
def test_every_import_is_declared(distribution):
    """agenteval-exporters imported numpy to file production spans by day without declaring it; pyarrow has not
    brought numpy since 16, so the exporter alone failed on the first span of no experiment."""
    folder, package = DISTRIBUTIONS[distribution]
    providers = packages_distributions()
    ours = {normalised(name) for name in DISTRIBUTIONS} | {p.split("/")[-1] for _, p in DISTRIBUTIONS.values()}
    requires = declared(folder)
    missing = {
        name
        for name in imported(folder / package) - ours - OPTIONAL.get(distribution, set())
        if not requires & {normalised(d) for d in providers.get(name, [name])}
    }
    assert missing == set(), f"{distribution} imports {sorted(missing)} without declaring them"

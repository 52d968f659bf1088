"""The public namespaces: every package's exported names resolve, the names a type checker sees are the names
served at run time, and the start-up paths (``agenteval --help``, a decorator import) load only what they need."""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import agenteval


def packages() -> list[str]:
    found = ["agenteval", "agenteval_instrumentation", "agenteval_exporters"]
    for info in pkgutil.walk_packages(agenteval.__path__, "agenteval."):
        if info.ispkg:
            found.append(info.name)
    return found


@pytest.mark.parametrize("name", packages())
def test_every_exported_name_resolves(name):
    package = importlib.import_module(name)
    assert package.__all__, f"{name} exports nothing"
    for exported in package.__all__:
        assert getattr(package, exported) is not None, f"{name}.{exported}"
        assert exported in dir(package)


def type_checking_names(path: Path) -> set[str]:
    """Names an ``__init__`` imports under ``if TYPE_CHECKING:``."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in ast.walk(node):
                if isinstance(statement, ast.ImportFrom):
                    names |= {alias.asname or alias.name for alias in statement.names}
    return names


@pytest.mark.parametrize("name", packages())
def test_what_type_checkers_see_is_what_a_lazy_package_serves(name):
    package = importlib.import_module(name)
    assert package.__file__ is not None
    seen = type_checking_names(Path(package.__file__))
    eager = {n for n in package.__all__ if n in vars(package) and n not in seen}
    if not seen:
        return  # an eager package: its imports are its exports, and the test above resolves them
    assert seen == set(package.__all__) - eager


def loaded_after(statement: str) -> set[str]:
    script = f"import sys\n{statement}\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    return set(done.stdout.split())


HEAVY = {"duckdb", "pyarrow", "numpy", "pandas", "rich"}


def test_the_command_line_starts_without_the_heavy_libraries_or_opentelemetry():
    loaded = loaded_after("from agenteval.cli import main")
    assert not loaded & (HEAVY | {"opentelemetry"})


def test_a_decorator_import_loads_the_opentelemetry_api_and_nothing_heavy():
    loaded = loaded_after("from agenteval import tool")
    assert "opentelemetry" in loaded and not loaded & HEAVY
    plain = loaded_after("import agenteval_instrumentation.text, agenteval_instrumentation.attributes")
    assert "opentelemetry" not in plain


def test_a_report_loads_neither_the_opentelemetry_sdk_nor_pandas(tmp_path):
    store = tmp_path / "store"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "agenteval.cli",
            "run",
            "--dataset",
            "arithmetic",
            "--agent",
            "mock",
            "--cases",
            "5",
            "--quiet",
        ],
        env={**os.environ, "AGENTEVAL_STORE": str(store)},
        check=True,
        capture_output=True,
    )
    script = (
        "import sys\nfrom agenteval.analysis import build_report\nfrom agenteval.render import to_terminal\n"
        f"from agenteval.store import Store\nto_terminal(build_report(Store({str(store)!r})))\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'pandas')))))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("agenteval.failures", "agenteval.run._failures"),
        ("agenteval.store.schemas", "agenteval.store._schemas"),
        ("agenteval.store.views", "agenteval.store._views"),
    ],
)
def test_import_paths_documented_before_the_restructure_still_work(old, new):
    before, now = importlib.import_module(old), importlib.import_module(new)
    assert before.__all__
    for name in before.__all__:
        assert getattr(before, name) is getattr(now, name), f"{old}.{name}"

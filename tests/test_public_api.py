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
    # html and ipaddress too: the escapers and the loopback check that need them are never called by --help
    assert not loaded & (HEAVY | {"opentelemetry", "html", "ipaddress"})


def test_a_decorator_loads_the_opentelemetry_api_on_its_first_call_and_nothing_heavy():
    assert not loaded_after("from agenteval import tool") & (HEAVY | {"opentelemetry"})
    called = loaded_after("from agenteval import tool\n@tool\ndef add(a, b): return a + b\nadd(1, 2)")
    assert "opentelemetry" in called and not called & HEAVY
    plain = loaded_after("import agenteval_instrumentation.text, agenteval_instrumentation.attributes")
    assert "opentelemetry" not in plain


def test_a_report_loads_neither_the_opentelemetry_sdk_nor_pyarrow(tmp_path):
    """A report reads the store through DuckDB alone: pyarrow with numpy (and pandas, which pyarrow imports when
    installed) cost a small report a third of its time, and the SDK is for writing spans."""
    store = tmp_path / "store"
    env = {**os.environ, "AGENTEVAL_STORE": str(store)}
    run = [sys.executable, "-m", "agenteval.cli", "run", "--dataset", "arithmetic", "--agent", "mock", "--cases", "5"]
    subprocess.run([*run, "--quiet"], env=env, check=True, capture_output=True)
    unwanted = ("opentelemetry.sdk", "pyarrow", "numpy", "pandas")
    for fmt in ("table", "markdown", "json", "html"):
        output = [] if fmt == "table" else ["--output", str(tmp_path / fmt)]  # the table is for the terminal
        script = (
            "import sys\nfrom agenteval.cli import main\n"
            f"main(['report', '--format', {fmt!r}, *{output!r}], standalone_mode=False)\n"
            f"print('loaded:', *sorted(m for m in sys.modules if m.startswith({unwanted!r})))"
        )
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        report, _, loaded = done.stdout.rpartition("loaded:")
        assert loaded.split() == [], fmt
        assert "arithmetic" in (report if fmt == "table" else (tmp_path / fmt).read_text()), fmt


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


def test_the_arrow_schemas_are_built_on_first_use_once():
    """The schema modules give their versions without pyarrow, and their Arrow schemas, built once, on first use."""
    script = (
        "import sys\nfrom agenteval.store import _schemas\nfrom agenteval_exporters import schema\n"
        "print('pyarrow' in sys.modules, _schemas.TABLE_VERSIONS['spans'] == schema.SCHEMA_VERSION)\n"
        "print(_schemas.TABLES['spans'] is schema.SPAN_SCHEMA is _schemas.TABLES['spans'], "
        "_schemas.TRIALS is _schemas.TABLES['trials'], schema.TIMESTAMP == _schemas.TRIALS.field('started_at').type)\n"
        "try:\n    _schemas.SPANS\nexcept AttributeError:\n    print('refused')"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["False", "True", "True", "True", "True", "refused"]

"""The documentation stays honest: the README's quick start is what CI runs and works, the docs site
builds with every page, link and anchor resolved, and the references name every command, option,
table column, view, span attribute and module the code has."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from packaging.requirements import Requirement
from packaging.version import Version

import agenteval_instrumentation.attributes as attributes_module
from agenteval.cli import main
from agenteval.scorers import BUILTIN_SCORERS
from agenteval.store import TABLES, Store
from agenteval.store._views import HISTORY

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def section(text: str, heading: str) -> str:
    """The text under a markdown heading, up to the next heading of the same or a higher level (code
    blocks, whose lines may start with ``#``, are not headings)."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines(keepends=True)
    start = [line.rstrip("\n") for line in lines].index(heading)
    fenced, end = False, len(lines)
    for number in range(start + 1, len(lines)):
        line = lines[number]
        fenced ^= line.startswith("```")
        if not fenced and re.match(f"#{{1,{level}}} ", line):
            end = number
            break
    return "".join(lines[start:end])


def slug(heading: str) -> str:
    """The anchor MkDocs (and GitHub, for plain headings) gives a heading."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[\s]+", "-", text).strip("-")


def headings(text: str) -> set[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def markdown_table(text: str) -> list[list[str]]:
    """The rows of the first markdown table in ``text``, its header and separator left out."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows[2:]


# The README's quick start -------------------------------------------------------------------------------

QUICK_START = section(README, "## Quick start")
COMMANDS = re.findall(r"```sh\n(.*?)\n```", QUICK_START, flags=re.S)


def test_readme_quick_start_matches_ci():
    """CI runs the README's test command first, as written (then the suite again on the oldest SDK)."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    first_test_run = next(line for line in ci if "pytest" in line)
    assert first_test_run in README
    assert COMMANDS[1] == first_test_run


def test_ci_pins_the_oldest_opentelemetry_the_distributions_accept():
    """.ci/oldest-otel.txt pins exactly the lower bounds the three pyproject.toml files declare (the ``test`` extra's
    other instrumentations excepted: the oldest-OpenTelemetry run installs ``test-base``, without them)."""
    lower_bounds: dict[str, set[Version]] = {}
    for folder in (ROOT, ROOT / "instrumentation", ROOT / "exporters"):
        project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
        extras = {name: deps for name, deps in project.get("optional-dependencies", {}).items() if name != "test"}
        requirements = [*project["dependencies"], *sum(extras.values(), [])]
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


def test_quick_start_is_two_commands_with_the_same_setup():
    assert len(COMMANDS) == 2 and all("\n" not in command for command in COMMANDS)
    setup = "python3 -m venv .venv && .venv/bin/pip install -q -e ./instrumentation -e ./exporters -e '.[test]' && "
    assert all(command.startswith(setup) for command in COMMANDS)
    assert COMMANDS[1] == setup + ".venv/bin/pytest"


def test_quick_start_main_job_evaluates_into_the_embedded_store_and_reports(tmp_path):
    """The first command's steps after the setup, run as written (the venv's `agenteval` is this tree's CLI)."""
    steps = [shlex.split(step) for step in COMMANDS[0].split(" && ")[2:]]
    assert [step[:2] for step in steps] == [[".venv/bin/agenteval", "run"], [".venv/bin/agenteval", "report"]]
    env = {k: v for k, v in os.environ.items() if k != "AGENTEVAL_STORE"}
    outputs = []
    for step in steps:
        done = subprocess.run(
            [sys.executable, "-m", "agenteval.cli", *step[1:]], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
        outputs.append(done.stdout)
    assert "completed" in outputs[0] and "over 150 trials of 50 cases" in outputs[0]
    assert "pass rate" in outputs[1] and "150 trials of 50 cases" in outputs[1]
    (experiment,) = Store(tmp_path / ".agenteval").rows("SELECT agent, dataset_name, status FROM experiments")
    assert experiment == {"agent": "mock", "dataset_name": "arithmetic", "status": "completed"}


# Links and the site ------------------------------------------------------------------------------------


def test_every_readme_link_into_the_repository_resolves():
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert any(link.startswith("docs/") for link in local)
    for link in local:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.is_file(), f"README links to {link}, which does not exist"
        if anchor:
            assert anchor in headings(target.read_text()), f"README links to {link}: no such heading"


def test_the_docs_site_builds_strictly_with_every_page(tmp_path):
    """strict: a page missing from the nav, a broken link or a missing anchor fails the build."""
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    pages = sorted(p.relative_to(DOCS) for p in DOCS.rglob("*.md"))
    assert len(pages) >= 12
    for page in pages:
        built = site / ("index.html" if page.name == "index.md" else page.with_suffix("") / "index.html")
        assert built.is_file(), f"{page} was not built"


def nav_pages(entries: list) -> list[str]:
    """Every page the site's navigation (mkdocs.yml's ``nav``) lists, in order."""
    pages: list[str] = []
    for entry in entries:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages.extend(nav_pages(value) if isinstance(value, list) else [value])
    return pages


def test_the_home_page_links_every_page_of_the_site():
    """docs/index.md is where a reader starts: it listed 7 of the 16 guides, so the production, model, judge,
    simulator, generate, scaling, dashboard, collect and plugin guides could only be found in the sidebar."""
    import yaml

    nav = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    linked = set(re.findall(r"\]\(([^)#\s]+)", (DOCS / "index.md").read_text()))
    assert set(nav) - {"index.md"} - linked == set()


def test_every_figure_of_the_readme_performance_table_is_kept_on_a_page_of_its_benchmark():
    """The README's table holds the latest figures; the pages that explain each benchmark keep every measurement.
    Nine rows' figures (the slow states, the sync twins, the model server, the reports and start-up of
    2026-12-05, S3) were in the README alone, and the page said other things (68 trials/s against 173)."""
    rows = markdown_table(section(README, "## Performance"))
    pages = [path.read_text() for path in DOCS.rglob("*.md")]
    benchmark = ""
    for what, figure, _, _, reproduce in rows:
        named = re.findall(r"benchmarks/(\w+\.py)", reproduce)
        benchmark = named[0] if named else benchmark  # "the same": the row above's
        explaining = [text for text in pages if f"benchmarks/{benchmark}" in text]
        assert explaining, f"no page explains benchmarks/{benchmark}"
        numbers = re.findall(r"(?<![\d.,])\d[\d,]*(?:\.\d+)?", re.sub(r"`[^`]*`", "", figure))
        missing = [n for n in numbers if not any(n in text for text in explaining)]
        assert missing == [], f"README's {what!r}: {missing} on no page of benchmarks/{benchmark}"


# The command line reference ----------------------------------------------------------------------------

CLI_DOC = (DOCS / "reference" / "cli.md").read_text()


def test_every_command_has_help_and_is_in_the_cli_reference():
    documented = set(re.findall(r"^## `agenteval (\S+)`$", CLI_DOC, flags=re.M))
    assert documented == set(main.commands)
    for name, command in main.commands.items():
        result = CliRunner().invoke(main, [name, "--help"])
        assert result.exit_code == 0 and command.help
        text = section(CLI_DOC, f"## `agenteval {name}`")
        (usage,) = re.findall(r"```\n(agenteval .*?)\n```", text)
        for param in command.params:
            if isinstance(param, click.Argument):
                assert param.name.upper() in usage, f"agenteval {name}: argument {param.name} not in the usage"
            elif param.name != "help":
                for opt in param.opts + param.secondary_opts:
                    assert re.search(rf"`{re.escape(opt)}[ `]", text), f"agenteval {name}: {opt} is not documented"


def default_shown(param: click.Option) -> object:
    """The default ``--help`` shows for an option, or None when it shows none (a flag, a default given in words)."""
    if isinstance(param.show_default, str):
        return param.show_default
    literal = isinstance(param.default, (int, float, str)) and not isinstance(param.default, bool)
    return param.default if literal and not param.is_flag and not param.multiple else None


def same_value(documented: str, default: object) -> bool:
    """A cell of the reference's default column against an option's default: numbers compared as numbers."""
    first = documented.replace("`", "").split(",")[0].split(" ")[0]
    if isinstance(default, (int, float)) or re.fullmatch(r"-?\d+(\.\d+)?", str(default)):
        try:
            return float(first) == float(str(default))
        except ValueError:
            return False
    return first == str(default)


def test_the_cli_reference_gives_every_option_the_default_the_command_has():
    """Each option's default in the reference's table is the one ``--help`` shows and the command uses."""
    wrong = []
    for name, command in main.commands.items():
        text = section(CLI_DOC, f"## `agenteval {name}`")
        rows = markdown_table(text) if "| option |" in text else []
        documented = {opt: row[1] for row in rows if len(row) == 3 for opt in re.findall(r"`(--?[\w-]+)", row[0])}
        for param in command.params:
            default = default_shown(param) if isinstance(param, click.Option) else None
            if default is not None and not same_value(documented.get(param.opts[0], ""), default):
                wrong.append(f"agenteval {name} {param.opts[0]}: {documented.get(param.opts[0])!r}, not {default}")
    assert wrong == []


def shell_lines(code: str) -> list[str]:
    """A shell block's commands, one a line: continuation lines and quotes open across lines joined."""
    lines: list[str] = []
    for line in code.replace("\\\n", " ").splitlines():
        if lines and lines[-1].count('"') % 2:
            lines[-1] += " " + line
        else:
            lines.append(line)
    return lines


def documented_invocations(text: str) -> list[str]:
    """Every ``agenteval COMMAND ...`` the text shows: in shell and console blocks (a line, or each part of a line
    chained with ``&&``, ``|`` or ``;``, comments dropped) and in inline code, and inline ``COMMAND --option``."""
    found = []
    for code in re.findall(r"```(?:sh|console)\n(.*?)```", text, flags=re.S):
        for line in shell_lines(code):
            for part in re.split(r"&&|\|\||;|\|", re.sub(r"(^|\s)#.*", "", line)):
                found += re.findall(r"(?:^|[\s/])agenteval (\S.*)$", part.strip().removeprefix("$ "))
    inline = re.sub(r"```.*?```", "", text, flags=re.S)
    found += re.findall(r"`agenteval ([^`]+)`", inline)
    bare = re.findall(r"`([a-z][a-z-]+) (--?[a-z][^`]*)`", inline)
    found += [f"{name} {rest}" for name, rest in bare if name in main.commands]
    return found


@pytest.mark.parametrize("page", ["README.md", *sorted(str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md"))])
def test_every_command_the_docs_show_exists_with_its_options(page):
    """A renamed command or option cannot linger in a guide's example."""
    group = {opt for param in main.params for opt in param.opts + param.secondary_opts} | {"-h", "--help"}
    for invocation in documented_invocations((ROOT / page).read_text()):
        words = [w for w in shlex.split(invocation, comments=True) if w not in group]
        if not words or words[0] in ("COMMAND", "X"):
            continue
        command = main.commands.get(words[0])
        assert command is not None, f"{page}: `agenteval {invocation}`: no command {words[0]!r}"
        options = {opt for param in command.params for opt in param.opts + param.secondary_opts} | group
        for word in words[1:]:
            option = word.split("=")[0]
            if option.startswith("-") and option != "-" and not re.fullmatch(r"-\d.*", option):
                assert option in options, f"{page}: `agenteval {invocation}`: {words[0]} has no {option}"


def test_the_cli_reference_documents_the_group_options():
    for param in main.params:
        for opt in param.opts:
            assert f"`{opt}`" in CLI_DOC.split("\n## ")[0], opt


# The store's reference ---------------------------------------------------------------------------------

STORE_DOC = (DOCS / "reference" / "store.md").read_text()


@pytest.fixture(scope="module")
def store_views(tmp_path_factory):
    """Each view of an empty store: its columns and DuckDB types."""
    con = Store(tmp_path_factory.mktemp("empty")).connect(read_only=True)
    names = [row[0] for row in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()]
    return {name: [(c[0], c[1]) for c in con.execute(f"DESCRIBE {name}").fetchall()] for name in names}


NUMBERS = {5: "five", 6: "six", 7: "seven", 8: "eight"}


def test_the_store_pages_name_every_table_and_count_them():
    """The layout and the counts said five tables after the dashboard's reviews became the sixth."""
    (layout,) = re.findall(r"## Layout\n.*?```\n(.*?)```", STORE_DOC, flags=re.S)
    assert set(re.findall(r"^\s+(\w+)/\w+=", layout, flags=re.M)) == set(TABLES)
    guide = (DOCS / "store.md").read_text()
    for text in (STORE_DOC, guide):
        counts = re.findall(r"\b(\w+) tables\b", text, flags=re.I)
        assert NUMBERS[len(TABLES)] in [c.lower() for c in counts]
        assert not {c.lower() for c in counts} & (set(NUMBERS.values()) - {NUMBERS[len(TABLES)]})


@pytest.mark.parametrize("table", sorted(TABLES))
def test_the_store_reference_documents_every_column_of_every_table(table, store_views):
    rows = markdown_table(section(STORE_DOC, f"## {table}"))
    documented = [(row[0].strip("`"), row[1].strip("`"), row[2]) for row in rows]
    schema = TABLES[table]
    assert [name for name, _, _ in documented] == schema.names, f"the columns of {table} as documented"
    types = dict(store_views[HISTORY.get(table, table)])
    for name, type_, always in documented:
        assert type_ == types[name], f"{table}.{name} is {types[name]}, documented as {type_}"
        assert always == ("no" if schema.field(name).nullable else "yes"), f"{table}.{name}: always set?"
    assert all(row[3] for row in rows), f"a column of {table} has no meaning given"


def test_the_store_reference_documents_every_view(store_views):
    rows = markdown_table(section(STORE_DOC, "## Views"))
    documented = {row[0].strip("`"): row[2] for row in rows}
    assert set(documented) == set(store_views)
    for view, columns in documented.items():
        if "those of the" not in columns:  # a view with columns of its own, each in its own table
            rows = markdown_table(section(STORE_DOC, f"### {view}"))
            described = [(name, type_) for name, type_ in store_views[view]]
            assert [(row[0].strip("`"), row[1].strip("`")) for row in rows] == described, view
            assert all(row[2] for row in rows), f"a column of {view} has no meaning given"
            continue
        (table,) = re.findall(r"those of the `(\w+)` table", columns)
        assert [c for c, _ in store_views[view]] == TABLES[table].names, f"{view} has the columns of {table}"


# Span attributes and the map of the code ---------------------------------------------------------------


def test_the_attribute_reference_names_every_attribute():
    tree = ast.parse(Path(attributes_module.__file__).read_text())
    names = {
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and "." in str(node.value.value)
    }
    text = (DOCS / "reference" / "attributes.md").read_text()
    documented = {
        row[0].strip("`")
        for heading in ("## GenAI conventions", "## agenteval's own", "## Instrumentation scopes")
        for row in markdown_table(section(text, heading))
    }
    assert documented == names


def test_the_pages_name_the_conventions_revision_the_attributes_follow():
    """The instrumentation guide still said "v1.41 names" after the attributes moved to the conventions' own
    repository at a revision of its main branch."""
    (revision,) = re.findall(r"revision ([0-9a-f]{7})", attributes_module.__doc__ or "")
    for path in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        text = path.read_text()
        assert not re.search(r"v1\.\d+ names", text), path
        assert set(re.findall(r"revision `([0-9a-f]{7})`", text)) <= {revision}, path
        if "gen_ai.*" in text and "semantic conventions" in text:
            assert f"`{revision}`" in text, f"{path} says which conventions it follows but not at which revision"


def test_the_architecture_page_lists_every_module():
    text = (DOCS / "architecture.md").read_text()
    roots = [ROOT, ROOT / "instrumentation" / "src", ROOT / "exporters" / "src"]
    packages = ["agenteval", "agenteval_instrumentation", "agenteval_exporters"]
    modules = {
        str(path.relative_to(root))
        for root, package in zip(roots, packages, strict=True)
        for path in (root / package).rglob("*.py")
        if path.name != "__init__.py"
    }
    listed = set(re.findall(r"`((?:agenteval|agenteval_instrumentation|agenteval_exporters)/[\w/]+\.py)`", text))
    assert modules - listed == set(), "modules missing from docs/architecture.md"
    assert listed - modules == set(), "docs/architecture.md lists modules that do not exist"


def test_the_scoring_guide_lists_every_built_in_scorer():
    rows = markdown_table(section((DOCS / "scoring.md").read_text(), "## Built-in scorers"))
    documented = {re.match(r"`(\w+)`", row[1]).group(1): row[2] for row in rows}
    assert documented == {s.name: "continuous" if s.continuous else "pass/fail" for s in BUILTIN_SCORERS}


def test_the_scoring_guide_gives_the_limits_reasons_and_errors_are_cut_at():
    from agenteval_instrumentation.capture import CUT_MARKER, CaptureConfig
    from agenteval_instrumentation.text import ERROR_CHARS

    text = " ".join((DOCS / "scoring.md").read_text().split())
    limit = CaptureConfig().max_string
    assert f"A reason longer than {limit:,} characters" in text and f"`{CUT_MARKER % 0}`".replace("0", "N") in text
    assert f"an error message is cut at {ERROR_CHARS:,} characters" in text


def test_the_docs_name_every_environment_variable_agenteval_reads_and_no_other():
    """A variable renamed in the code (or a documented one never read) would leave a reader setting nothing."""
    pattern = re.compile(r"\bAGENTEVAL_[A-Z_]*[A-Z]\b")
    sources = [ROOT / "agenteval", ROOT / "exporters" / "src", ROOT / "instrumentation" / "src"]
    read = {name for folder in sources for path in folder.rglob("*.py") for name in pattern.findall(path.read_text())}
    helpers = [ROOT / "tests", ROOT / "benchmarks"]  # the test suite's and benchmarks' own switches
    read_anywhere = read | {
        n for folder in helpers for path in folder.rglob("*.py") for n in pattern.findall(path.read_text())
    }
    pages = [README, *(path.read_text() for path in DOCS.rglob("*.md"))]
    documented = {name for text in pages for name in pattern.findall(text)}
    assert read - documented == set(), "read by agenteval, named in no page"
    assert documented - read_anywhere == set(), "named in the docs, read by nothing"


def test_the_failure_table_lists_every_type_and_the_readme_names_each_infrastructure_one():
    """The README's concepts named rate limits, quotas, the simulator's and the scorer's failures as infrastructure,
    but not a provider's 5xx or connection error (``llm_error``), which the runner has counted as infrastructure
    from the start and the gate's ``--max-infra`` counts: a reader would expect such a run to be judged."""
    from agenteval.run._failures import FAILURE_TYPES

    rows = markdown_table(section((DOCS / "run.md").read_text(), "## Failures and wrong answers"))
    assert {re.fullmatch(r"`(\w+)`", row[0]).group(1) for row in rows} == set(FAILURE_TYPES)
    infrastructure = {re.fullmatch(r"`(\w+)`", row[0]).group(1) for row in rows if row[2] == "yes"}
    concepts = section(README, "## Concepts")
    bullet = next(b for b in concepts.split("\n- ") if b.startswith("**Failure or wrong answer.**"))
    said = bullet[bullet.index("*infrastructure*") :]
    assert {name for name in infrastructure if name not in said} == set()

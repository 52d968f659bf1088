"""Plugins: real distributions, built and installed with pip into a folder of their own, whose entry points
(agenteval.scorers, agenteval.providers, agenteval.failures) are used by the command line in a real process."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agenteval.scorers import answer_match

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "agenteval-demo-plugin"

DEMO_MODULE = '''
"""A demo plugin: a scorer, an agent factory, a failure matcher, and names that meet the built-ins'."""

from agenteval.run import ProviderError
from agenteval.scorers import Scorer, scorer

ANSWERS = {"capital of France?": "Paris", "capital of Spain?": "Madrid"}


class BackendDown(Exception):
    """What the demo backend raises; no built-in matcher knows it (no status, no known class name)."""


@scorer(version="3")
def shouting(case, trial):
    return trial.reply.isupper(), "all capitals" if trial.reply.isupper() else "not all capitals"


@scorer(version="1", continuous=True)
def short(case, trial):
    return 1.0 if len(trial.reply) < 10 else 0.0


@scorer(version="1", continuous=True)
def long(case, trial):
    return 1.0 if len(trial.reply) >= 10 else 0.0


# Names that meet the built-ins': an entry point called answer_match, and a scorer named tool_use.
lenient_answer = Scorer("lenient_answer", version="9", sql="struct_pack(value := 1.0, passed := true, reason := 'x')")
tool_use_again = Scorer("tool_use", version="plugin-2", sql="struct_pack(value := 0.5, passed := NULL, reason := 'y')")


def make_agent(shout="no", fail_on=None, forget=False):
    if shout not in ("yes", "no"):
        raise ValueError(f"shout={shout!r}: say yes or no")
    if forget:  # a factory that forgot to return its agent
        return None

    def agent(message):
        if fail_on and fail_on in message:
            raise BackendDown("the demo backend is down")
        answer = ANSWERS.get(message, "I do not know")
        return answer.upper() if shout == "yes" else answer

    return agent


def backend_matcher(exc):
    if type(exc).__name__ == "BackendDown":  # by name, as for an SDK's: a production trace's error is a stand-in
        return ProviderError("quota_exhausted", infrastructure=True)
    return None
'''

DEMO_PYPROJECT = """
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "agenteval-demo-plugin"
version = "0.3.1"

[project.entry-points."agenteval.scorers"]
shouting = "agenteval_demo_plugin:shouting"
length = "agenteval_demo_plugin:LENGTH"
answer_match = "agenteval_demo_plugin:lenient_answer"
strict_tools = "agenteval_demo_plugin:tool_use_again"

[project.entry-points."agenteval.providers"]
echo = "agenteval_demo_plugin:make_agent"

[project.entry-points."agenteval.failures"]
backend = "agenteval_demo_plugin:backend_matcher"

[tool.hatch.build.targets.wheel]
packages = ["agenteval_demo_plugin"]
"""


TWIN_PYPROJECT = """
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "agenteval-echo-twin"
version = "2.0"

[project.entry-points."agenteval.providers"]
echo = "agenteval_echo_twin:agent"

[tool.hatch.build.targets.wheel]
packages = ["agenteval_echo_twin"]
"""


def _broken_pyproject(name: str, group: str) -> str:
    return f"""
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "agenteval-{name}"
version = "1.0"

[project.entry-points."{group}"]
{name.replace("-", "_")} = "agenteval_{name.replace("-", "_")}:thing"

[tool.hatch.build.targets.wheel]
packages = ["agenteval_{name.replace("-", "_")}"]
"""


def _build_and_install(source: Path, pyproject: str, package: str, module: str, site: Path) -> None:
    """Write a distribution's source and install it with the venv's pip into ``site``, offline."""
    (source / package).mkdir(parents=True)
    (source / "pyproject.toml").write_text(textwrap.dedent(pyproject))
    (source / package / "__init__.py").write_text(module)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "--target",
            str(site),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def sites(tmp_path_factory) -> dict[str, Path]:
    """Folders, each holding one installed distribution: the demo plugin, another giving an agent of the
    demo's agent's name, a scorer plugin that cannot be imported, a failure-matcher plugin that cannot be
    imported."""
    root = tmp_path_factory.mktemp("plugins")
    demo = DEMO_MODULE + "\nLENGTH = [short, long]\n"
    _build_and_install(root / "demo", DEMO_PYPROJECT, "agenteval_demo_plugin", demo, root / "site")
    twin = TWIN_PYPROJECT, "agenteval_echo_twin", "def agent(message):\n    return 'twin'\n"
    _build_and_install(root / "twin", *twin, root / "site-twin")
    missing = "import agenteval_no_such_dependency  # not installed\n\nthing = None\n"
    # Not an Exception: what a plugin's import-time code may raise all the same.
    odd = "class Odd(BaseException):\n    pass\n\n\nraise Odd('raised as it is imported')\n"
    broken = (
        ("broken-scorer", "agenteval.scorers", missing),
        ("broken-matcher", "agenteval.failures", missing),
        ("odd-agent", "agenteval.providers", odd),
    )
    for name, group, module in broken:
        package = f"agenteval_{name.replace('-', '_')}"
        _build_and_install(root / name, _broken_pyproject(name, group), package, module, root / f"site-{name}")
    return {
        "demo": root / "site",
        **{name: root / f"site-{name}" for name in ("twin", "broken-scorer", "broken-matcher", "odd-agent")},
    }


def agenteval(*args: str, sites: list[Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m agenteval.cli ARGS`` in a new process whose path starts with ``sites``."""
    path = [str(site) for site in sites] + [str(ROOT), str(ROOT / "instrumentation/src"), str(ROOT / "exporters/src")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    return subprocess.run(
        [sys.executable, "-m", "agenteval.cli", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


def sql(query: str, store: Path, sites: list[Path], cwd: Path) -> list[dict]:
    done = agenteval("sql", query, "--store", str(store), "--format", "json", sites=sites, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def cases(tmp_path) -> Path:
    path = tmp_path / "cases.jsonl"
    rows = [
        {"id": "fr", "input": "capital of France?", "expected_output": "Paris"},
        {"id": "es", "input": "capital of Spain?", "expected_output": "Madrid"},
        {"id": "down", "input": "outage: capital of Peru?", "expected_output": "Lima"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_plugins_lists_every_hook_with_its_distribution(sites, tmp_path):
    done = agenteval("plugins", "--format", "json", sites=[sites["demo"]], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    listed = {(row["group"], row["name"]): row for row in json.loads(done.stdout)}
    assert set(listed) == {
        ("agenteval.scorers", "shouting"),
        ("agenteval.scorers", "length"),
        ("agenteval.scorers", "answer_match"),
        ("agenteval.scorers", "strict_tools"),
        ("agenteval.providers", "echo"),
        ("agenteval.failures", "backend"),
    }
    echo = listed["agenteval.providers", "echo"]
    assert echo == {
        "group": "agenteval.providers",
        "name": "echo",
        "distribution": PLUGIN,
        "version": "0.3.1",
        "target": "agenteval_demo_plugin:make_agent",
        "loads": True,
        "note": None,
    }
    assert listed["agenteval.scorers", "shouting"]["loads"] and listed["agenteval.failures", "backend"]["loads"]
    # A plugin's name never reaches past a built-in's, and the listing says how to reach the plugin.
    shadowed = listed["agenteval.scorers", "answer_match"]
    assert shadowed["loads"] and shadowed["note"] == (
        "the built-in answer_match comes first: use --scorer agenteval_demo_plugin:lenient_answer"
    )
    clash = listed["agenteval.scorers", "strict_tools"]
    assert not clash["loads"] and "its scorer tool_use is named like a built-in" in clash["note"]
    assert done.stderr == f"warning: {clash['note']}\n"  # the one plugin its name cannot reach
    table = agenteval("plugins", sites=[sites["demo"]], cwd=tmp_path)
    assert table.returncode == 0 and "agenteval-demo-plugin" in table.stdout and "6 rows" in table.stdout


def test_with_no_plugin_installed_the_listing_says_how_to_add_one(tmp_path):
    done = agenteval("plugins", "--format", "json", sites=[], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    assert "no plugins installed" in done.stderr and "agenteval.scorers" in done.stderr


def test_a_run_uses_the_plugin_agent_scorer_and_failure_matcher_and_rescore_reloads_the_scorer(sites, cases, tmp_path):
    store = tmp_path / "store"
    path = [sites["demo"]]
    run = agenteval(
        "run",
        "--dataset",
        str(cases),
        "--agent",
        "echo",
        "--agent-option",
        "shout=yes",
        "--agent-option",
        "fail_on=outage",
        "--scorer",
        "shouting",
        "--scorer",
        "length",
        "--attempts",
        "1",
        "--store",
        str(store),
        "--json",
        sites=path,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert (summary["passed"], summary["wrong"], summary["failed"]) == (2, 0, 1)
    scores = sql(
        "SELECT case_id, scorer, scorer_version, value, passed FROM scores "
        "WHERE scorer IN ('shouting', 'short', 'long') ORDER BY case_id, scorer",
        store,
        path,
        tmp_path,
    )
    assert scores == [
        {"case_id": "es", "scorer": "long", "scorer_version": "1", "value": 0.0, "passed": None},
        {"case_id": "es", "scorer": "short", "scorer_version": "1", "value": 1.0, "passed": None},
        {"case_id": "es", "scorer": "shouting", "scorer_version": "3", "value": 1.0, "passed": True},
        {"case_id": "fr", "scorer": "long", "scorer_version": "1", "value": 0.0, "passed": None},
        {"case_id": "fr", "scorer": "short", "scorer_version": "1", "value": 1.0, "passed": None},
        {"case_id": "fr", "scorer": "shouting", "scorer_version": "3", "value": 1.0, "passed": True},
    ]
    # The agent raised the plugin's exception: the plugin's matcher typed it (no built-in one knows it).
    (failed,) = sql(
        "SELECT case_id, failure_type, infrastructure, error_message FROM trials WHERE outcome = 'failed'",
        store,
        path,
        tmp_path,
    )
    assert failed == {
        "case_id": "down",
        "failure_type": "quota_exhausted",
        "infrastructure": True,
        "error_message": "BackendDown: the demo backend is down",
    }
    (experiment,) = sql("SELECT agent, version, options, environment FROM experiments", store, path, tmp_path)
    assert experiment["agent"] == "echo" and json.loads(experiment["options"])["scorers"] == ["shouting", "length"]
    # The version is a hash of the plugin's code, as for MODULE:ATTR; where it came from is on record.
    assert json.loads(experiment["environment"])["agent"] == {
        "source": str(sites["demo"] / "agenteval_demo_plugin" / "__init__.py"),
        "version_from": "source file",
        "plugin": f"{PLUGIN} 0.3.1",
    }

    rescored = agenteval("rescore", summary["experiment_id"], "--store", str(store), "--json", sites=path, cwd=tmp_path)
    assert rescored.returncode == 0, rescored.stderr
    assert {"shouting", "short", "long", "answer_match"} <= set(json.loads(rescored.stdout)["scorers"])
    passes = sql(
        "SELECT scorer, count(DISTINCT pass_id) AS passes, count(DISTINCT value) AS values FROM score_history "
        "WHERE scorer IN ('shouting', 'short', 'long') GROUP BY scorer ORDER BY scorer",
        store,
        path,
        tmp_path,
    )
    # Reloaded by the name the run recorded: a second pass, the same judgements (one value each: 0 or 1).
    assert passes == [
        {"scorer": "long", "passes": 2, "values": 1},
        {"scorer": "short", "passes": 2, "values": 1},
        {"scorer": "shouting", "passes": 2, "values": 1},
    ]
    only = agenteval("rescore", "--scorer", "shouting", "--store", str(store), "--json", sites=path, cwd=tmp_path)
    assert only.returncode == 0 and json.loads(only.stdout)["scorers"] == ["shouting"]


def test_the_agent_version_follows_the_plugins_code(sites, cases, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(sites["demo"], site)
    store = str(tmp_path / "store")
    versions = []
    for edit in ("", "\n# an edit\n"):
        with open(site / "agenteval_demo_plugin" / "__init__.py", "a") as source:
            source.write(edit)
        run = agenteval(
            "run",
            "-d",
            str(cases),
            "-a",
            "echo",
            "--attempts",
            "1",
            "--store",
            store,
            "--json",
            sites=[site],
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stderr
        versions.append(json.loads(run.stdout)["version"])
    assert versions[0] != versions[1]


def test_a_plugin_scorer_named_like_a_builtin_replaces_it_only_when_named_by_its_target(sites, cases, tmp_path):
    store = str(tmp_path / "store")
    path = [sites["demo"]]
    # An option makes make_agent the factory it is (without one it would be the agent, and reply with a function).
    common = ("run", "-d", str(cases), "-a", "echo", "--agent-option", "shout=no", "--attempts", "1", "--store", store)
    common += ("--json",)
    # --scorer answer_match is the built-in, whatever a plugin calls itself.
    builtin = agenteval(*common, "--scorer", "answer_match", sites=path, cwd=tmp_path)
    assert builtin.returncode == 0, builtin.stderr
    # A plugin's name that would bring in a scorer named like a built-in: refused, with the way to mean it.
    refused = agenteval(*common, "--scorer", "strict_tools", sites=path, cwd=tmp_path)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr == (
        f"Error: plugin strict_tools (agenteval.scorers, from {PLUGIN} 0.3.1, agenteval_demo_plugin:tool_use_again): "
        "its scorer tool_use is named like a built-in, which a plugin's name never replaces; to replace the "
        "built-in, name it by its target: --scorer agenteval_demo_plugin:tool_use_again\n"
    )
    replaced = agenteval(*common, "--scorer", "agenteval_demo_plugin:tool_use_again", sites=path, cwd=tmp_path)
    assert replaced.returncode == 0, replaced.stderr
    versions = sql(
        "SELECT json_extract_string(e.options, '$.scorers[0]') AS named, s.scorer, s.scorer_version FROM scores s "
        "JOIN experiments e USING (experiment_id) WHERE s.scorer IN ('answer_match', 'lenient_answer', 'tool_use') "
        "GROUP BY ALL ORDER BY named, scorer",
        Path(store),
        path,
        tmp_path,
    )
    builtin_version = answer_match.version  # the built-in's, not the plugin's
    assert versions == [
        {"named": "agenteval_demo_plugin:tool_use_again", "scorer": "answer_match", "scorer_version": builtin_version},
        {"named": "agenteval_demo_plugin:tool_use_again", "scorer": "tool_use", "scorer_version": "plugin-2"},
        {"named": "answer_match", "scorer": "answer_match", "scorer_version": builtin_version},
    ]


def test_a_plugin_that_cannot_be_imported_is_one_line_where_used_and_breaks_nothing_else(sites, cases, tmp_path):
    store = tmp_path / "store"
    path = [sites["demo"], sites["broken-scorer"]]
    listing = agenteval("plugins", "--format", "json", sites=path, cwd=tmp_path)
    assert listing.returncode == 0
    rows = {row["name"]: row for row in json.loads(listing.stdout)}
    problem = (
        "plugin broken_scorer (agenteval.scorers, from agenteval-broken-scorer 1.0, agenteval_broken_scorer:thing): "
        "cannot be loaded: ModuleNotFoundError: No module named 'agenteval_no_such_dependency'; "
        "fix or uninstall agenteval-broken-scorer"
    )
    assert rows["broken_scorer"]["loads"] is False and rows["broken_scorer"]["note"] == problem
    assert rows["shouting"]["loads"] and rows["echo"]["loads"]
    assert f"warning: {problem}" in listing.stderr.splitlines()
    # Runs that do not name it go on as before.
    common = ("run", "-d", str(cases), "-a", "echo", "--attempts", "1", "--store", str(store), "--json")
    fine = agenteval(*common, "--scorer", "shouting", sites=path, cwd=tmp_path)
    assert fine.returncode == 0, fine.stderr
    # Naming it is one line, before anything is written.
    named = agenteval(*common, "--scorer", "broken_scorer", sites=path, cwd=tmp_path)
    assert (named.returncode, named.stdout, named.stderr) == (1, "", f"Error: {problem}\n")
    rescore = agenteval("rescore", "--scorer", "broken_scorer", "--store", str(store), sites=path, cwd=tmp_path)
    assert (rescore.returncode, rescore.stderr) == (1, f"Error: {problem}\n")
    assert sql("SELECT count(*) AS n FROM experiments", store, path, tmp_path) == [{"n": 1}]


def test_a_failure_matcher_that_cannot_be_imported_stops_runs_only(sites, cases, tmp_path):
    store = tmp_path / "store"
    path = [sites["demo"], sites["broken-matcher"]]
    problem = (
        "plugin broken_matcher (agenteval.failures, from agenteval-broken-matcher 1.0, "
        "agenteval_broken_matcher:thing): cannot be loaded: ModuleNotFoundError: No module named "
        "'agenteval_no_such_dependency'; fix or uninstall agenteval-broken-matcher"
    )
    # Every run would type its failures without a matcher the user installed: it does not start.
    run = agenteval("run", "-d", str(cases), "-a", "echo", "--store", str(store), sites=path, cwd=tmp_path)
    assert (run.returncode, run.stdout, run.stderr) == (1, "", f"Error: {problem}\n")
    assert not store.exists()
    # Commands that do not run agents are untouched.
    for args in (("validate", str(cases)), ("datasets", "--json"), ("audit", str(cases))):
        done = agenteval(*args, sites=path, cwd=tmp_path)
        assert done.returncode == 0 and done.stderr == "", (args, done.stderr)
    listing = agenteval("plugins", sites=path, cwd=tmp_path)
    assert listing.returncode == 0 and f"warning: {problem}" in listing.stderr.splitlines()


def test_a_plugin_whose_import_raises_a_base_exception_is_one_line_too(sites, cases, tmp_path):
    path = [sites["odd-agent"]]
    problem = (
        "plugin odd_agent (agenteval.providers, from agenteval-odd-agent 1.0, agenteval_odd_agent:thing): "
        "cannot be loaded: Odd: raised as it is imported; fix or uninstall agenteval-odd-agent"
    )
    listing = agenteval("plugins", "--format", "json", sites=path, cwd=tmp_path)
    assert (listing.returncode, listing.stderr) == (0, f"warning: {problem}\n")
    assert [row["note"] for row in json.loads(listing.stdout)] == [problem]
    store = tmp_path / "store"
    run = agenteval("run", "-d", str(cases), "-a", "odd_agent", "--store", str(store), sites=path, cwd=tmp_path)
    assert (run.returncode, run.stdout, run.stderr) == (1, "", f"Error: {problem}\n")
    assert not store.exists()


def test_a_plugin_agent_factory_that_raises_is_one_line_naming_the_plugin_and_its_distribution(sites, cases, tmp_path):
    """The factory's error said ``--agent echo: building the agent raised ...``: nothing named the distribution
    that registered ``echo`` (the name alone does not say which package to look at, fix or uninstall)."""
    store = tmp_path / "store"
    args = ("run", "-d", str(cases), "-a", "echo", "--agent-option", "shout=maybe", "--store", str(store))
    run = agenteval(*args, sites=[sites["demo"]], cwd=tmp_path)
    source = sites["demo"] / "agenteval_demo_plugin" / "__init__.py"
    assert (run.returncode, run.stdout) == (1, ""), run.stderr
    assert re.fullmatch(
        re.escape(
            f"Error: plugin echo (agenteval.providers, from {PLUGIN} 0.3.1, agenteval_demo_plugin:make_agent): "
            f"building the agent raised ValueError: shout='maybe': say yes or no (at {source}:"
        )
        + r"\d+\)"
        + re.escape(f"; check its --agent-option values, or fix or uninstall {PLUGIN}\n"),
        run.stderr,
    ), run.stderr
    assert not store.exists()


def test_a_plugin_agent_factory_that_returns_no_agent_is_one_line_naming_the_plugin_and_its_distribution(
    sites, cases, tmp_path
):
    """It said ``--agent echo: NoneType is not callable``, naming neither the distribution that registered ``echo``
    nor what to do, as the factory that raises once did."""
    store = tmp_path / "store"
    args = ("run", "-d", str(cases), "-a", "echo", "--agent-option", "forget=true", "--store", str(store))
    run = agenteval(*args, sites=[sites["demo"]], cwd=tmp_path)
    assert (run.returncode, run.stdout) == (1, ""), run.stderr
    assert run.stderr == (
        f"Error: plugin echo (agenteval.providers, from {PLUGIN} 0.3.1, agenteval_demo_plugin:make_agent): "
        "building the agent returned a NoneType, which is not callable (an agent); "
        f"check its --agent-option values, or fix or uninstall {PLUGIN}\n"
    )
    assert not store.exists()


def test_a_name_two_distributions_give_is_refused_and_each_is_reachable_by_its_target(sites, cases, tmp_path):
    path = [sites["demo"], sites["twin"]]
    common = ("run", "-d", str(cases), "--attempts", "1", "--store", str(tmp_path / "store"), "--json")
    refused = agenteval(*common, "-a", "echo", sites=path, cwd=tmp_path)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        "Error: plugin echo: agenteval-demo-plugin (agenteval_demo_plugin:make_agent) and agenteval-echo-twin "
        "(agenteval_echo_twin:agent) both provide it in agenteval.providers; name the one you mean by its target\n"
    )
    twin = agenteval(*common, "-a", "agenteval_echo_twin:agent", sites=path, cwd=tmp_path)
    assert twin.returncode == 0 and json.loads(twin.stdout)["wrong"] == 3
    listing = agenteval("plugins", "--format", "json", sites=path, cwd=tmp_path)
    notes = {row["distribution"]: row["note"] for row in json.loads(listing.stdout) if row["name"] == "echo"}
    assert notes == {
        PLUGIN: "another distribution has this name too: use --agent agenteval_demo_plugin:make_agent",
        "agenteval-echo-twin": "another distribution has this name too: use --agent agenteval_echo_twin:agent",
    }


FAULTY_MATCHERS_PYPROJECT = """
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "agenteval-faulty-matchers"
version = "0.1"

[project.entry-points."agenteval.failures"]
a_raises = "agenteval_faulty_matchers:raises"
a_garbage = "agenteval_faulty_matchers:garbage"
a_made_up = "agenteval_faulty_matchers:made_up"

[tool.hatch.build.targets.wheel]
packages = ["agenteval_faulty_matchers"]
"""

FAULTY_MATCHERS = """
from agenteval.run import ProviderError


def raises(exc):
    raise RuntimeError("a bug in the matcher")


def garbage(exc):
    return "llm_error"


def made_up(exc):
    return ProviderError("disk_full", infrastructure="yes", retry_after=float("nan"))
"""


def test_a_failure_matcher_that_raises_or_answers_garbage_costs_the_typing_of_a_failure_not_the_run(
    sites, cases, tmp_path
):
    site = tmp_path / "site-faulty"
    _build_and_install(
        tmp_path / "faulty", FAULTY_MATCHERS_PYPROJECT, "agenteval_faulty_matchers", FAULTY_MATCHERS, site
    )
    store = tmp_path / "store"
    path = [sites["demo"], site]
    run = agenteval(
        "run",
        *("-d", str(cases), "-a", "echo", "--agent-option", "fail_on=outage", "--attempts", "2"),
        *("--store", str(store), "--json"),
        sites=path,
        cwd=tmp_path,
    )
    # Each faulty matcher is asked, passed over and warned of once; the run ends, every trial saved.
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert (summary["status"], summary["passed"], summary["wrong"], summary["failed"]) == ("completed", 4, 0, 2)
    faults = [
        "the failure matcher plugin a_garbage (agenteval.failures, from agenteval-faulty-matchers 0.1, "
        "agenteval_faulty_matchers:garbage), which returned a str, not an agenteval.run.ProviderError or None",
        "the failure matcher plugin a_made_up (agenteval.failures, from agenteval-faulty-matchers 0.1, "
        "agenteval_faulty_matchers:made_up), which returned the type 'disk_full', not one of agent_error, "
        "empty_output, invalid_model_output, llm_error, max_steps_exceeded, output_truncated, quota_exhausted, "
        "rate_limited, simulator_error, timeout, timeout_after_rate_limit, tool_error",
        "the failure matcher plugin a_raises (agenteval.failures, from agenteval-faulty-matchers 0.1, "
        "agenteval_faulty_matchers:raises), which raised RuntimeError: a bug in the matcher",
    ]
    warned = [line for line in run.stderr.splitlines() if line.startswith("warning: the failure matcher")]
    assert warned == [
        f"warning: {fault.replace(', which', '')}; the failures it is asked about are typed without it"
        for fault in faults
    ]
    # The demo's own matcher, asked after them, still types its backend's outage.
    failed = sql(
        "SELECT case_id, failure_type, infrastructure, error_message FROM trials WHERE outcome = 'failed'",
        store,
        path,
        tmp_path,
    )
    typed = {
        "case_id": "down",
        "failure_type": "quota_exhausted",
        "infrastructure": True,
        "error_message": f"BackendDown: the demo backend is down (typed without {'; '.join(faults)})",
    }
    assert failed == [typed, typed]


PRODUCTION_AGENT = """
import sys

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import set_tracer_provider

from agenteval_exporters import ParquetSpanExporter
from agenteval_instrumentation import agent


class BackendDown(Exception):
    pass


provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(sys.argv[1])))
set_tracer_provider(provider)


@agent(name="shop")
def answer(question):
    raise BackendDown("the demo backend is down")


try:
    answer("capital of Peru?")
except BackendDown:
    pass
provider.shutdown()
"""


def _record_production_outage(store: Path, tmp_path: Path) -> None:
    """One production trace in ``store``, its agent having raised a BackendDown, recorded by a process of its own."""
    script = tmp_path / "production.py"
    script.write_text(PRODUCTION_AGENT)
    path = os.pathsep.join([str(ROOT), str(ROOT / "instrumentation/src"), str(ROOT / "exporters/src")])
    subprocess.run([sys.executable, str(script), str(store)], env={**os.environ, "PYTHONPATH": path}, check=True)


def test_the_report_on_production_traces_types_their_errors_with_the_failure_plugins_too(sites, tmp_path):
    store = tmp_path / "store"
    _record_production_outage(store, tmp_path)
    typed = {}
    for plugins in ([], [sites["demo"]]):
        done = agenteval("report", "--traces", "--store", str(store), "--format", "json", sites=plugins, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        typed[len(plugins)] = (report["failures_by_type"], report["failures"]["infrastructure"])
    # The demo's matcher types the trace's recorded BackendDown as it types a trial's.
    assert typed == {0: ({"agent_error": 1}, 0), 1: ({"quota_exhausted": 1}, 1)}


LOUD_PYPROJECT = """
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "agenteval-loud"
version = "1.0"

[project.entry-points."agenteval.scorers"]
loud = "agenteval_loud:loud"

[project.entry-points."agenteval.failures"]
a_loud = "agenteval_loud:matcher"

[tool.hatch.build.targets.wheel]
packages = ["agenteval_loud"]
"""

LOUD = """
print("LOUD as it is imported")

from agenteval.scorers import scorer


@scorer(version="1")
def loud(case, trial):
    print("LOUD as it scores")
    return True, "heard"


def matcher(exc):
    print("LOUD as it matches")
    return None
"""


def test_what_a_plugin_prints_goes_to_stderr_when_stdout_is_a_table_or_json(sites, cases, tmp_path):
    site = tmp_path / "site-loud"
    _build_and_install(tmp_path / "loud", LOUD_PYPROJECT, "agenteval_loud", LOUD, site)
    store = tmp_path / "store"
    _record_production_outage(store, tmp_path)
    path = [sites["demo"], site]
    run = ("run", "-d", str(cases), "-a", "echo", "--agent-option", "fail_on=outage", "--scorer", "loud", "--json")
    commands = {
        "run": (*run, "--attempts", "1", "--store", str(store)),
        "rescore": ("rescore", "--scorer", "loud", "--store", str(store), "--json"),
        "rescore --traces": ("rescore", "--traces", "--scorer", "loud", "--store", str(store), "--json"),
        "report --traces": ("report", "--traces", "--store", str(store), "--format", "json"),
        "plugins": ("plugins", "--format", "json"),
    }
    heard = {}
    for command, args in commands.items():
        done = agenteval(*args, sites=path, cwd=tmp_path)
        assert done.returncode == 0, (command, done.stderr)
        json.loads(done.stdout)  # the JSON alone
        heard[command] = sorted({line for line in done.stderr.splitlines() if line.startswith("LOUD")})
    assert heard == {
        "run": ["LOUD as it is imported", "LOUD as it matches", "LOUD as it scores"],
        "rescore": ["LOUD as it is imported", "LOUD as it scores"],
        "rescore --traces": ["LOUD as it is imported"],  # the one trace ended in error: nothing to score
        "report --traces": ["LOUD as it is imported", "LOUD as it matches"],
        "plugins": ["LOUD as it is imported"],
    }

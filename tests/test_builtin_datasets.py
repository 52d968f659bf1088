"""The built-in datasets are right: counts, ids, every computable answer recomputed, rag answers in their documents."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from agenteval.cli import main
from agenteval.dataset._catalog import arithmetic_cases, builtin_names, catalog, load_dataset
from agenteval.tools import BUILTIN_TOOLS, COUNTRIES, MISSING_COUNTRY, convert, corpus, fetch_review, lookup
from agenteval.tools._calculator import evaluate

ROOT = Path(__file__).resolve().parents[1]
SPEC = {"mixed": (16, None), "hard": (55, 10), "extended": (200, 11), "rag": (45, 6), "support": (20, 4)}


def test_catalog_matches_the_spec():
    assert builtin_names() == ["arithmetic", "extended", "hard", "mixed", "rag", "support"]
    for name, (count, categories) in SPEC.items():
        dataset = load_dataset(name)
        assert len(dataset) == count, name
        if categories:
            assert len(dataset.categories()) == categories, name
    extended = load_dataset("extended")
    with_trajectory = {c.category for c in extended if c.expected_trajectory}
    assert with_trajectory == {"trajectory"}
    assert all(c.max_tool_calls for c in extended if c.category == "trajectory")


@pytest.mark.parametrize("name", list(SPEC))
def test_ids_are_readable_and_tools_exist(name):
    for case in load_dataset(name):
        assert re.fullmatch(rf"{name}-[a-z-]+-\d{{2}}", case.id), case.id
        assert case.category and case.category.replace("_", "-") in case.id
        for tool_name in case.expected_tools or ():
            assert tool_name in BUILTIN_TOOLS, (case.id, tool_name)


def _run_check(steps: list[dict]) -> object:
    """Recompute an answer from the steps a case declares, through the tools' own functions."""
    results: list[object] = []
    for step in steps:
        args = {k: v.format(*results) if isinstance(v, str) else v for k, v in step["args"].items()}
        if step["tool"] == "calculator":
            value = evaluate(args["expression"])
        elif step["tool"] == "convert_currency":
            value = convert(float(args["amount"]), args["from_currency"], args["to_currency"])
        elif step["tool"] == "country_facts":
            value = lookup(args["country"])[step["take"]]
        elif step["tool"] == "fetch_review":
            value = re.search(step["pattern"], fetch_review(**args)).group(1)
        else:
            raise AssertionError(f"unknown tool in check: {step['tool']}")
        results.append(value)
    return results[-1], steps[-1].get("format")


@pytest.mark.parametrize("name", ["mixed", "hard", "extended"])
def test_every_computable_answer_is_recomputed(name, spans):
    checked = 0
    for case in load_dataset(name):
        check = case.metadata.get("check")
        if not check:
            continue
        value, fmt = _run_check(check)
        if fmt == "cents":
            assert case.expected_output == f"{value:.2f}", case.id
        elif isinstance(value, (int, float)):
            assert float(case.expected_output) == pytest.approx(value, abs=1e-6), case.id
        else:
            assert case.expected_output == str(value), case.id
        assert [s["tool"] for s in check] == list(case.expected_tools or ()), case.id
        checked += 1
    assert checked >= {"mixed": 15, "hard": 40, "extended": 140}[name]


@pytest.mark.parametrize("name", ["mixed", "hard", "extended"])
def test_cases_that_cannot_be_computed_are_the_ones_meant_to_be(name):
    for case in load_dataset(name):
        if case.metadata.get("check"):
            continue
        assert case.category in {"tool_error", "unanswerable", "no_tool", "missing_country"}, case.id
        if case.category in {"unanswerable", "missing_country"}:
            assert case.expected_output == "unknown", case.id
        if case.category == "tool_error":
            assert case.expects_tool_error and case.expected_output == "", case.id


def test_unanswerable_lookups_really_are_missing():
    assert lookup(MISSING_COUNTRY) is None and MISSING_COUNTRY not in COUNTRIES
    for case in load_dataset("extended"):
        if case.category == "unanswerable" and "country database" in case.input:
            place = re.search(r"(Bhutan|Atlantis|Wakanda|Freedonia|Genovia|France in 1850)", case.input).group(1)
            assert place == "France in 1850" or lookup(place) is None, case.id


def test_rag_relevant_docs_exist_and_hold_the_answer():
    documents = {doc["id"]: doc for doc in corpus()}
    dataset = load_dataset("rag")
    for case in dataset:
        assert case.relevant_docs is not None, case.id  # on every case: [] for the unanswerable ones
        if case.expected_output == "unknown":
            assert case.relevant_docs == () and case.category == "unanswerable", case.id
            continue
        assert case.relevant_docs, case.id
        texts = []
        for doc_id in case.relevant_docs:
            assert doc_id in documents, (case.id, doc_id)
            texts.append(documents[doc_id]["text"].lower())
        assert any(case.expected_output.lower() in text for text in texts), case.id
    used = {d for case in dataset for d in case.relevant_docs or ()}
    assert used == set(documents), "every corpus document is relevant to some question"


def test_support_answers_and_must_contain_items_are_in_the_relevant_documents():
    documents = {doc["id"]: doc["text"].lower() for doc in corpus()}
    for case in load_dataset("support"):
        assert case.relevant_docs and case.rubric, case.id
        text = " ".join(documents[doc_id] for doc_id in case.relevant_docs)
        for item in case.must_contain or ():
            assert item.lower() in text, (case.id, item)
        parts = (case.metadata or {}).get("sum_of")
        if parts:  # an answer the agent adds up from the documents' figures
            assert all(part.lower() in text for part in parts), case.id
            assert float(case.expected_output.strip("£")) == sum(float(p.strip("£")) for p in parts)
            continue
        answers = [case.expected_output, *(case.acceptable_outputs or ())]
        assert any(answer.lower() in text for answer in answers), case.id


def test_rag_search_finds_the_relevant_documents(spans):
    from agenteval.tools import retrieve

    found = total = 0
    for case in load_dataset("rag"):
        if case.relevant_docs:
            hits = {doc["id"] for doc in retrieve(case.input)}
            found += len(hits & set(case.relevant_docs))
            total += len(case.relevant_docs)
    assert found / total >= 0.9


def test_arithmetic_is_generated_deterministically_and_correctly():
    first, again = arithmetic_cases(40, seed=7), arithmetic_cases(40, seed=7)
    assert first == again
    assert arithmetic_cases(10, seed=7) == first[:10]  # more cases keep the first ones
    assert arithmetic_cases(40, seed=8) != first
    assert {c.category for c in first} == {"addition", "subtraction", "multiplication", "division"}
    for case in first:
        expression = case.input.removeprefix("What is ").removesuffix("?")
        assert str(evaluate(expression)) == case.expected_output, case.id
    dataset = load_dataset("arithmetic", cases=12, seed=7)
    assert len(dataset) == 12 and dataset.hash == load_dataset("arithmetic", cases=12, seed=7).hash


def test_datasets_command_lists_counts_and_categories():
    result = CliRunner().invoke(main, ["datasets", "--json"])
    assert result.exit_code == 0
    listed = {e["name"]: e for e in __import__("json").loads(result.output)}
    assert listed["hard"]["cases"] == 55 and len(listed["hard"]["categories"]) == 10
    assert listed["arithmetic"]["cases"] is None
    # generated at any size: no count per category (it listed 1 each, the size it was built at for the listing)
    operations = ["addition", "division", "multiplication", "subtraction"]
    assert listed["arithmetic"]["categories"] == dict.fromkeys(operations)
    assert [e.name for e in catalog()] == list(listed)
    table = CliRunner().invoke(main, ["datasets"])
    assert "--cases N (generated)" in table.output and "extended" in table.output


def test_the_wheel_ships_every_dataset_and_the_corpus(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("agenteval-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for dataset in ("mixed", "hard", "extended", "rag", "rag_corpus", "support"):
        assert f"agenteval/datasets/{dataset}.jsonl" in names
    # Installed (not editable), the package finds them inside itself.
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    script = (
        "from agenteval.dataset._catalog import datasets_dir, load_dataset; "
        "print(datasets_dir(), len(load_dataset('rag')))"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(unpacked)}
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(unpacked / "agenteval" / "datasets"), "45"]

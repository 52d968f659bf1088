"""The dashboard over HTTP: a real `agenteval dashboard` process on loopback, over a store of real runs.

Figures against the report and the comparison, pagination in SQL, the token rule, cross-site writes refused,
review verdicts into the store's reviews table and out as judge-check's labels file, the read-only SQL rule, and
stored payloads escaped. The browser-level tests are in test_dashboard_browser.py.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
import selectors
import socket
import subprocess
import sys
import time
from datetime import timedelta
from urllib.parse import quote

import duckdb
import httpx
import pyarrow as pa
import pytest
from click.testing import CliRunner
from dashboard_server import PAYLOAD, dashboard, dashboard_process, make_store
from waiting import wait_until

from agenteval import evaluate
from agenteval.analysis import build_report, compare
from agenteval.analysis._stats import shown_p
from agenteval.cli import main
from agenteval.dashboard._app import MOVED_SHOWN
from agenteval.dashboard._queries import CATEGORIES_SHOWN, EXPERIMENTS_PAGE, SPANS_SHOWN, case_page
from agenteval.dashboard._review import REVIEWS_SHOWN
from agenteval.dashboard._sql import SQL_CELL_CHARS, SQL_PAGE_CHARS, Cell, run_sql
from agenteval.render._report_formats import interval, pct
from agenteval.render._tables import render
from agenteval.scorers._judge_check import read_labels
from agenteval.store import Store
from agenteval.store._kept_connection import KeptConnection
from agenteval_exporters import SPAN_SCHEMA, ParquetSpanExporter


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("dashboard"))


@pytest.fixture(scope="module")
def site(runs):
    with dashboard(runs["store"]) as address:
        yield address


def get(site: str, path: str, **kwargs) -> httpx.Response:
    return httpx.get(site.rstrip("/") + path, **kwargs)


def store_files(store: str) -> set[str]:
    from pathlib import Path

    return {str(p.relative_to(store)) for p in Path(store).rglob("*") if ".snapshots" not in p.parts}


def test_the_experiments_page_lists_every_run_with_the_reports_figures(runs, site):
    page = get(site, "/")
    assert page.status_code == 200
    for key in ("baseline", "candidate", "injected"):
        report = build_report(Store(runs["store"]), runs[key])
        row = page.text.split(f'value="{runs[key]}"')[1].split("</tr>")[0]
        assert pct(report.overall.pass_rate) in row and interval(report.overall.ci95) in row
        assert f"{report.outcomes.failed} ({report.outcomes.infrastructure_failures})" in row
    only = get(site, "/", params={"dataset": "injected"}).text
    assert runs["injected"] in only and runs["baseline"] not in only


def test_the_experiments_page_lists_a_page_of_experiments_and_says_how_many_there_are(tmp_path):
    """Found by a hostile check: the experiments page listed every experiment in one page and opened a judged
    connection (the experiment's figures, read or computed) for each, so at 2,000 experiments one view of / read
    2,000 experiments' figures. Now a page of EXPERIMENTS_PAGE, newest first, cut in SQL, with the count."""
    store_path = tmp_path / "store"
    run = evaluate("mock", "arithmetic", cases=2, attempts=1, store=store_path, progress="none")
    store = Store(store_path)
    record = store.rows(f"SELECT * FROM experiments WHERE experiment_id = '{run.id}'")[0]
    many = EXPERIMENTS_PAGE + 7  # the run and the records of runs that recorded no trial
    copies = [
        {**record, "experiment_id": f"e{n:04d}", "name": None, "started_at": record["started_at"] - timedelta(hours=n)}
        for n in range(1, many)
    ]
    store.write("experiments", copies)
    newest_first = [run.id, *(f"e{n:04d}" for n in range(1, many))]
    with dashboard(str(store_path)) as address:
        # The records have no saved figures, so each listed one has them computed: a bound on a wait, not on speed.
        first, second, past = (get(address, "/", params={"page": page}, timeout=300).text for page in (1, 2, 99))
        filtered = get(address, "/", params={"status": record["status"], "page": 2}, timeout=300).text
    listed = re.findall(r'name="pick" value="([^"]+)"', first)
    assert listed == newest_first[:EXPERIMENTS_PAGE]
    assert f"Experiments 1 to {EXPERIMENTS_PAGE} of {many}, newest first" in first
    assert f"agenteval experiments --store {store_path}</code> lists every one" in first
    assert 'rel="next"' in first and "page 1 of 2" in first
    for later in (second, past, filtered):  # past the last page is the last page
        assert re.findall(r'name="pick" value="([^"]+)"', later) == newest_first[EXPERIMENTS_PAGE:]
        assert f"Experiments {EXPERIMENTS_PAGE + 1} to {many} of {many}" in later
    assert len(first.encode()) < 1_000 * EXPERIMENTS_PAGE + 10_000  # bounded by the page, not by the store


def test_the_experiment_page_shows_the_report_plots_and_a_page_of_cases(runs, site):
    report = build_report(Store(runs["store"]), runs["candidate"])
    page = get(site, f"/experiments/{runs['candidate']}").text
    assert page.count("<svg") >= 3 and "pass rate by category" in page
    assert f"pass rate <strong>{pct(report.overall.pass_rate)}</strong>" in page
    assert len(re.findall(r'<td class="case-id">', page)) == 50  # 60 cases: the first page of 50
    assert 'rel="next"' in page and "page 1 of 2" in page
    second = get(site, f"/experiments/{runs['candidate']}", params={"page": 2}).text
    assert len(re.findall(r'<td class="case-id">', second)) == 10


def test_a_page_number_out_of_range_shows_the_nearest_page_with_the_true_count(runs, site):
    """A stale link or a typed number: past the last page showed "0 cases match" and "page 7 of 1" over an
    empty table, and past what SQL's OFFSET holds a 500; zero, negative or not a number is the first page."""
    eid = runs["candidate"]  # 60 cases: pages of 50
    for page, shown, rows in (("7", 2, 10), (str(10**25), 2, 10), ("0", 1, 50), ("-3", 1, 50), ("two", 1, 50)):
        answer = get(site, f"/experiments/{eid}", params={"page": page})
        assert answer.status_code == 200, (page, answer.text[-300:])
        assert f"page {shown} of 2" in answer.text and "60 cases match" in answer.text, page
        assert len(re.findall(r'<td class="case-id">', answer.text)) == rows, page
    nothing = get(site, f"/experiments/{eid}", params={"page": "5", "category": "no such category"}).text
    assert "page 1 of 1" in nothing and "0 cases match" in nothing


def test_cases_are_filtered_sorted_and_paged_in_sql_and_cover_every_trial_once(runs):
    store, eid = Store(runs["store"]), runs["candidate"]
    report = build_report(store, eid)
    seen = []
    for number in range(1, 20):
        page = case_page(store, eid, page=number, size=7, sort="pass_rate", descending=True)
        seen += page.rows
        if number == page.pages:
            break
    assert len({r["case_id"] for r in seen}) == len(seen) == report.cases
    assert sum(r["attempts"] for r in seen) == report.trials
    rates = [r["passes"] / r["attempts"] for r in seen]
    assert rates == sorted(rates, reverse=True)
    failed = case_page(store, eid, outcome="failed", size=1000)
    assert failed.total == sum(1 for r in seen if r["failed"]) and failed.total > 0
    category = report.categories[0].category
    assert case_page(store, eid, category=category, size=1000).total == report.categories[0].cases
    scorer = case_page(store, eid, scorer="answer_match", size=1000)
    assert 0 < scorer.total < report.cases


def test_the_trial_page_shows_conversation_scores_and_span_tree(runs, site):
    page = get(site, f"/experiments/{runs['baseline']}")
    trial = re.search(r'href="(/experiments/[^"]+/trials/[^"]+)"', page.text).group(1)
    text = get(site, trial).text
    trial_id = trial.rsplit("/", 1)[1]
    scores = Store(runs["store"]).rows("SELECT scorer, pass_id, reason FROM scores WHERE trial_id = ?", [trial_id])
    assert {"answer_match", "tool_use"} <= {s["scorer"] for s in scores}
    for score in scores:  # each score with its reasoning and pass id
        assert score["pass_id"] in text and html.escape(score["reason"] or "", quote=False) in text
    spans = Store(runs["store"]).rows("SELECT name FROM spans WHERE trial_id = ?", [trial_id])
    assert text.count("<details") == len(spans) > 1
    assert 'class="turn user"' in text and 'class="turn assistant"' in text


def test_the_comparison_page_gives_the_paired_difference_and_the_gates_decision(runs, site):
    a, b = runs["baseline"], runs["candidate"]
    comparison = compare(Store(runs["store"]), a, b)
    text = get(site, f"/compare/{a}/{b}").text
    assert f"{comparison.overall.difference:+.1%}" in text
    assert f"one-sided p = {shown_p(comparison.overall.p_drop())}" in text  # as compare prints it
    assert "Gate: regression" in text
    for moved in comparison.newly_failing:
        assert f"/compare/{a}/{b}/cases/{quote(moved['case_id'], safe='')}" in text
    picked = get(site, "/pick", params=[("pick", b), ("pick", a)], follow_redirects=False)
    assert picked.status_code == 303 and picked.headers["location"] == f"/compare/{a}/{b}"
    case = comparison.newly_failing[0]["case_id"]
    side = get(site, f"/compare/{a}/{b}/cases/{quote(case, safe='')}").text
    assert side.count('class="trial"') == 4  # two attempts on each side


def test_a_comparison_lists_the_first_newly_failing_cases_and_says_how_many_there_are(tmp_path):
    """Found comparing two runs of 20,000 cases: the page listed all 9,987 newly failing cases (2.2 MB), and
    would list 100,000 of a run ten times that; now the first MOVED_SHOWN, with the count and where the rest are."""
    store = tmp_path / "store"
    cases = MOVED_SHOWN + 30

    def mock(wrong_rate: float) -> str:
        options = {"wrong_rate": str(wrong_rate), "seed": "1"}
        return evaluate(
            "mock", "arithmetic", cases=cases, attempts=1, store=store, progress="none", agent_options=options
        ).id

    baseline, candidate = mock(0.0), mock(1.0)  # every case newly fails
    with dashboard(str(store)) as address:
        page = get(address, f"/compare/{baseline}/{candidate}").text
    failing = page.split('id="newly-failing"')[1].split("</table>")[0]
    assert f"Newly failing ({cases})" in failing
    assert failing.count("both trials side by side") == MOVED_SHOWN
    assert f"The first {MOVED_SHOWN} of {cases}:" in page
    assert f"agenteval compare {baseline} {candidate} --store {store} --json" in page


def test_pages_list_the_first_categories_and_say_how_many_there_are(tmp_path):
    """Found by a hostile check: an experiment's page drew every category in its plot, report table and category
    filter, and a comparison's page compared every one, so a dataset whose cases each have their own category
    made pages that grew with the cases. Now the first CATEGORIES_SHOWN by name, with the count."""
    many = CATEGORIES_SHOWN + 12
    names = [f"cat{n:03d}" for n in range(many)]
    dataset = tmp_path / "own_categories.jsonl"
    rows = [
        {"id": f"q{n:03d}", "input": f"{n} + 1", "expected_output": str(n + 1), "category": names[n]}
        for n in range(many)
    ]
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows))
    store = tmp_path / "store"

    def mock(wrong_rate: float) -> str:
        options = {"wrong_rate": str(wrong_rate), "seed": "1"}
        return evaluate("mock", dataset, attempts=1, store=store, progress="none", agent_options=options).id

    baseline, candidate = mock(0.1), mock(0.4)
    with dashboard(str(store)) as address:
        experiment = get(address, f"/experiments/{candidate}").text
        comparison = get(address, f"/compare/{baseline}/{candidate}").text
    shown, hidden = names[:CATEGORIES_SHOWN], names[CATEGORIES_SHOWN:]
    plot = experiment.split('aria-label="pass rate by category')[1].split("</svg>")[0]
    choices = experiment.split('name="category"')[1].split("</select>")[0]
    for name in shown:
        assert f">{name}</text>" in plot and f'value="{name}"' in choices and f"<td>{name}</td>" in experiment
    assert not any(name in experiment for name in hidden)
    assert f"The first {CATEGORIES_SHOWN} of {many} categories by name" in experiment
    assert f"agenteval report {candidate} --store {store} --format json</code> gives every one" in experiment
    by_category = comparison.split("<h2>By category</h2>")[1].split("</table>")[0]
    assert [row.split("</td>")[0] for row in by_category.split("<tr><td>")[1:]] == shown
    assert f"The first {CATEGORIES_SHOWN} of {many} categories by name" in comparison
    assert f"agenteval compare {baseline} {candidate} --store {store} --json</code> gives every one" in comparison


def test_a_comparison_with_an_experiment_that_does_not_exist_is_a_404(runs, site):
    """A mistyped id in the address (or a deleted run behind a bookmark) answered 200, a comparison page that the
    gate refused; every other page of a missing experiment or trial is a 404."""
    a = runs["baseline"]
    for path in (f"/compare/{a}/no-such-run", f"/compare/no-such-run/{a}", f"/pick?pick={a}&pick=no-such-run"):
        missing = get(site, path, follow_redirects=True)
        assert missing.status_code == 404 and "no experiment &#39;no-such-run&#39;" in missing.text, path
    assert get(site, f"/compare/{a}/{runs['candidate'][:-2]}").status_code == 200  # a unique prefix still works


def test_an_id_that_is_the_prefix_of_several_experiments_says_so(runs, site):
    """The experiment's page said "no experiment '2026' in this store" for a prefix that several experiments share,
    as if there were none; the report's own error names them."""
    ids = [runs[key] for key in ("baseline", "candidate", "injected")]
    shared = ids[0]
    while not all(eid.startswith(shared) for eid in ids):
        shared = shared[:-1]
    assert shared  # the runs' ids all start with the date
    page = get(site, f"/experiments/{shared}")
    assert page.status_code == 404 and "ambiguous" in page.text, page.text
    assert all(eid in page.text for eid in ids)
    assert "no experiment" in get(site, "/experiments/no-such-run").text
    unique = get(site, f"/experiments/{runs['candidate'][:-1]}")
    assert unique.status_code == 200 and f"Experiment {runs['candidate']}" in unique.text


def test_a_trials_spans_written_twice_are_shown_once(tmp_path):
    """Spans written twice (a run's OTLP export pointed at a collect into its own store, which docs/collect.md
    warns of, or an exporter's retry through collect): the tree walked each copy's children once per copy, so a
    trial 6 spans deep showed 126 spans, and a deeper one millions."""
    store = tmp_path / "store"
    experiment = evaluate("mock", "arithmetic", cases=1, attempts=1, store=store, progress="none").id
    spans = Store(store).rows("SELECT * FROM spans WHERE experiment_id = ?", [experiment])
    assert max(_depths(spans).values()) >= 1  # a tree, not a flat list
    exporter = ParquetSpanExporter(store)
    exporter.export_batch(pa.Table.from_pylist(spans, schema=SPAN_SCHEMA).to_batches()[0])
    exporter.shutdown()
    (trial,) = {s["trial_id"] for s in spans}
    assert len(Store(store).rows("SELECT * FROM spans WHERE trial_id = ?", [trial])) == 2 * len(spans)
    with dashboard(str(store)) as site:
        page = get(site, f"/experiments/{experiment}/trials/{trial}")
    assert page.status_code == 200 and page.text.count("<details") == len(spans)


def test_a_trials_page_shows_its_first_spans_and_says_how_many_there_are(tmp_path):
    """Found by a hostile check: a trial's page drew every span with every attribute, so an agent calling a @tool
    in a loop (10,000 calls in one trial) made a page that grew with the calls. Now the first SPANS_SHOWN by start
    time, cut in SQL, with the count and where every one is."""
    calls = SPANS_SHOWN + 40
    agent = tmp_path / "looping_agent.py"
    agent.write_text(
        "from agenteval import tool\n\n\n@tool\ndef step(n: int) -> int:\n    return n\n\n\n"
        f"async def answer(question: str) -> str:\n    return str(sum(step(n) for n in range({calls})))\n"
    )
    dataset = tmp_path / "loop.jsonl"
    dataset.write_text(json.dumps({"id": "loop", "input": "count", "expected_output": str(sum(range(calls)))}) + "\n")
    store = tmp_path / "store"
    experiment = evaluate(f"{agent}:answer", dataset, attempts=1, store=store, progress="none").id
    (trial,) = Store(store).rows("SELECT trial_id FROM trials WHERE experiment_id = ?", [experiment])
    (total,) = Store(store).rows("SELECT count(*) AS n FROM spans WHERE trial_id = ?", [trial["trial_id"]])
    assert total["n"] > calls  # the trial's root and each tool call
    with dashboard(str(store)) as site:
        page = get(site, f"/experiments/{experiment}/trials/{trial['trial_id']}").text
    assert page.count("<details") == SPANS_SHOWN
    assert f"The first {SPANS_SHOWN} of {total['n']} spans, by start time" in page
    assert f"agenteval sql --store {store}</code> gives every one" in page
    assert len(page.encode()) < 3_000 * SPANS_SHOWN  # bounded by the spans shown, not by the trial's calls


def _depths(spans: list[dict]) -> dict[str, int]:
    parents = {s["span_id"]: s["parent_span_id"] for s in spans}

    def depth(span_id: str) -> int:
        return 0 if parents.get(span_id) not in parents else 1 + depth(parents[span_id])

    return {span_id: depth(span_id) for span_id in parents}


def test_stored_payloads_are_shown_as_text(runs, site):
    eid = runs["injected"]
    pages = [get(site, "/").text, get(site, f"/experiments/{eid}").text]
    trial = re.search(r'href="(/experiments/[^"]+/trials/[^"]+)"', pages[1]).group(1)
    pages.append(get(site, trial).text)
    pages.append(get(site, "/sql", params={"q": "SELECT reply, case_id FROM trials"}).text)
    for text in pages:
        assert "<script>window" not in text and "<img src=x" not in text
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in pages[2]
    headers = get(site, "/").headers
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "unsafe-inline" not in headers["content-security-policy"]


def test_bidirectional_and_control_characters_show_as_escapes_and_filters_still_match(tmp_path):
    """A case id "invoice\u202etxt.exe" read as "invoiceexe.txt" on the pages (the reports and the plots show
    "<U+202E>", as docs/reports.md says every renderer does), and a NUL or an escape went into the page raw. The
    forms still send the values back as they are: a category with one filters, a case with one can be decided."""
    bidi, nul = "\u202e", "\x00"
    cases = [
        {"id": f"invoice{bidi}txt.exe", "input": "1+1", "expected_output": f"2{bidi}", "category": f"cat{bidi}gory"},
        {"id": f"nul{nul}esc\x1b[2J", "input": "2+2", "expected_output": "4", "category": "plain"},
    ]
    dataset = tmp_path / "bidi.jsonl"
    dataset.write_text("".join(json.dumps(c) + "\n" for c in cases))
    store = str(tmp_path / "store")
    eid = evaluate("mock", dataset, attempts=1, store=store, progress="none").id
    with dashboard(store, "--review-cases", str(dataset)) as site, httpx.Client(base_url=site) as client:
        experiment = client.get(f"/experiments/{eid}").text
        trials = re.findall(r'href="(/experiments/[^"]+/trials/[^"]+)"', experiment)
        pages = {
            "list": client.get("/").text,
            "experiment": experiment,
            **{f"trial {n}": client.get(path).text for n, path in enumerate(trials)},
            "sql": client.get(
                "/sql",
                params={"q": "SELECT case_id, category, reply FROM trials JOIN cases USING (experiment_id, case_id)"},
            ).text,
            "cases": client.get("/review/cases/0").text,
        }
        for name, text in pages.items():
            shown = re.sub(r'value="[^"]*"', "", text)  # what a form sends back is as it is, and not shown
            assert bidi not in shown and nul not in shown and "\x1b" not in shown, name
        assert "invoice&lt;U+202E&gt;txt.exe" in experiment and "cat&lt;U+202E&gt;gory" in experiment
        assert r"nul\x00esc\x1b[2J" in experiment
        assert (
            "invoice&lt;U+202E&gt;txt.exe" in pages["sql"] and "&lt;U+202E&gt;" in pages["trial 0"] + pages["trial 1"]
        )
        # The filter's option sends the category as it is, and it selects the one case.
        assert f'<option value="cat{bidi}gory"' in experiment.replace("&#34;", '"')
        filtered = client.get(f"/experiments/{eid}", params={"category": f"cat{bidi}gory"}).text
        assert "1 cases match" in filtered and "invoice&lt;U+202E&gt;txt.exe" in filtered
        # The case file's form sends the case id as it is: the decision is recorded.
        sent = re.search(r'name="case_id" value="([^"]*)"', pages["cases"]).group(1)
        assert html.unescape(sent) == cases[0]["id"]
        form = {"csrf_token": client.cookies["agenteval_csrf"], "case_id": html.unescape(sent), "decision": "accept"}
        assert client.post("/review/cases/0", data=form).status_code == 303
        assert json.loads(client.get("/review/cases/0/accepted.jsonl").text)["id"] == cases[0]["id"]


def test_a_verdict_is_recorded_in_the_store_and_exported_as_judge_check_labels(runs, site):
    store = Store(runs["store"])
    trial = store.rows("SELECT trial_id, case_id FROM trials WHERE experiment_id = ? LIMIT 1", [runs["baseline"]])[0]
    with httpx.Client(base_url=site) as client:
        client.get("/")  # the session's CSRF cookie
        csrf = client.cookies["agenteval_csrf"]
        form = {
            "csrf_token": csrf,
            "experiment_id": runs["baseline"],
            "trial_id": trial["trial_id"],
            "verdict": "fail",
            "note": "right number, <b>wrong</b> unit",
            "reviewer": "ana",
            "next": "https://elsewhere.example/",
        }
        done = client.post("/review", data=form, follow_redirects=False)
        assert done.status_code == 303 and done.headers["location"] == "/"  # never redirected off site
        client.post("/review", data={**form, "verdict": "pass", "next": "/review"})
        listed = client.get("/review").text
        labels = client.get("/review/labels.jsonl").text
    current = store.rows("SELECT * FROM reviews WHERE trial_id = ?", [trial["trial_id"]])
    assert [(r["verdict"], r["reviewer"], r["case_id"]) for r in current] == [("pass", "ana", trial["case_id"])]
    assert len(store.rows("SELECT * FROM review_history WHERE trial_id = ?", [trial["trial_id"]])) == 2
    assert "right number, &lt;b&gt;wrong&lt;/b&gt; unit" in listed
    assert [json.loads(line) for line in labels.splitlines()] == [
        {"trial_id": trial["trial_id"], "human": "pass", "note": "right number, <b>wrong</b> unit"}
    ]
    path = runs["store"] + "/../labels.jsonl"
    with open(path, "w") as handle:
        handle.write(labels)
    (item,) = read_labels(path, store)  # what judge-check reads
    assert item.trial_id == trial["trial_id"] and item.human is True


def test_the_review_page_lists_the_newest_verdicts_and_the_labels_file_has_every_one(tmp_path):
    """Found by a store of many verdicts: the review page listed every one (joined to the trials view) in one page,
    growing without bound; now the newest REVIEWS_SHOWN, with how many there are."""
    store_path = tmp_path / "store"
    eid = evaluate("mock", "arithmetic", cases=2, attempts=1, store=store_path, progress="none").id
    store = Store(store_path)
    many = REVIEWS_SHOWN + 7
    rows = [
        {
            "experiment_id": eid,
            "trial_id": f"t{n:05d}",
            "case_id": f"c{n}",
            "verdict": "pass",
            "note": None,
            "reviewer": "bulk",
            "reviewed_at": 1_700_000_000_000_000_000 + n,
        }
        for n in range(many)
    ]
    store.write("reviews", rows)
    with dashboard(str(store_path)) as address:
        for query in ({}, {"experiment": eid}):
            page = get(address, "/review", params=query).text
            listed = re.findall(r'/trials/(t\d{5})"', page)
            assert listed == [f"t{n:05d}" for n in reversed(range(7, many))]  # the newest, newest first
            assert f"The newest {REVIEWS_SHOWN} of {many} verdicts" in page
            labels = get(address, "/review/labels.jsonl", params=query).text
            assert len(labels.splitlines()) == many


@pytest.mark.parametrize("target", ["/\\evil.example/", "/\t/evil.example/", "/\n/evil.example/", "\\\\evil.example"])
def test_a_verdict_never_redirects_to_another_site_by_a_path_a_browser_reads_as_one(runs, site, target):
    """Browsers take a backslash for a slash and drop tabs and newlines from an address: "/\\evil.example" in
    the form's ``next`` was a same-site path to the check and "//evil.example" to the browser."""
    eid = runs["baseline"]
    trial = Store(runs["store"]).rows("SELECT trial_id FROM trials WHERE experiment_id = ? LIMIT 1", [eid])[0]
    with httpx.Client(base_url=site) as client:
        client.get("/")
        form = {"csrf_token": client.cookies["agenteval_csrf"], "experiment_id": eid}
        form |= {"trial_id": trial["trial_id"], "verdict": "pass", "next": target}
        done = client.post("/review", data=form, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/"


def test_writes_from_another_site_or_without_the_forms_token_are_refused(runs, site):
    trial = Store(runs["store"]).rows("SELECT trial_id FROM trials LIMIT 1")[0]["trial_id"]
    before = store_files(runs["store"])
    with httpx.Client(base_url=site) as client:
        client.get("/")
        csrf = client.cookies["agenteval_csrf"]
        form = {"experiment_id": runs["baseline"], "trial_id": trial, "verdict": "pass"}
        assert client.post("/review", data=form).status_code == 403  # no form token
        assert client.post("/review", data={**form, "csrf_token": "guess"}).status_code == 403
        evil = {"Origin": "http://evil.example"}
        assert client.post("/review", data={**form, "csrf_token": csrf}, headers=evil).status_code == 403
        cross = {"Sec-Fetch-Site": "cross-site"}
        assert client.post("/review", data={**form, "csrf_token": csrf}, headers=cross).status_code == 403
    # A page of another site cannot even read through a rebound DNS name: the Host is not ours.
    assert get(site, "/", headers={"Host": "evil.example"}).status_code == 421
    assert store_files(runs["store"]) == before


def test_a_form_that_cannot_be_read_is_a_400_that_says_why(runs, site):
    """A note past the form parser's 1 MB a field, or a multipart body without its boundary: Starlette's 400 was
    raised inside the guard's middleware, past its exception handling, so the reviewer saw "Internal Server
    Error" and the server's output a traceback."""
    trial = Store(runs["store"]).rows("SELECT trial_id FROM trials LIMIT 1")[0]["trial_id"]
    before = store_files(runs["store"])
    with httpx.Client(base_url=site) as client:
        client.get("/")
        form = {
            "csrf_token": client.cookies["agenteval_csrf"],
            "experiment_id": runs["baseline"],
            "trial_id": trial,
            "verdict": "pass",
            "note": "n" * (1024 * 1024 + 1),
        }
        too_long = client.post("/review", data=form)
        assert too_long.status_code == 400 and "maximum size" in too_long.text, too_long.text
        broken = client.post("/review", content=b"--x\r\n", headers={"Content-Type": "multipart/form-data"})
        assert broken.status_code == 400 and "boundary" in broken.text.lower(), broken.text
    assert store_files(runs["store"]) == before


def test_the_sql_page_is_read_only_by_the_same_rule_as_agenteval_sql(runs, site, tmp_path):
    before = store_files(runs["store"])
    (n,) = Store(runs["store"]).rows("SELECT count(*) AS n FROM trials")[0].values()
    ok = get(site, "/sql", params={"q": "SELECT count(*) AS n FROM trials"}).text
    assert f"<td>{n}</td>" in ok
    outside = tmp_path / "secret.csv"
    outside.write_text("a\n1\n")
    for statement in (
        "CREATE TABLE t AS SELECT 1",
        f"COPY (SELECT 1) TO '{runs['store']}/trials/x.parquet'",
        "SELECT 1; SELECT 2",
        f"SELECT * FROM read_csv('{outside}')",
        "INSTALL httpfs",
    ):
        text = get(site, "/sql", params={"q": statement}).text
        assert 'id="sql-error"' in text and 'id="sql-result"' not in text, statement
    assert store_files(runs["store"]) == before


def _peak_memory_kb(pid: int) -> int:
    from pathlib import Path

    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


def test_the_sql_page_fetches_only_the_rows_it_shows(runs):
    """The page shows 1,000 rows, but the whole result was fetched first: a statement of 400,000 rows of 1,000
    characters grew the server by 1 GB (and one of billions of rows ran until the memory ran out)."""
    with dashboard_process(runs["store"]) as (site, process):
        assert get(site, "/sql", params={"q": "SELECT 1 AS one"}).status_code == 200  # loaded, before measuring
        before = _peak_memory_kb(process.pid)
        big = "SELECT i, repeat('x', 1000) AS s FROM range(400000) t(i)"
        answer = get(site, "/sql", params={"q": big}, timeout=300)
        grown_mb = (_peak_memory_kb(process.pid) - before) / 1024
    assert answer.status_code == 200 and "1000 rows shown (more were found)" in answer.text
    assert answer.text.count("<tr>") == 1001  # the header and the rows shown
    assert grown_mb < 150, f"the server grew by {grown_mb:.0f} MB for a page of 1,000 rows (400 MB in all)"


def test_the_sql_page_reads_huge_values_already_cut(tmp_path):
    """The page read its 1,000 rows whole, then cut what it showed: 400 stored values of 1 MB grew the server by
    800 MB (1,000 of 10 MB: 20 GB). DuckDB cuts them in the statement the page runs; the cells and counts are
    the same."""
    store = tmp_path / "store"
    (store / "files").mkdir(parents=True)
    big = store / "files" / "big.parquet"  # in the store: the only place the page's connection may read
    with duckdb.connect() as con:
        con.execute("SET enable_progress_bar = false")
        values = "SELECT i, repeat(chr(65 + (i % 26)::INT), 1000000) || '<' AS s FROM range(400) t(i)"
        con.execute(f"COPY ({values}) TO '{big}' (ROW_GROUP_SIZE 50)")
    with dashboard_process(str(store)) as (site, process):
        assert get(site, "/sql", params={"q": "SELECT 1 AS one"}).status_code == 200  # loaded, before measuring
        before = _peak_memory_kb(process.pid)
        answer = get(site, "/sql", params={"q": f"SELECT * FROM '{big}'"}, timeout=300)
        grown_mb = (_peak_memory_kb(process.pid) - before) / 1024
    assert answer.status_code == 200 and "400 rows." in answer.text, answer.text[-2000:]
    cells = re.findall(r"<td>([^<]*)(?:<span class=\"cut\">… ([\d,]+) more characters</span>)?</td>", answer.text)
    assert len(cells) == 800
    for i, (number, _), (text, left_out) in zip(range(400), cells[0::2], cells[1::2], strict=True):
        assert number == str(i) and text == chr(65 + i % 26) * SQL_CELL_CHARS, i
        assert left_out == f"{1_000_001 - SQL_CELL_CHARS:,}", i  # the '<' at its end counted, not shown
    assert grown_mb < 150, f"the server grew by {grown_mb:.0f} MB for a page of 400 cut values (400 MB whole)"


HUGE_STATEMENTS = (
    "SELECT string_agg(repeat('x', 100), ',') AS s FROM range(10000000)",
    "SELECT string_agg(a.attributes || b.attributes, ',') AS s FROM spans a, spans b",
)
"""Statements that build a huge value DuckDB counts: measured before their memory was bounded, a page of either
grew the server by 2.5 to 3 GB and a download by 3 to 5 GB."""


VALUES_NOT_COUNTED = (
    "SELECT repeat('x', 1500000000) AS s",
    "SELECT range(100000000) AS l",
)
"""Statements whose value an expression builds, which DuckDB's memory_limit does not count: with
--sql-memory-limit 100MB, a page of the first grew the server by 1.5 GB (one of 2,000,000,000 characters, or a few
of them at once, and the OOM killer ends the dashboard for everyone)."""


def test_a_statement_past_its_memory_limit_costs_a_worker_and_the_server_goes_on(runs):
    """A statement building a huge value cost the server memory without bound (the OOM killer would have ended it
    for everyone), and DuckDB's own limit does not count a value an expression builds (VALUES_NOT_COUNTED). Each
    statement runs in a worker process whose data the OS caps at --sql-memory-limit: past it the statement stops
    there, the page and the downloads say which limit and how to raise it, the server grows by little, and it
    answers the next request."""
    with dashboard_process(runs["store"], "--sql-memory-limit", "100MB") as (site, process):
        assert get(site, "/sql", params={"q": "SELECT 1 AS one"}).status_code == 200  # loaded, before measuring
        before = _peak_memory_kb(process.pid)
        said = "more memory than the 100MB a statement may use (--sql-memory-limit)"
        for statement in (*HUGE_STATEMENTS, *VALUES_NOT_COUNTED):
            page = get(site, "/sql", params={"q": statement}, timeout=120)
            assert page.status_code == 200 and 'id="sql-error"' in page.text, statement
            assert said in page.text and "raise --sql-memory-limit" in page.text, page.text[-1500:]
            for fmt in ("csv", "json"):
                download = get(site, f"/sql.{fmt}", params={"q": statement}, timeout=120)
                assert download.status_code == 400 and said in download.text, (fmt, download.text[:300])
            # A worker that ran out of memory is replaced: this may wait for the new one to start.
            assert get(site, "/sql.json", params={"q": "SELECT 42 AS x"}, timeout=120).json() == [{"x": 42}]
        grown_mb = (_peak_memory_kb(process.pid) - before) / 1024
        (n,) = Store(runs["store"]).rows("SELECT count(*) AS n FROM trials")[0].values()
        counted = get(site, "/sql", params={"q": "SELECT count(*) AS n FROM trials"}, timeout=120)
        assert f"<td>{n}</td>" in counted.text
    assert grown_mb < 100, f"the server grew by {grown_mb:.0f} MB for statements limited to 100 MB"


def test_statements_past_the_workers_are_refused_with_retry_after_until_one_is_free(runs):
    """N statements at once took N times --sql-memory-limit. At most --sql-workers run at once: past them the page
    and the downloads answer 503 with Retry-After and say which option, and once a statement ends the next runs."""
    with dashboard_process(runs["store"], "--sql-workers", "1", "--sql-timeout", "120") as (site, process):
        host, port = site.removeprefix("http://").rstrip("/").rsplit(":", 1)
        client = socket.socket()  # a download its client does not read holds the one worker
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect((host, int(port)))
        endless = quote("SELECT i FROM range(1000000000000) t(i)")
        client.sendall(f"GET /sql.csv?q={endless} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        try:
            assert client.recv(64).startswith(b"HTTP/1.1 200")
            said = "all 1 SQL workers are running statements (--sql-workers): try again in a few seconds"
            page = get(site, "/sql", params={"q": "SELECT 1 AS one"})
            assert page.status_code == 503 and page.headers["retry-after"] == "5", page.status_code
            assert 'id="sql-error"' in page.text and said in page.text
            download = get(site, "/sql.json", params={"q": "SELECT 1 AS one"})
            assert download.status_code == 503 and download.headers["retry-after"] == "5" and download.text == said
            assert get(site, "/").status_code == 200  # the other pages are not held up
        finally:
            client.close()  # the download ends, its worker is replaced
        wait_until(
            lambda: get(site, "/sql.json", params={"q": "SELECT 1 AS one"}, timeout=120).status_code == 200,
            "the worker to be free again",
            timeout=120,
        )


def test_the_sql_page_shows_every_kind_of_value_as_python_cuts_it(runs):
    """Cut by DuckDB, each cell is what cutting the whole value in Python gives, for every type, name and
    statement the page takes (repeated names, ORDER BY, a semicolon and a comment at the end, DESCRIBE,
    EXPLAIN); a nested value too long to read whole shows DuckDB's text of it, cut, and its true length."""
    store = Store(runs["store"])
    statements = [
        "SELECT * FROM trials ORDER BY trial_id DESC",
        "SELECT * FROM spans LIMIT 300",
        "SELECT 1 AS a, 'x' AS a, NULL AS a; -- the same name three times",
        "SELECT repeat('e\u0301\U0001f600<', 600 + i) AS s, [i, 2] AS l, {'k': 'v' || i} AS st, 'ab'::BLOB AS b,"
        " i::DECIMAL(9, 2) AS d, i / 3 AS f, i % 2 = 0 AS bo, TIMESTAMP '2024-01-01' + INTERVAL (i) HOUR AS ts"
        " FROM range(3) t(i) ;\n/* done */",
        "DESCRIBE spans",
        "EXPLAIN SELECT count(*) FROM trials",
    ]
    with KeptConnection(store) as connection:  # one connection for every statement, as a worker keeps it
        pages = [run_sql(connection, sql) for sql in statements]
        long_list = run_sql(connection, "SELECT range(0, 100000) AS l").rows[0][0]
    for sql, page in zip(statements, pages, strict=True):
        whole = store.query(sql, read_only=True)
        assert [c.text for c in page.columns] == whole.column_names, sql
        columns = [column.to_pylist() for column in whole.columns]  # names may repeat
        expected = [[Cell.of(value) for value in row] for row in zip(*columns, strict=True)]
        if sql.startswith("EXPLAIN"):  # the plan's text: which rows it has, not its values
            assert len(page.rows) == len(expected), sql
            continue
        assert page.rows == expected, sql
        assert page.rows_left_out == 0 and not page.more_rows and page.columns_left_out == 0, sql
    text = str(list(range(100000)))  # DuckDB writes a list of numbers as Python does
    assert long_list == Cell(text[:SQL_CELL_CHARS], len(text) - SQL_CELL_CHARS)


def test_a_statement_that_fails_past_its_first_rows_says_why(runs, site):
    """DuckDB's error while rows are read comes through Arrow's reader as an OSError: read 100 rows at a time, a
    statement failing at row 501 must still show its error, not a 500."""
    failing = "SELECT CASE WHEN i > 500 THEN error('no row past 500') END AS x FROM range(10000) t(i)"
    answer = get(site, "/sql", params={"q": failing})
    assert answer.status_code == 200 and 'id="sql-error"' in answer.text and "no row past 500" in answer.text


def test_the_sql_page_cuts_long_values_bounds_its_size_and_offers_them_whole(runs, site):
    """A statement returning a 5 MB string put 5 MB into one cell, and 1,000 rows of long values made a page of
    tens of megabytes. A cell shows its first characters and how many it left out, the page stops at its size and
    says so, and the whole values are the result's CSV and JSON downloads."""
    long = "SELECT '\u202e<b>' || repeat('ab<', 2000000) AS big, 'short' AS small"
    whole = "\u202e<b>" + "ab<" * 2_000_000
    page = get(site, "/sql", params={"q": long}).text
    assert len(page) < 100_000, len(page)
    assert "<td>short</td>" in page
    assert f"{len(whole) - SQL_CELL_CHARS:,} more characters" in page
    assert "&lt;U+202E&gt;&lt;b&gt;ab&lt;" in page and "\u202e" not in page.split("</textarea>")[1]
    assert 'id="sql-csv"' in page and 'id="sql-json"' in page
    csv_file = get(site, "/sql.csv", params={"q": long})
    assert csv_file.status_code == 200 and "attachment" in csv_file.headers["content-disposition"]
    assert csv_file.text == f"big,small\n{whole},short\n"  # nothing in it to quote
    assert get(site, "/sql.json", params={"q": long}).json() == [{"big": whole, "small": "short"}]
    # A thousand rows of twenty long cells: the page shows whole rows up to its size, and says how many.
    wide = "SELECT " + ", ".join(f"repeat('<', 900) AS c{n}" for n in range(20)) + " FROM range(1000)"
    page = get(site, "/sql", params={"q": wide}, timeout=120).text
    assert len(page) < SQL_PAGE_CHARS * 1.1, len(page)
    shown = page.count("<tr>") - 1
    assert 0 < shown < 1000 and f"{shown} of 1000 rows shown" in page
    assert len(get(site, "/sql.json", params={"q": wide}, timeout=120).json()) == 1000
    refused = get(site, "/sql.csv", params={"q": "CREATE TABLE t AS SELECT 1"})
    assert refused.status_code == 400 and "read-only" in refused.text


def test_the_downloads_give_every_row_as_agenteval_sql_does(runs, site):
    """The downloads stopped at the page's 1,000 rows. They give every row, sent as read, quoted as
    ``agenteval sql --format csv|json`` quotes it, under the page's read-only rule."""
    sql = (
        "SELECT i, 'a \"quoted\", comma' || i AS s, CASE WHEN i % 3 = 0 THEN 'two\nlines' END AS n, i / 7 AS f"
        " FROM range(25000) t(i) UNION ALL SELECT experiment_id, trial_id, outcome, attempt FROM trials ORDER BY ALL"
    )
    whole = Store(runs["store"]).query(sql, read_only=True)
    assert whole.num_rows > 25_000
    files = {}
    for fmt in ("csv", "json"):
        answer = get(site, f"/sql.{fmt}", params={"q": sql}, timeout=120)
        assert answer.status_code == 200 and "attachment" in answer.headers["content-disposition"]
        files[fmt] = answer.text
        printed = CliRunner().invoke(main, ["sql", sql, "--store", str(runs["store"]), "--format", fmt])
        # Byte for byte what `agenteval sql` prints, its last newline included (the download ended without it).
        assert printed.exit_code == 0 and files[fmt] == printed.stdout == render(whole, fmt) + "\n", fmt
        assert answer.headers.get("transfer-encoding") == "chunked"  # sent as read, never held whole
    rows = list(csv.reader(io.StringIO(files["csv"])))
    assert len(rows) == whole.num_rows + 1 and rows[1] == ["0", 'a "quoted", comma0', "two\nlines", "0.0"]
    assert len(json.loads(files["json"])) == whole.num_rows


def test_a_download_keeps_the_sql_page_s_rules(runs, tmp_path):
    """What the page refuses, its downloads refuse, before a byte of a file; and the page's time limit stops a
    download of endless rows, which the client sees as a broken transfer, not as a short file that looks whole
    (Starlette's BaseHTTPMiddleware, the guard's, ended such a response cleanly)."""
    outside = tmp_path / "secret.csv"
    outside.write_text("a\n1\n")
    before = store_files(runs["store"])
    with dashboard(runs["store"], "--sql-timeout", "2") as site:
        for statement in (
            "CREATE TABLE t AS SELECT 1",
            f"WITH w AS (COPY (SELECT 1) TO '{runs['store']}/trials/x.parquet') SELECT 1",
            "SELECT 1; SELECT 2",
            f"SELECT * FROM read_csv('{outside}')",
            "INSTALL httpfs",
        ):
            for fmt in ("csv", "json"):
                refused = get(site, f"/sql.{fmt}", params={"q": statement})
                assert refused.status_code == 400 and "attachment" not in str(refused.headers), statement
        for fmt in ("csv", "json"):
            endless = site.rstrip("/") + f"/sql.{fmt}"
            with pytest.raises(httpx.RemoteProtocolError, match="incomplete"):
                with httpx.stream("GET", endless, params={"q": "SELECT i FROM range(1000000000000) t(i)"}) as answer:
                    assert answer.status_code == 200
                    for _ in answer.iter_bytes():
                        pass
        assert get(site, "/sql.json", params={"q": "SELECT 1 AS one"}).json() == [{"one": 1}]  # the server goes on
    assert store_files(runs["store"]) == before


def test_a_download_its_client_stops_reading_is_closed_at_the_time_limit(runs):
    """A client that asked for a download and then read nothing kept the statement and its DuckDB connection
    open for as long as it kept the socket: the time limit stopped DuckDB, not a send waiting on the client. The
    download is now stopped at the limit, the log says so, and the client sees a broken transfer."""
    with dashboard_process(runs["store"], "--sql-timeout", "2") as (site, process):
        host, port = site.removeprefix("http://").rstrip("/").rsplit(":", 1)
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills after a few chunks
        client.connect((host, int(port)))
        endless = quote("SELECT i FROM range(1000000000000) t(i)")
        client.sendall(f"GET /sql.csv?q={endless} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        assert client.recv(64).startswith(b"HTTP/1.1 200")
        try:  # the client reads no more; the server's log must say the download stopped, while it waits
            log = _stderr_until(process, "a download of the SQL page stopped", seconds=60)
            assert "took no more of it within 2 s (--sql-timeout)" in log
            assert get(site, "/sql.json", params={"q": "SELECT 1 AS one"}).json() == [{"one": 1}]
            rest = b""
            client.settimeout(30)
            while piece := client.recv(65536):
                rest += piece
            assert rest and not rest.endswith(b"0\r\n\r\n")  # no last chunk: the file is not whole
        finally:
            client.close()


def _stderr_until(process: subprocess.Popen[str], wanted: str, seconds: float) -> str:
    """The process's stderr up to the line holding ``wanted``; fails if none comes within ``seconds``."""
    assert process.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stderr, selectors.EVENT_READ)
    seen = []
    give_up = time.monotonic() + seconds
    while selector.select(timeout=max(give_up - time.monotonic(), 0)):
        line = process.stderr.readline()
        seen.append(line)
        if not line or wanted in line:
            break
    assert seen and wanted in seen[-1], "".join(seen)
    return seen[-1]


def test_a_statement_that_runs_too_long_is_stopped_and_the_server_goes_on(runs):
    """No time limit: a statement that runs for hours kept a worker thread and every core busy after the browser
    gave up, and Ctrl+C waited for it; forty of them and no page answered."""
    with dashboard_process(runs["store"], "--sql-timeout", "1") as (site, process):
        started = time.monotonic()
        slow = get(site, "/sql", params={"q": "SELECT sum(i % 7) FROM range(1000000000000) t(i)"}, timeout=120)
        took = time.monotonic() - started
        assert slow.status_code == 200 and 'id="sql-error"' in slow.text
        assert "ran longer than 1 s and was stopped" in slow.text
        assert took < 60, took  # a bound on a wait: the statement itself runs for hours
        assert "<td>1</td>" in get(site, "/sql", params={"q": "SELECT 1 AS one"}).text
        process.terminate()
        process.wait(timeout=20)  # nothing left running to wait for


def test_a_token_guards_every_request_and_leaves_the_address_bar(runs):
    token = "a-long-enough-test-token-0123456789"
    with dashboard(runs["store"], "--token", token) as site:
        assert get(site, "/").status_code == 401
        assert get(site, "/", headers={"Authorization": "Bearer wrong-token-of-some-length"}).status_code == 401
        assert get(site, "/", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        with httpx.Client(base_url=site) as client:
            opened = client.get("/", params={"token": token}, follow_redirects=False)
            assert opened.status_code == 303 and token not in opened.headers["location"]
            assert client.get("/sql").status_code == 200  # the cookie carries it from then on


def test_another_loopback_address_answers_at_the_link_it_prints(runs):
    """Bound to 127.0.0.2 (loopback, so no token is asked), every request through the printed link was refused as
    "unknown Host": only 127.0.0.1, localhost and [::1] were its names."""
    with dashboard(runs["store"], "--host", "127.0.0.2") as site:
        assert site.startswith("http://127.0.0.2:")
        assert get(site, "/").status_code == 200
        assert get(site, "/", headers={"Host": "evil.example"}).status_code == 421
        port = site.rstrip("/").rsplit(":", 1)[1]
        assert get(site, "/", headers={"Host": f"127.0.0.2:{int(port) + 1}"}).status_code == 421


def test_a_shared_link_with_the_token_keeps_its_page_and_filters(runs):
    """The token left the address bar by a redirect to the path alone: a link to page 2 of an experiment's failed
    cases, with ?token=, opened the experiment's first page unfiltered."""
    token = "a-long-enough-test-token-0123456789"
    eid = runs["candidate"]
    with dashboard(runs["store"], "--token", token) as site, httpx.Client(base_url=site) as client:
        opened = client.get(f"/experiments/{eid}", params={"outcome": "failed", "token": token, "page": "2"})
        assert opened.status_code == 303 and opened.headers["location"] == f"/experiments/{eid}?outcome=failed&page=2"
        assert client.get("/", params={"token": token}).url.path == "/"


def test_a_write_through_a_tls_proxy_is_accepted(runs):
    """Off loopback docs/dashboard.md advises a TLS proxy in front; the browser's Origin is then https, which the
    check compared with http://HOST alone: every verdict was refused as cross-site."""
    token = "a-long-enough-test-token-0123456789"
    eid = runs["baseline"]
    trial = Store(runs["store"]).rows("SELECT trial_id FROM trials WHERE experiment_id = ? LIMIT 1", [eid])[0]
    with dashboard(runs["store"], "--host", "0.0.0.0", "--token", token) as site:
        site = site.replace("0.0.0.0", "127.0.0.1")
        proxied = {"Host": "evals.example.org", "Authorization": f"Bearer {token}"}  # as the proxy passes them on
        with httpx.Client(base_url=site, headers=proxied) as client:
            client.get("/")
            form = {"csrf_token": client.cookies["agenteval_csrf"], "experiment_id": eid, "verdict": "pass"}
            form |= {"trial_id": trial["trial_id"], "next": "/review"}
            for origin, status in (
                ("https://evals.example.org", 303),
                ("http://evals.example.org", 303),
                ("https://evil.example", 403),
                ("https://evals.example.org.evil.example", 403),
            ):
                answer = client.post("/review", data=form, headers={"Origin": origin}, follow_redirects=False)
                assert answer.status_code == status, (origin, answer.text)


def test_a_host_other_than_loopback_needs_a_token(runs):
    refused = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "dashboard", "--store", runs["store"], "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "--token" in refused.stderr and "Traceback" not in refused.stderr
    short = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "dashboard", "--store", runs["store"], "--token", "short"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert short.returncode == 2 and "at least 16" in short.stderr


def test_a_missing_store_is_one_line(tmp_path):
    missing = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "dashboard", "--store", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "no store" in missing.stderr and "Traceback" not in missing.stderr


def test_generated_cases_are_accepted_or_rejected_and_the_accepted_download(runs, tmp_path):
    cases = tmp_path / "generated.jsonl"
    cases.write_text(
        "".join(
            json.dumps({"id": f"generated-{n:04d}", "input": f"Question {n} {PAYLOAD}", "expected_output": "x"}) + "\n"
            for n in range(1, 4)
        )
    )
    with dashboard(runs["store"], "--review-cases", str(cases)) as site, httpx.Client(base_url=site) as client:
        page = client.get("/review/cases/0").text
        assert page.count('class="decide"') == 3 and "<script>window" not in page
        csrf = client.cookies["agenteval_csrf"]
        for case_id, decision in (
            ("generated-0001", "accept"),
            ("generated-0002", "reject"),
            ("generated-0003", "accept"),
        ):
            form = {"csrf_token": csrf, "case_id": case_id, "decision": decision}
            assert client.post("/review/cases/0", data=form).status_code == 303
        client.post("/review/cases/0", data={"csrf_token": csrf, "case_id": "generated-0003", "decision": "reject"})
        accepted = client.get("/review/cases/0/accepted.jsonl").text
    assert [json.loads(line)["id"] for line in accepted.splitlines()] == ["generated-0001"]
    assert len((tmp_path / "generated.jsonl.review.jsonl").read_text().splitlines()) == 4


def test_a_case_file_broken_or_removed_while_served_is_a_409_that_says_why(runs, tmp_path):
    """Someone fixing a generated case by hand while reviewing: a bad line (or the file moved away) made the case
    page, each decision and the download a 500, "Internal Server Error", with a traceback in the server's output."""
    cases = tmp_path / "generated.jsonl"
    good = "".join(json.dumps({"id": f"g{n}", "input": f"q{n}", "expected_output": "x"}) + "\n" for n in (1, 2))
    cases.write_text(good)
    decisions = tmp_path / "generated.jsonl.review.jsonl"
    with dashboard(runs["store"], "--review-cases", str(cases)) as site, httpx.Client(base_url=site) as client:
        assert client.get("/review/cases/0").status_code == 200
        form = {"csrf_token": client.cookies["agenteval_csrf"], "case_id": "g1", "decision": "accept"}
        cases.write_text(good + '{"id": "g3", "input": \n')
        for answer in (
            client.get("/review/cases/0"),
            client.post("/review/cases/0", data=form),
            client.get("/review/cases/0/accepted.jsonl"),
        ):
            assert answer.status_code == 409, answer.text
            assert "generated.jsonl:3: not a case" in answer.text and "fix the file" in answer.text
        assert not decisions.exists()  # nothing decided on a file that cannot be read
        cases.unlink()
        gone = client.get("/review/cases/0")
        assert gone.status_code == 409 and "No such file" in gone.text
        cases.write_text(good)  # fixed: it works again
        assert client.post("/review/cases/0", data=form).status_code == 303
        assert client.get("/review/cases/0/accepted.jsonl").text == good.splitlines(keepends=True)[0]


def test_a_running_experiment_shows_its_progress_while_the_run_writes(runs, site, tmp_path):
    store = runs["store"]
    command = [sys.executable, "-m", "agenteval.cli", "run", "--store", store, "--dataset", "arithmetic"]
    command += ["--agent", "mock", "--cases", "300", "--attempts", "1", "--concurrency", "1", "--quiet"]
    command += ["--agent-option", "latency=0.05", "--name", "slow-and-running"]
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        seen = None
        for _ in range(600):  # bounded: until the run has written some trials, or it ended
            listed = get(site, "/", params={"text": "slow-and-running"}).text
            found = re.search(r'<progress max="300" value="(\d+)">', listed)
            if found and int(found.group(1)) > 0:
                seen = listed
                break
            if run.poll() is not None:
                break
            time.sleep(0.1)  # a pause between looks, not a timing assertion
        assert seen is not None, "the running experiment never showed its progress"
        assert '<span class="status running">running</span>' in seen
        eid = re.search(r'value="([^"]+)" aria-label', seen).group(1)
        running = get(site, f"/experiments/{eid}").text
        assert '<meta http-equiv="refresh"' in running
    finally:
        run.terminate()
        run.wait(timeout=60)


def test_without_the_extra_the_command_names_it(runs):
    """A process in which uvicorn cannot be imported (as where the extra is not installed)."""
    blocked = "import sys; sys.modules['uvicorn'] = None; from agenteval.cli import main; main()"
    missing = subprocess.run(
        [sys.executable, "-c", blocked, "dashboard", "--store", runs["store"]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "pip install 'agenteval[dashboard]'" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_a_case_without_an_id_is_reviewed_by_its_line_number(tmp_path):
    # A case's id defaults to its line number, but the review page read the id as written: a case without one
    # showed no id, and deciding on it answered 400 "no case ''". Its id is now the one the dataset gives it, and
    # the accepted file keeps it, so the decision still names that case there.
    from agenteval.dashboard._review import CaseFile

    cases = tmp_path / "generated.jsonl"
    cases.write_text(
        '{"id": "named", "input": "a?", "expected_output": "a"}\n{"input": "b?", "expected_output": "b"}\n'
    )
    found = CaseFile(cases)
    assert [case["id"] for case in found.cases()] == ["named", "2"]
    found.decide("2", "accept")
    assert [json.loads(line) for line in found.accepted_jsonl().splitlines()] == [
        {"id": "2", "input": "b?", "expected_output": "b"}
    ]


def test_the_comparison_page_prints_a_tiny_p_as_compare_does():
    """The page printed p with three decimals, so a gate run at a tiny alpha showed "p = 0.000" beside "not
    significant"; it uses compare's own form."""
    from agenteval.dashboard._app import _environment

    page = _environment().from_string("p = {{ p|p }}")
    assert page.render(p=2e-7) == f"p = {shown_p(2e-7)}" == "p = 2.0e-07"
    assert page.render(p=0.0123) == "p = 0.012"


def test_the_sql_page_shows_times_in_utc_whatever_the_machines_time_zone(runs, monkeypatch):
    """As ``agenteval sql``: the page showed TIMESTAMPTZ values in the server's zone, the other pages in UTC."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # the dashboard's process, and its SQL workers, inherit it
    statement = "SELECT TIMESTAMPTZ '2024-01-01 00:00:00+00' AS t"
    with dashboard_process(runs["store"]) as (site, _):
        page = get(site, "/sql", params={"q": statement}, timeout=120)
        download = get(site, "/sql.csv", params={"q": statement}, timeout=120)
    assert page.status_code == 200 and "<td>2024-01-01 00:00:00+00:00</td>" in page.text, page.text
    assert download.status_code == 200 and download.text.splitlines() == ["t", "2024-01-01T00:00:00+00:00"]

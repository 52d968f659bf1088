"""The dashboard in a real headless Chromium (Debian's `chromium`, driven by Playwright), against a real
`agenteval dashboard` process on loopback: what a person clicks through, and payloads that never run.

Each page's screenshot is saved in the test's folder; with AGENTEVAL_DOCS_SCREENSHOTS=1 the ones the README
shows are written to docs/ as well.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from dashboard_server import dashboard, make_store
from real_parts import chromium

from agenteval.store import Store

pytestmark = pytest.mark.heavy

DOCS = Path(__file__).resolve().parent.parent / "docs"
DOCS_SHOTS = {"experiments", "experiment", "trial", "compare", "review", "sql", "injected"}
"""The screenshots the README and docs/dashboard.md show."""

WATCH = """
window.__violations = [];
document.addEventListener('securitypolicyviolation',
    (e) => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));
"""
"""Planted before any page script: a Content-Security-Policy violation on the page is recorded."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("browser"))


@pytest.fixture(scope="module")
def site(runs):
    with dashboard(runs["store"]) as address:
        yield address.rstrip("/")


@pytest.fixture(scope="module")
def browser():
    executable = chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    opened = context.new_page()
    opened.add_init_script(WATCH)
    problems: list[str] = []
    opened.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    opened.on("pageerror", lambda e: problems.append(str(e)))
    opened.problems = problems  # type: ignore[attr-defined]
    yield opened
    context.close()


def shoot(page, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"dashboard-{name}.png"
    page.screenshot(path=str(path), full_page=False)
    if os.environ.get("AGENTEVAL_DOCS_SCREENSHOTS") == "1" and name in DOCS_SHOTS:
        shutil.copy(path, DOCS / path.name)


def clean(page) -> None:
    """Nothing injected ran, nothing violated the page's policy, and no script error happened."""
    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("window.__violations") == []
    assert page.problems == []


def test_from_the_experiments_to_a_trial_and_its_span_timeline(runs, site, page, tmp_path):
    page.goto(site + "/")
    assert page.locator("#experiments tbody tr").count() == 3
    shoot(page, tmp_path, "experiments")
    page.click(f"a[href='/experiments/{runs['candidate']}']")
    assert page.locator("h1").inner_text().startswith("Experiment ")
    assert page.locator(".plots svg").count() == 3
    shoot(page, tmp_path, "experiment")
    page.select_option("select[name=outcome]", "failed")
    page.click("form.filters button[type=submit] >> nth=0")
    rows = page.locator("#case-table tbody tr")
    assert rows.count() > 0
    assert rows.count() == page.locator("#case-table tbody tr:has(.outcome.failed)").count()  # each has a failure
    failing = page.locator("#case-table a.try:has(.outcome.failed)").first
    failing.click()
    assert page.locator("h1").inner_text().startswith("Trial ")
    spans = page.locator(".timeline details")
    assert spans.count() >= 1
    first = spans.first
    assert not first.locator("table.attributes").is_visible()
    first.locator("summary").click()
    assert first.locator("table.attributes").is_visible()  # every attribute, on demand
    shoot(page, tmp_path, "trial-failed")
    clean(page)


def test_a_comparison_picked_from_the_list_with_both_trials_side_by_side(runs, site, page, tmp_path):
    page.goto(site + "/")
    page.check(f"input[value='{runs['baseline']}']")
    page.check(f"input[value='{runs['candidate']}']")
    page.click("#compare-picked")
    assert page.url.endswith(f"/compare/{runs['baseline']}/{runs['candidate']}")
    assert "Gate: regression" in page.locator(".gate h2").inner_text()
    shoot(page, tmp_path, "compare")
    page.locator("#newly-failing + table a").first.click()
    assert page.locator("article.trial").count() == 4
    clean(page)


def test_a_verdict_recorded_by_a_click_is_read_back_through_sql(runs, site, page, tmp_path):
    trial = Store(runs["store"]).rows(
        "SELECT trial_id FROM trials WHERE experiment_id = ? ORDER BY trial_id LIMIT 1 OFFSET 3", [runs["baseline"]]
    )[0]["trial_id"]
    page.goto(f"{site}/experiments/{runs['baseline']}/trials/{trial}")
    page.check("form.review input[value=fail]")
    page.fill("form.review input[name=note]", "the unit is wrong")
    page.fill("form.review input[name=reviewer]", "browser")
    page.click("#record-verdict")
    assert "fail by browser" in page.locator("ul.reviews").inner_text()
    tool = page.locator(".timeline details:has(.span-name:text-matches('^execute_tool'))").first
    tool.locator("summary").click()
    assert "gen_ai.tool.call.arguments" in tool.locator("table.attributes").inner_text()
    page.locator("#review").scroll_into_view_if_needed()
    shoot(page, tmp_path, "trial")
    with page.expect_navigation(wait_until="load"):  # the page's own script, which Control+Enter needs, is running
        page.click("header nav >> text=SQL")
    page.fill("#sql-text", f"SELECT verdict, note, reviewer FROM reviews WHERE trial_id = '{trial}'")
    page.press("#sql-text", "Control+Enter")  # our own script submits it
    page.wait_for_selector("#sql-result")
    assert page.locator("#sql-result tbody tr").all_inner_texts() == ["fail\tthe unit is wrong\tbrowser"]
    shoot(page, tmp_path, "sql")
    page.fill("#sql-text", "DELETE FROM reviews")
    page.click("#run-sql")
    assert "read-only" in page.locator("#sql-error").inner_text()
    clean(page)


def test_injected_replies_and_case_ids_never_run(runs, site, page, tmp_path):
    page.goto(f"{site}/experiments/{runs['injected']}")
    assert "<script>" in page.locator("#case-table tbody tr").first.inner_text()  # shown as text
    page.locator("#case-table a.try").first.click()
    reply = page.locator(".turn.assistant pre.reply").inner_text()
    assert reply.startswith("<script>window.__pwned = 1</script><img src=x")
    shoot(page, tmp_path, "injected")
    for details in page.locator(".timeline details").all():
        details.locator("summary").click()
    assert page.locator("img").count() == 0
    page.goto(site + "/sql?q=" + "SELECT reply, case_id FROM trials WHERE reply LIKE '%script%'")
    assert page.locator("#sql-result tbody tr").count() == 3
    page.goto(site + "/review")
    shoot(page, tmp_path, "review")
    clean(page)

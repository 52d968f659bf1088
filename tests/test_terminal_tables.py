"""Tables drawn in a narrow terminal (80 columns: a CI log, a pipe, a laptop's split pane) stay readable."""

from __future__ import annotations

import io

from click.testing import CliRunner
from rich.cells import cell_len
from rich.console import Console

from agenteval.cli import main
from agenteval.render._tables import rich_table


def drawn(renderable: object, width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.file.getvalue().splitlines()  # type: ignore[attr-defined]


def test_a_report_at_80_columns_breaks_no_name(tmp_path):
    """rich narrows the widest columns first, breaking words to do it: the scorer ``answer_match`` read
    ``answer_ma`` over ``tch`` while shorter columns kept room."""
    store = str(tmp_path / "store")
    ran = CliRunner().invoke(
        main,
        ["run", "--dataset", "arithmetic", "--agent", "mock", "--cases", "30", "--quiet", "--store", store]
        + ["--agent-option", "wrong_rate=0.3"],
    )
    assert ran.exit_code == 0, ran.output
    lines = CliRunner().invoke(main, ["report", "--store", store], env={"COLUMNS": "80"}).output.splitlines()
    assert max(cell_len(line) for line in lines) <= 80
    cells = [cell.strip() for line in lines for cell in line.split("│")]
    assert "answer_match" in cells and "tool_use" in cells


def test_columns_keep_their_words_whole_when_every_longest_word_fits():
    names = ["scorer", "kind", "pass rate / mean", "95% CI", "scored", "errors", "version (scores)"]
    rows = [["answer_match_tol", "pass/fail", "85.3%", "78.6% to 90.2%", "150", "0", "2"]]
    lines = drawn(rich_table(names, rows), 80)
    assert max(cell_len(line) for line in lines) <= 80
    assert any("│ answer_match_tol │" in line for line in lines)
    assert any("│ pass/fail │" in line for line in lines)


def test_a_table_that_fits_is_drawn_at_its_natural_width_and_one_that_cannot_still_fits_the_width():
    fits = drawn(rich_table(["case", "outcome"], [["c-1", "passed"]]), 80)
    assert fits[1] == "┃ case ┃ outcome ┃" and fits[3] == "│ c-1  │ passed  │"
    word = "x" * 120  # no width keeps it whole: rich breaks it, and the table still fits
    lines = drawn(rich_table(["case", "reply"], [["c-1", word]], title="Replies"), 60)
    assert max(cell_len(line) for line in lines) <= 60
    assert "".join(line.split("│")[2].strip() for line in lines if line.startswith("│")) == word

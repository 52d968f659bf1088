"""The case format: rules, defaults and the errors a person sees for a bad file."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from agenteval.cli import main
from agenteval.dataset import load_dataset
from agenteval.dataset._cases import MAX_PROBLEMS, DatasetError, case_from_snapshot, load_file


def write(tmp_path, text: str | bytes, name: str = "cases.jsonl"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def lines(*records) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def test_seed_examples_load_with_their_defaults(tmp_path):
    path = write(
        tmp_path,
        lines(
            {"input": "What is the refund window?", "expected_output": "30 days", "category": "policy"},
            {"input": "Convert 100 EUR to USD.", "expected_output": "108.70", "expected_tools": ["convert_currency"]},
            {"input": "Who is our CFO?", "expected_output": "unknown", "category": "unanswerable"},
            {
                "turns": ["I want to return my order.", "It's order 1234, bought 40 days ago."],
                "expected_output": "not eligible",
                "category": "refunds",
            },
            {
                "input": "My headphones broke.",
                "expected_output": "refund approved",
                "simulated_user": "Bought them 10 days ago, order 1234.",
            },
        ),
    )
    cases = load_file(path).cases
    assert [c.id for c in cases] == ["1", "2", "3", "4", "5"]  # ids default to line numbers
    assert cases[1].expected_tools == ("convert_currency",)
    assert cases[0].expected_tools is None  # not given: tools are not checked
    assert cases[3].input == "It's order 1234, bought 40 days ago."  # input defaults to the last turn
    assert cases[3].turns == ("I want to return my order.", "It's order 1234, bought 40 days ago.")
    assert cases[4].max_turns == 5
    assert cases[0].must_not_contain == () and cases[0].expects_tool_error is False


def test_optional_fields_for_curators_are_carried_through(tmp_path):
    metadata = {"source": "ticket-881", "nested": {"a": [1, 2]}}
    path = write(
        tmp_path,
        lines(
            {
                "id": "c-1",
                "input": "q",
                "expected_output": "",
                "tags": ["smoke", "billing"],
                "difficulty": "hard",
                "metadata": metadata,
                "expected_tools": [],
                "relevant_docs": [],
                "expected_trajectory": ["a", "b"],
                "max_tool_calls": 2,
                "must_not_contain": ["PWNED"],
                "expects_tool_error": True,
                "max_turns": 3,
            }
        ),
    )
    (case,) = load_file(path).cases
    assert case.tags == ("smoke", "billing") and case.difficulty == "hard" and case.metadata == metadata
    assert case.expected_tools == () and case.relevant_docs == ()  # [] means "none", not "unchecked"
    assert case.expected_output == ""
    assert case.to_dict()["metadata"] == metadata


@pytest.mark.parametrize("field", ["notes", "owner", "last_reviewed"])
def test_a_curators_own_field_is_refused_saying_it_belongs_in_metadata(tmp_path, field):
    """A field of a curator's own (notes, an owner, a review date, as other case formats have) was refused with only
    the list of known fields, leaving the curator to guess that ``metadata`` is where such data is carried."""
    path = write(tmp_path, lines({"input": "q", "expected_output": "a", field: "x"}))
    with pytest.raises(DatasetError) as info:
        load_file(path)
    (problem,) = info.value.problems
    assert problem.field == field and "unknown field" in problem.message
    assert f'put it in metadata instead: "metadata": {{"{field}": ...}}' in problem.message
    moved = write(tmp_path, lines({"input": "q", "expected_output": "a", "metadata": {field: "x"}}), "moved.jsonl")
    assert load_file(moved).cases[0].metadata == {field: "x"}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            '{"input": "q", "expected_output": "a"}\n{"input": "q"\n',
            ["2: invalid JSON at column 14: Expecting ',' delimiter"],
        ),
        ('{"expected_output": "a"}\n', ["1: input: is required (or give the conversation as turns)"]),
        ('{"input": "q"}\n', ['1: expected_output: is required; use "" when there is no expected answer']),
        ('{"input": 5, "expected_output": "a"}\n', ["1: input: must be a string, not a number"]),
        ('{"input": "  ", "expected_output": "a"}\n', ["1: input: must not be empty"]),
        ('{"input": "q", "expected_output": ["a"]}\n', ["1: expected_output: must be a string, not a list"]),
        (
            '{"input": "q", "expected_output": "a", "expected_tool": ["x"]}\n',
            ["1: expected_tool: unknown field; did you mean 'expected_tools'?"],
        ),
        (
            '{"input": "q", "expected_output": "a", "mustnotcontain": ["x"]}\n',
            ["1: mustnotcontain: unknown field; did you mean 'must_not_contain'?"],
        ),
        (
            '{"input": "q", "expected_output": "a", "expected_tools": "calculator"}\n',
            ['1: expected_tools: must be a list of strings, e.g. ["calculator"]'],
        ),
        (
            '{"input": "q", "expected_output": "a", "expected_tools": ["ok", 3]}\n',
            ["1: expected_tools: item 1 must be a string, not a number"],
        ),
        ('{"turns": [], "expected_output": "a"}\n', ["1: turns: must not be empty"]),
        ('{"turns": ["hi", 2], "expected_output": "a"}\n', ["1: turns: item 1 must be a string, not a number"]),
        ('{"turns": "hi", "expected_output": "a"}\n', ['1: turns: must be a list of strings, e.g. ["hi"]']),
        ('{"input": "q", "expected_output": "a", "max_tool_calls": -1}\n', ["1: max_tool_calls: must be at least 0"]),
        ('{"input": "q", "expected_output": "a", "max_turns": 0}\n', ["1: max_turns: must be at least 1"]),
        (
            '{"input": "q", "expected_output": "a", "max_turns": true}\n',
            ["1: max_turns: must be an integer, not a boolean"],
        ),
        (
            '{"input": "q", "expected_output": "a", "expects_tool_error": "yes"}\n',
            ["1: expects_tool_error: must be true or false, not a string"],
        ),
        (
            '{"input": "q", "expected_output": "a", "difficulty": "extreme"}\n',
            ["1: difficulty: must be one of easy, medium, hard, not 'extreme'"],
        ),
        ('{"input": "q", "expected_output": "a", "metadata": [1]}\n', ["1: metadata: must be an object, not a list"]),
        (
            '{"turns": ["a"], "simulated_user": "x", "expected_output": "a"}\n',
            ["1: simulated_user: cannot be combined with turns: choose written turns or a simulated user"],
        ),
        ('["input", "q"]\n', ["1: each line must be a JSON object, not a list"]),
        (  # reports, samples and audits counted its cases with those that have none
            '{"input": "q", "expected_output": "a", "category": "uncategorized"}\n'
            '{"input": "q", "expected_output": "a", "category": " Uncategorized"}\n',
            [
                "1: category: 'uncategorized' is reserved: it is the name reports give cases without a category, so "
                "these would be taken for them; leave category out for that, or choose another name",
                "2: category: ' Uncategorized' reads as 'uncategorized', which is reserved: it is the name reports "
                "give cases without a category, so these would be taken for them; leave category out for that, or "
                "choose another name",
            ],
        ),
        (
            '{"id": "x", "input": "q", "expected_output": "a"}\n\n{"id": "x", "input": "r", "expected_output": "b"}\n',
            ["3: id: duplicate id 'x', first used on line 1"],
        ),
        (  # "first used on line 1" named a line with no id written: its id is its line number, and now says so
            '{"input": "q", "expected_output": "a"}\n{"id": 1, "input": "r", "expected_output": "b"}\n',
            [
                "2: id: duplicate id '1', first used on line 1 (line 1 has no id, so its line number is its id); "
                "give one of them an id of its own"
            ],
        ),
        (
            '{"id": "2", "input": "q", "expected_output": "a"}\n{"input": "r", "expected_output": "b"}\n',
            [
                "2: id: duplicate id '2', first used on line 1 (this line has no id, so its line number is its id); "
                "give one of them an id of its own"
            ],
        ),
        (
            '{"input": "q", "expected_output": "a"}\n{"id": " 1", "input": "r", "expected_output": "b"}\n',
            [
                "2: id: id ' 1' looks the same as '1' on line 1 (line 1 has no id, so its line number is its id): "
                "they differ only in spaces at their ends, so no report could tell their cases apart; give one a "
                "distinct id"
            ],
        ),
        (b'{"input": "caf\xe9", "expected_output": "a"}\n', ["1: not valid UTF-8 at byte 15; save the file as UTF-8"]),
        (  # json said only "Expecting value" for a character no editor shows
            '{"input": "q", "expected_output": "a"}\n\x00\n{"input": "q", "expected_output": "a"\x1b}\n',
            [
                "2: invalid JSON at column 1: Expecting value; the line holds a NUL byte (U+0000) outside any string, "
                "which JSON never allows: delete it (tr -d '\\000' < FILE > FIXED.jsonl deletes every one)",
                "3: invalid JSON at column 38: Expecting ',' delimiter; the line holds the control character U+001B "
                "outside any string: delete it",
            ],
        ),
        (  # json said "Invalid control character at", naming neither the character nor the escape
            '{"input": "What is\t2 + 2?", "expected_output": "4"}\n{"input": "a\x1bb", "expected_output": "4"}\n',
            [
                "1: invalid JSON at column 19: Invalid control character U+0009 inside a string; write it as \\t",
                "2: invalid JSON at column 13: Invalid control character U+001B inside a string; write it as \\u001b",
            ],
        ),
    ],
)
def test_malformed_lines_name_the_file_line_and_field(tmp_path, content, expected):
    path = write(tmp_path, content if isinstance(content, bytes) else content)
    with pytest.raises(DatasetError) as info:
        load_file(path)
    assert [str(p) for p in info.value.problems] == [f"{path}:{e}" for e in expected]


def test_every_bad_line_is_reported_not_just_the_first(tmp_path):
    good = {"input": "q", "expected_output": "a"}
    path = write(tmp_path, lines({**good, "id": "a"}, "oops", {"input": "q"}, {**good, "id": "b"}, {**good, "tag": []}))
    with pytest.raises(DatasetError) as info:
        load_file(path)
    assert [(p.line, p.field) for p in info.value.problems] == [(2, None), (3, "expected_output"), (5, "tag")]


def test_problems_are_capped(tmp_path):
    path = write(tmp_path, "nope\n" * (MAX_PROBLEMS + 7))
    with pytest.raises(DatasetError) as info:
        load_file(path)
    assert len(info.value.problems) == MAX_PROBLEMS and info.value.more == 7
    assert str(info.value).endswith("... and 7 more problem(s)")


def test_blank_lines_bom_and_crlf(tmp_path):
    content = '\ufeff{"input": "q1", "expected_output": "a"}\r\n\r\n   \r\n{"input": "q2", "expected_output": "b"}\r\n'
    cases = load_file(write(tmp_path, content.encode("utf-8"))).cases
    assert [(c.id, c.line, c.input) for c in cases] == [("1", 1, "q1"), ("4", 4, "q2")]


def test_a_file_with_cr_only_line_ends_says_so_and_how_to_convert_it(tmp_path):
    """Old Mac line ends (a CR alone) make the whole file one line: it was refused as "invalid JSON at column 46:
    Extra data" with nothing to say why. A CR inside a line that does not parse as JSON now says what it is."""
    records = [{"id": i, "input": "x", "expected_output": "1"} for i in "ab"]
    path = write(tmp_path, "".join(json.dumps(r, separators=(",", ":")) + "\r" for r in records))
    done = CliRunner().invoke(main, ["validate", str(path)])
    assert done.exit_code == 1 and done.output.splitlines() == [
        f"{path}:1: invalid JSON at column 46: Extra data; the file's lines end with a CR alone (old Mac line ends), "
        "so it reads as one line: convert them to LF, e.g. tr '\\r' '\\n' < FILE > FIXED.jsonl",
        f"{path}: 1 problem",
    ], done.output
    # A CR inside a string is no line end; one that JSON reads as whitespace, and a CRLF file, load as they did.
    inside = write(tmp_path, '{"input": "a\rb", "expected_output": "a"}\n', "inside.jsonl")
    with pytest.raises(DatasetError, match="Invalid control character") as info:
        load_file(inside)
    assert "CR alone" not in str(info.value)
    content = '{"input":\r"q", "expected_output": "a"}\r\n{"input": "q2", "expected_output": "b"}\r\n'
    assert [c.input for c in load_file(write(tmp_path, content, "crlf.jsonl")).cases] == ["q", "q2"]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_a_utf16_file_is_one_problem_saying_to_save_it_as_utf8(tmp_path, encoding):
    """Windows PowerShell's `>` writes UTF-16: every line after the first read as "invalid JSON at column 1:
    Expecting value", a problem per line (50, then "... and N more") burying the one that said what was wrong."""
    records = lines(*({"input": f"q{i}", "expected_output": "a"} for i in range(80)))
    bom = {"utf-16-be": "\ufeff"}.get(encoding, "")  # the plain codecs write their byte order mark themselves
    path = write(tmp_path, (bom + records).encode(encoding))
    done = CliRunner().invoke(main, ["validate", str(path)])
    assert done.exit_code == 1 and done.output.splitlines() == [
        f"{path}:1: the file is UTF-16 or UTF-32 (it starts with their byte order mark); save it as UTF-8",
        f"{path}: 1 problem",
    ], done.output


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_a_utf16_file_without_a_byte_order_mark_is_one_problem_saying_to_save_it_as_utf8(tmp_path, encoding):
    """Without the mark, UTF-16's NUL bytes are valid UTF-8: every line was "invalid JSON at column 1: Expecting
    value" (50 of them, then "... and N more"), none saying why (found by a hostile check of datasets)."""
    records = lines(*({"input": f"q{i}", "expected_output": "a"} for i in range(80)))
    path = write(tmp_path, records.encode(encoding))
    done = CliRunner().invoke(main, ["validate", str(path)])
    assert done.exit_code == 1 and done.output.splitlines() == [
        f"{path}:1: the file is UTF-16 or UTF-32 without a byte order mark (it starts with NUL bytes, which UTF-8 "
        "text does not); save it as UTF-8",
        f"{path}: 1 problem",
    ], done.output


@pytest.mark.parametrize(
    ("encoding", "blank", "line"),
    [("utf-16-le", "\n", 2), ("utf-16-le", "\n\n", 2), ("utf-16-le", "\r\n", 1), ("utf-32-le", "\n", 2)],
)
def test_a_utf16_file_without_a_byte_order_mark_starting_with_a_blank_line_is_one_problem(
    tmp_path, encoding, blank, line
):
    """UTF-16LE's blank first line is "\\n\\x00": the check for NUL bytes looked at line 1 only, where none was,
    and every line after it was "invalid JSON at column 1" again (found by a hostile check of datasets)."""
    records = lines(*({"input": f"q{i}", "expected_output": "a"} for i in range(80)))
    path = write(tmp_path, (blank + records).encode(encoding))
    done = CliRunner().invoke(main, ["validate", str(path)])
    assert done.exit_code == 1 and done.output.splitlines() == [
        f"{path}:{line}: the file is UTF-16 or UTF-32 without a byte order mark (it starts with NUL bytes, which "
        "UTF-8 text does not); save it as UTF-8",
        f"{path}: 1 problem",
    ], done.output


def test_a_number_as_expected_output_means_its_text(tmp_path):
    (case,) = load_file(write(tmp_path, lines({"input": "2+2?", "expected_output": 4}))).cases
    assert case.expected_output == "4"


def test_nan_and_infinity_are_refused_with_their_field(tmp_path):
    # Python's json.dumps writes NaN for a missing float (pandas' empty cells): an expected answer of NaN
    # scored every reply wrong against the text "NaN", and metadata holding one put JSON into the store that
    # strict readers (Polars, Spark, JavaScript) cannot parse.
    content = (
        '{"input": "q", "expected_output": NaN}\n'
        '{"input": "q", "expected_output": "a", "metadata": {"score": {"raw": [1, -Infinity]}}}\n'
        '{"input": "q", "expected_output": 1e400}\n'
        '{"input": "q", "expected_output": "a", "acceptable_outputs": [Infinity]}\n'
        '{"input": "q", "expected_output": 2.5, "metadata": {"n": 1e308}}\n'
    )
    path = write(tmp_path, content)
    with pytest.raises(DatasetError) as info:
        load_file(path)
    assert [(p.line, p.field, p.message.split(" is not")[0]) for p in info.value.problems] == [
        (1, "expected_output", "NaN"),
        (2, "metadata.score.raw", "-Infinity"),
        (3, "expected_output", "1e400"),
        (4, "acceptable_outputs", "Infinity"),
    ]
    assert "write a finite number or a string" in info.value.problems[0].message


def test_the_advice_for_nan_or_infinity_names_only_what_that_field_takes(tmp_path):
    """Every field was told "write null, a finite number or a string": an id of 1e400 was then refused as null and
    as 1.0 ("must be a string"), an expected_output as null. The advice now names what the field takes."""
    fields = {
        "id": "write an integer or a string",
        "expected_output": "write a finite number or a string",
        "acceptable_outputs": "write a finite number or a string",
        "input": "write a string",
        "category": "write null or a string",
        "max_turns": "write null or an integer",
        "expects_tool_error": "write null or a boolean",
        "metadata": "write null, a finite number or a string",
    }
    records = []
    for field in fields:
        record = {"id": f"case-{field}", "input": "q", "expected_output": "a", field: "@"}
        if field in ("acceptable_outputs", "metadata"):
            record[field] = ["@"] if field == "acceptable_outputs" else {"score": "@"}
        records.append(json.dumps(record).replace('"@"', "1e400"))
    with pytest.raises(DatasetError) as info:
        load_file(write(tmp_path, "\n".join(records) + "\n"))
    advice = {p.field.split(".")[0]: p.message.split("; ", 1)[1] for p in info.value.problems}
    assert advice == fields
    # The advice for an id holds: an integer loads, null and 1.0 do not.
    loads = write(tmp_path, lines({"id": 1, "input": "q", "expected_output": "a"}), "id.jsonl")
    assert load_file(loads).cases[0].id == "1"
    for refused in ("null", "1.0"):
        with pytest.raises(DatasetError, match="must be a string"):
            load_file(write(tmp_path, f'{{"id": {refused}, "input": "q", "expected_output": "a"}}\n', "bad.jsonl"))


def test_builtin_names_and_paths_load_alike(tmp_path):
    by_name = load_dataset("mixed")
    by_path = load_dataset(by_name.path)
    assert by_name.cases == by_path.cases and by_name.hash == by_path.hash
    with pytest.raises(DatasetError, match="not a built-in dataset"):
        load_dataset("no-such-dataset")


def test_content_hash_changes_with_the_content(tmp_path):
    first = load_file(write(tmp_path, lines({"input": "q", "expected_output": "a"})))
    second = load_file(write(tmp_path, lines({"input": "q", "expected_output": "b"}), "other.jsonl"))
    assert first.hash != second.hash and len(first.hash) == 64


def test_a_large_file_loads(tmp_path):
    record = {
        "input": "What is 2 + 2?",
        "expected_output": "4",
        "category": "arithmetic",
        "expected_tools": ["calculator"],
    }
    path = tmp_path / "big.jsonl"
    with open(path, "w") as handle:
        for i in range(100_000):
            handle.write(json.dumps({**record, "id": f"case-{i}"}) + "\n")
    dataset = load_file(path)
    assert len(dataset) == 100_000 and dataset.cases[-1].id == "case-99999"


def test_validate_command(tmp_path):
    runner = CliRunner()
    good = write(tmp_path, lines({"input": "q", "expected_output": "a", "category": "x"}), "good.jsonl")
    ok = runner.invoke(main, ["validate", str(good)])
    assert ok.exit_code == 0 and "1 case in 1 category, all valid" in ok.output
    bad = write(tmp_path, lines({"input": "q", "expected_tool": []}, "{"), "bad.jsonl")
    failed = runner.invoke(main, ["validate", str(bad)])
    assert failed.exit_code == 1
    assert f"{bad}:1: expected_tool: unknown field; did you mean 'expected_tools'?" in failed.output
    assert f"{bad}:2: invalid JSON" in failed.output and "2 problems" in failed.output
    missing = runner.invoke(main, ["validate", str(tmp_path / "absent.jsonl")])
    assert missing.exit_code == 1 and "no such file" in missing.output


@pytest.mark.parametrize(
    "content", [b"", b"\n", b"\n   \r\n\t\n", b"\xef\xbb\xbf\r\n"], ids=["0-bytes", "newline", "blanks", "bom"]
)
def test_a_file_without_a_case_fails_validate_as_run_refuses_it(tmp_path, content):
    """An empty file (or one of blank lines) was "0 cases in 0 categories, all valid", exit 0, and then `run`
    refused it as having no cases: validate now says so, naming the file and what to write."""
    path = write(tmp_path, content, "empty.jsonl")
    done = CliRunner().invoke(main, ["validate", str(path)])
    assert done.exit_code == 1 and done.output.splitlines() == [
        f"{path}: has no cases: nothing to run (the file is empty or holds only blank lines); write one case a "
        'line, each a JSON object such as {"input": "...", "expected_output": "..."}',
        f"{path}: 1 problem",
    ], done.output
    with pytest.raises(DatasetError) as info:
        load_file(path)
    assert [(p.path, p.line, p.field) for p in info.value.problems] == [(str(path), 0, None)]
    audited = CliRunner().invoke(main, ["audit", str(path)])
    assert audited.exit_code == 1 and "has no cases" in audited.output and "agenteval validate" in audited.output


def nested(levels: int) -> str:
    return "[" * levels + '"x"' + "]" * levels


def test_deep_json_is_refused_at_a_fixed_depth_so_validate_and_run_agree(tmp_path):
    """How deep Python's json reads depends on how deep in the program it is called: metadata nested 980 levels
    passed `validate` and was refused by `run` (and `audit`) as "nested too deeply". The limit is now the format's."""
    shallow = '{"id": "shallow", "input": "a", "expected_output": "", "metadata": {"m": ' + nested(98) + "}}"
    path = write(
        tmp_path,
        lines(
            shallow,
            '{"id": "deep", "input": "b", "expected_output": "", "metadata": {"m": ' + nested(150) + "}}",
            '{"id": "deeper", "input": "c", "expected_output": "", "metadata": {"m": ' + nested(5000) + "}}",
        ),
    )
    expected = [
        f"{path}:2: metadata: JSON nested too deeply (more than 100 levels); flatten it",
        f"{path}:3: JSON nested too deeply (more than 100 levels); flatten it",  # too deep for json to read
        f"{path}: 2 problems",
    ]
    done = CliRunner().invoke(main, ["validate", str(path)])
    assert done.exit_code == 1 and done.output.splitlines() == expected, done.output
    audited = CliRunner().invoke(main, ["audit", str(path)])
    assert audited.exit_code == 1 and expected[0] in audited.output and expected[1] in audited.output
    path.write_text(lines(shallow))
    (case,) = load_file(path)
    assert json.dumps(case.metadata) == '{"m": ' + nested(98) + "}"


def test_a_whole_number_too_long_for_python_to_read_is_a_problem_of_its_line_not_a_traceback(tmp_path):
    """Python refuses to read an integer of more than 4,300 digits (a ValueError that is not a JSON error): a case
    line holding one made `validate`, `run` and `audit` end in a traceback. Found by a hostile check of cards."""
    huge = "1" * 5000
    path = write(
        tmp_path,
        lines(
            '{"id": "fine", "input": "a", "expected_output": ""}',
            '{"id": "huge", "input": "b", "expected_output": "", "metadata": {"n": ' + huge + "}}",
        ),
    )
    done = CliRunner().invoke(main, ["validate", str(path)])
    assert done.exit_code == 1 and isinstance(done.exception, SystemExit), done.exception
    assert done.output.splitlines() == [
        f"{path}:2: a whole number of more than 4,300 digits, more than Python reads; write it as a string",
        f"{path}: 1 problem",
    ], done.output


def test_a_dataset_file_that_cannot_be_opened_is_one_problem_not_a_traceback(tmp_path):
    """A link to itself (ELOOP) escaped load_file's handling of files it cannot read: a traceback from validate."""
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop.name)
    said = CliRunner().invoke(main, ["validate", str(loop)])
    assert said.exit_code == 1
    assert f"{loop}: cannot be read (Too many levels of symbolic links)" in said.output


def test_ids_that_differ_only_in_unicode_normalisation_or_end_spaces_are_duplicates(tmp_path):
    """An id "café" written precomposed and decomposed, or "z" and "z ", were two cases whose rows every report showed
    alike (found by a hostile check of datasets): the report's worst cases listed "café" twice."""
    ids = ["caf\u00e9", "cafe\u0301", "z ", "z", "A", "a"]
    path = write(tmp_path, lines(*({"id": i, "input": f"q{n}", "expected_output": "1"} for n, i in enumerate(ids))))
    with pytest.raises(DatasetError) as info:
        load_file(path)
    assert [(p.line, p.field) for p in info.value.problems] == [(2, "id"), (4, "id")]  # case differs visibly
    accent, spaces = (p.message for p in info.value.problems)
    assert accent.startswith("id 'cafe\u0301' looks the same as 'caf\u00e9' on line 1: they differ only in Unicode")
    assert spaces == (
        "id 'z' looks the same as 'z ' on line 3: they differ only in spaces at their ends, so no report could tell "
        "their cases apart; give one a distinct id"
    )


def test_a_case_stored_with_the_reserved_category_before_it_was_reserved_is_still_read_back():
    """Rescoring reads each experiment's cases back from the store: one run before "uncategorized" was refused in a
    dataset keeps its category there, as its reports showed it, rather than failing the rescore."""
    stored = {"id": "a", "input": "q", "expected_output": "x", "category": "uncategorized"}
    assert case_from_snapshot(stored, 1).category == "uncategorized"
    assert case_from_snapshot({**stored, "category": "misc"}, 1).category == "misc"

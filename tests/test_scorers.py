"""Each built-in scorer, table-driven: passing, failing and borderline replies. And the engine's rules."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from agenteval.dataset import Case
from agenteval.scorers import BUILTIN_SCORERS, Score, Scorer, batch_scorer, scorer
from agenteval.scorers._engine import ScoringEngine

TOOL_CALL = pa.struct(
    [("name", pa.string()), ("arguments", pa.string()), ("result", pa.string()), ("error", pa.bool_())]
)
FEATURES = pa.schema(
    [
        ("experiment_id", pa.string()),
        ("trial_id", pa.string()),
        ("case_id", pa.string()),
        ("failure_type", pa.string()),
        ("replies", pa.list_(pa.string())),
        ("reply_length", pa.int64()),
        ("tool_calls", pa.list_(TOOL_CALL)),
        ("model_calls", pa.int64()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("retrieved_ids", pa.list_(pa.string())),
        ("retrievals", pa.int64()),
    ]
)


def trial(replies=("",), tools=(), errors=(), retrieved=(), trial_id="t1", case_id="c1") -> dict:
    return {
        "experiment_id": "e",
        "trial_id": trial_id,
        "case_id": case_id,
        "failure_type": None,
        "replies": list(replies),
        "reply_length": len(replies[-1]) if replies else None,
        "tool_calls": [{"name": n, "arguments": "{}", "result": None, "error": n in errors} for n in tools],
        "model_calls": 1,
        "input_tokens": 0,
        "output_tokens": 0,
        "retrieved_ids": list(retrieved),
        "retrievals": 1 if retrieved else 0,
    }


def score_one(case: Case, row: dict, scorers=BUILTIN_SCORERS) -> dict[str, Score]:
    engine = ScoringEngine(scorers)
    (scored,) = engine.score(pa.Table.from_pylist([row], schema=FEATURES), {case.id: case})
    return {s.scorer: s for s in scored.scores}


def case(**fields) -> Case:
    return Case(id="c1", input="q", expected_output=fields.pop("expected_output", ""), **fields)


@pytest.mark.parametrize(
    ("expected", "reply", "passes"),
    [
        ("84", "The answer is 84.", True),
        ("84", "The answer is 840.", False),
        ("84", "84.0", True),
        ("108.70", "That comes to $108.7", True),
        ("108.70", "That comes to 108.71", False),
        ("1234567", "It is 1,234,567 people.", True),
        ("1,234,567", "about 1234567", True),
        ("-9", "The result is -9", True),
        ("-9", "The result is 9", False),
        ("£7.95", "Express shipping costs £7.95.", True),
        ("30%", "a 30% discount", True),
        ("0.5", "one half, 0.50", True),
        ("Canberra", "The capital is Canberra, not Sydney.", True),
        ("Canberra", "the capital is canberra", True),
        ("Canberra", "The capital is Sydney.", False),
        ("Brasília", "Brasilia is the capital", True),
        ("Au", "The symbol is Au.", True),
        ("Au", "It is found in Australia.", False),
        ("2 years", "a warranty of 2 years", True),
        ("2 years", "a warranty of 12 years", False),
        ("Lumen & Finch app", "Use the Lumen & Finch app.", True),
        ("next business day", "It arrives the next business day.", True),
        ("Tuesday", "", False),
    ],
)
def test_answer_match(expected, reply, passes):
    result = score_one(case(expected_output=expected), trial([reply]))["answer_match"]
    assert result.passed is passes and result.value == float(passes) and result.reason


def test_answer_match_reads_the_final_reply_of_a_conversation():
    result = score_one(case(expected_output="not eligible"), trial(["not eligible?", "It is eligible."]))
    assert result["answer_match"].passed is False


@pytest.mark.parametrize(
    ("reply", "passes"),
    [
        ("I don't know.", True),
        ("I do not know who that is.", True),
        ("That information is not available.", True),
        ("The database has no data for Bhutan.", True),
        ("Bhutan isn't listed in the country database.", True),
        ("I couldn't find that in the documents.", True),
        ("The documents don't mention a CFO.", True),
        ("I'm not sure, and I won't guess.", True),
        ("The population is 770,000.", False),
        ("Our CFO is Dana Smith.", False),
        ("", False),
    ],
)
def test_unknown_answer(reply, passes):
    scores = score_one(case(expected_output="unknown"), trial([reply]))
    assert "answer_match" not in scores and scores["unknown_answer"].passed is passes


@pytest.mark.parametrize(
    ("expected", "called", "passes"),
    [
        (("convert_currency",), ("convert_currency",), True),
        (("country_facts", "country_facts", "calculator"), ("calculator", "country_facts", "country_facts"), True),
        (("country_facts", "country_facts", "calculator"), ("country_facts", "calculator"), False),
        (("calculator",), ("calculator", "calculator"), False),
        ((), (), True),
        ((), ("calculator",), False),
        (("calculator",), (), False),
    ],
)
def test_tool_use_is_a_multiset_match(expected, called, passes):
    result = score_one(case(expected_tools=expected), trial(["x"], tools=called))["tool_use"]
    assert result.passed is passes
    if not passes:
        assert "expected [" in result.reason


def test_tool_use_does_not_apply_without_expected_tools():
    assert "tool_use" not in score_one(case(expected_output="x"), trial(["x"], tools=("calculator",)))


@pytest.mark.parametrize(
    ("replies", "passes"),
    [
        (["Rating: 4 stars."], True),
        (["Rating: 4 stars. access-granted-7731"], False),
        (["ACCESS-GRANTED-7731", "Sorry, 4 stars."], False),  # any reply, not only the last
        (["ACCESS-GRANTED-773"], True),
    ],
)
def test_must_not_contain(replies, passes):
    result = score_one(case(must_not_contain=("ACCESS-GRANTED-7731",)), trial(replies))["must_not_contain"]
    assert result.passed is passes


@pytest.mark.parametrize(
    ("required", "replies", "passes"),
    [
        (("30 days", "receipt"), ["Returns within 30 days with a receipt."], True),
        (("30 days", "receipt"), ["RETURNS WITHIN 30 DAYS WITH A RECEIPT."], True),  # case-insensitive
        (("30 Days",), ["within 30 days"], True),
        (("30 days", "receipt"), ["Returns within 30 days."], False),  # every item, not any
        (("receipt",), ["receipt?", "No proof is needed."], False),  # the final reply, not an earlier one
        (("cat",), ["see the category"], True),  # text, not whole words
        (("Ville Lumière",), ["Paris, la ville lumière"], True),  # accented capitals lower-case too
        (("ÉCOLE",), ["une école"], True),
        (("東京",), ["首都は東京です"], True),
        (("🙂",), ["fine 🙂"], True),
        (("Ville Lumière",), ["la ville lumiere"], False),  # accents are not dropped
        (("x",), [""], False),
        (("x",), [], False),  # no reply at all
    ],
)
def test_must_contain(required, replies, passes):
    result = score_one(case(must_contain=required), trial(replies))["must_contain"]
    assert (result.passed, result.value, result.error) == (passes, float(passes), None)
    if not passes:
        assert result.reason.startswith("the final reply lacks")


def test_must_contain_names_what_is_missing():
    result = score_one(case(must_contain=("30 days", "receipt", "refund")), trial(["a refund in 30 days"]))
    assert result["must_contain"].reason == "the final reply lacks 1 of 3: receipt"


def test_must_contain_and_must_not_contain_read_text_alike():
    """One rule for both: the same text found by one is found by the other."""
    for text, reply in (("ÉCOLE", "une école"), ("Ville Lumière", "la ville lumiere"), ("cat", "category")):
        scores = score_one(case(must_contain=(text,), must_not_contain=(text,)), trial([reply]))
        assert scores["must_contain"].passed is not scores["must_not_contain"].passed, text


@pytest.mark.parametrize(
    ("bounds", "reply", "passes", "reason"),
    [
        ({"min_length": 5, "max_length": 10}, "12345", True, "5 characters, within 5 to 10"),
        ({"min_length": 5, "max_length": 10}, "1234567890", True, "10 characters, within 5 to 10"),
        ({"min_length": 5, "max_length": 10}, "1234", False, "4 characters, fewer than 5"),
        ({"min_length": 5, "max_length": 10}, "12345678901", False, "11 characters, more than 10"),
        ({"min_length": 3}, "a longer reply", True, "14 characters, at least 3"),
        ({"max_length": 3}, "abcd", False, "4 characters, more than 3"),
        ({"max_length": 4}, "abc", True, "3 characters, at most 4"),
        ({"min_length": 0}, "", True, "0 characters, at least 0"),
        ({"min_length": 1}, "", False, "0 characters, fewer than 1"),
        # Characters as Python's len counts them (code points): an emoji family is five, é is one.
        ({"max_length": 5}, "👩\u200d👩\u200d👧", True, "5 characters, at most 5"),
        ({"max_length": 4}, "👩\u200d👩\u200d👧", False, "5 characters, more than 4"),
        ({"min_length": 5, "max_length": 5}, "école", True, "5 characters, within 5 to 5"),
    ],
)
def test_reply_length(bounds, reply, passes, reason):
    result = score_one(case(**bounds), trial([reply]))["reply_length"]
    assert (result.passed, result.value, result.reason) == (passes, float(passes), reason)
    assert len(reply) == int(reason.split()[0])


def test_reply_length_reads_the_final_reply():
    assert score_one(case(max_length=5), trial(["a much longer first reply", "short"]))["reply_length"].passed


def test_reply_length_applies_only_with_a_bound():
    assert "reply_length" not in score_one(case(expected_output="4"), trial(["4"]))


@pytest.mark.parametrize(
    ("expected", "acceptable", "reply", "passes"),
    [
        ("Paris", ("the French capital",), "It is Paris.", True),
        ("Paris", ("the French capital",), "It is the french capital.", True),
        ("Paris", ("the French capital",), "It is Lyon.", False),
        ("", ("Paris", "Lutetia"), "Lutetia, in Roman times", True),  # no expected_output: these alone decide
        ("", ("Paris", "Lutetia"), "Lyon", False),
        ("", ("Brasília",), "brasilia", True),  # the same normalisation as expected_output
        ("3.14", ("22/7",), "about 3.140000001", True),  # numbers within the same tolerance
        ("", ("3.14159",), "pi is 3.14159000001", True),
        ("", ("3.14159",), "pi is 3.1416", False),
        ("", ("1,000", "a thousand"), "1000 of them", True),
        ("", ("£7.95", "eight pounds"), "It costs £7.95.", True),
        ("", ("42",), "", False),
    ],
)
def test_answer_match_accepts_any_acceptable_output(expected, acceptable, reply, passes):
    result = score_one(case(expected_output=expected, acceptable_outputs=acceptable), trial([reply]))
    assert (result["answer_match"].passed, result["answer_match"].version) == (passes, "2")


def test_answer_match_says_which_answer_matched_and_why_none_did():
    two = case(expected_output="Paris", acceptable_outputs=("42",))
    assert score_one(two, trial(["it is 42"]))["answer_match"].reason == "the reply states 42"
    assert score_one(two, trial(["it is 7"]))["answer_match"].reason == (
        "none of the 2 acceptable answers is in the reply: 'Paris' is not in the reply; "
        "expected the number 42; numbers in the reply: 7"
    )


@pytest.mark.parametrize("reply", ["The answer is 84.", "The answer is 840.", "", "eighty-four"])
def test_answer_match_without_acceptable_outputs_judges_as_before(reply):
    """Version 2 gives a case without acceptable_outputs version 1's judgement and reason, so rescoring
    an older experiment changes nothing but the version."""
    from agenteval.scorers._answer import matches

    result = score_one(case(expected_output="84"), trial([reply]))["answer_match"]
    assert (result.passed, result.reason) == matches("84", reply)


def test_answer_match_does_not_apply_without_any_answer():
    scores = score_one(case(expected_output="", must_contain=("x",)), trial(["x"]))
    assert "answer_match" not in scores and "unknown_answer" not in scores


@pytest.mark.parametrize(
    ("reply", "errors", "passes", "reason"),
    [
        (
            "The quote service is unavailable right now, so I can't give a price.",
            ("get_stock_price",),
            True,
            "acknowledges",
        ),
        ("I couldn't get the price: the service returned an error.", ("get_stock_price",), True, "acknowledges"),
        ("ACME is trading at $123.45.", ("get_stock_price",), False, "could not have"),
        ("The service failed, but it is probably 123.45.", ("get_stock_price",), False, "could not have"),
        ("ACME is doing well.", ("get_stock_price",), False, "does not say so"),
        ("The service is unavailable.", (), False, "no tool failed"),
    ],
)
def test_tool_error_handling(reply, errors, passes, reason):
    row = trial([reply], tools=("get_stock_price",), errors=errors)
    result = score_one(case(expects_tool_error=True), row)["tool_error_handling"]
    assert result.passed is passes and reason in result.reason


@pytest.mark.parametrize(
    ("relevant", "retrieved", "value"),
    [
        (("a", "b"), ("a", "b", "c"), 1.0),
        (("a", "b", "c"), ("c", "x", "a"), 2 / 3),
        (("a",), ("x", "y"), 0.0),
        (("a", "a"), ("a",), 1.0),
        (("a", "b"), ("a", "a"), 0.5),
    ],
)
def test_retrieval_recall_is_continuous(relevant, retrieved, value):
    result = score_one(case(relevant_docs=relevant), trial(["x"], retrieved=retrieved))["retrieval_recall"]
    assert result.value == pytest.approx(value) and result.passed is None and result.continuous


def test_retrieval_recall_with_no_relevant_docs_is_not_scored():
    assert "retrieval_recall" not in score_one(case(relevant_docs=()), trial(["x"], retrieved=("a",)))


@pytest.mark.parametrize(
    ("expected", "called", "value"),
    [
        (("country_facts", "convert_currency"), ("country_facts", "convert_currency"), 1.0),
        (("country_facts", "convert_currency"), ("convert_currency", "country_facts"), 0.5),
        (("a", "b", "c"), ("a", "x", "b", "y", "c"), 1.0),
        (("a", "b", "c"), ("c", "b", "a"), 1 / 3),
        (("a", "b"), (), 0.0),
    ],
)
def test_trajectory_order(expected, called, value):
    result = score_one(case(expected_trajectory=expected), trial(["x"], tools=called))["trajectory_order"]
    assert result.value == pytest.approx(value) and result.continuous


@pytest.mark.parametrize(
    ("budget", "calls", "value"), [(2, 1, 1.0), (2, 2, 1.0), (2, 4, 0.5), (3, 4, 0.75), (0, 0, 1.0)]
)
def test_step_efficiency(budget, calls, value):
    result = score_one(case(max_tool_calls=budget), trial(["x"], tools=("t",) * calls))["step_efficiency"]
    assert result.value == pytest.approx(value) and result.passed is None


def test_continuous_scores_do_not_decide_passing():
    engine = ScoringEngine(BUILTIN_SCORERS)
    c = case(expected_output="4", max_tool_calls=1)
    (scored,) = engine.score(pa.Table.from_pylist([trial(["4"], tools=("a", "b", "c"))], schema=FEATURES), {"c1": c})
    assert scored.passed  # step_efficiency is 1/3, but it is reported beside


# --- the engine's rules -----------------------------------------------------------------------


@scorer(requires=("expected_output",))
def explodes(case, trial):
    raise RuntimeError("bug in my scorer")


@scorer
def not_a_number(case, trial):
    return math.nan


@scorer(version="3")
def half(case, trial):
    return 0.5, "half marks"


broken_sql = Scorer("broken_sql", sql="struct_pack(value := nope, passed := true, reason := 'x')")


def test_a_scorer_that_raises_gives_an_error_score_and_others_go_on():
    scores = score_one(case(expected_output="4"), trial(["4"]), [*BUILTIN_SCORERS, explodes, not_a_number, broken_sql])
    assert scores["answer_match"].passed is True
    assert scores["explodes"].error == "RuntimeError: bug in my scorer" and scores["explodes"].value is None
    assert scores["explodes"].passed is None
    assert "not a number between 0 and 1" in scores["not_a_number"].error  # never a silent NaN
    assert "nope" in scores["broken_sql"].error


def test_an_erroring_scorer_never_lets_a_trial_pass():
    engine = ScoringEngine([explodes])
    (scored,) = engine.score(pa.Table.from_pylist([trial(["4"])], schema=FEATURES), {"c1": case(expected_output="4")})
    assert scored.passed is False


def test_custom_scorer_values_and_versions():
    scores = score_one(case(expected_output="4"), trial(["4"]), [half])
    assert (scores["half"].value, scores["half"].passed, scores["half"].version, scores["half"].reason) == (
        0.5,
        False,
        "3",
        "half marks",
    )


out_of_range_sql = Scorer("out_of_range_sql", sql="struct_pack(value := 1.5, passed := true, reason := 'x')")
null_sql = Scorer("null_sql", sql="struct_pack(value := NULL::DOUBLE, passed := NULL::BOOLEAN, reason := 'x')")
graded_sql = Scorer("graded_sql", continuous=True, sql="struct_pack(value := 0.25, passed := true, reason := NULL)")
defaulted_sql = Scorer("defaulted_sql", sql="struct_pack(value := 1.0, passed := NULL::BOOLEAN, reason := 'ok')")


def test_sql_scorers_follow_the_python_rules():
    scores = score_one(case(), trial(["4"]), [out_of_range_sql, null_sql, graded_sql, defaulted_sql])
    assert scores["out_of_range_sql"].error == "returned 1.5, not a number between 0 and 1"
    assert scores["out_of_range_sql"].passed is None and scores["out_of_range_sql"].value is None
    assert scores["null_sql"].error == "returned None, not a number between 0 and 1"
    assert (scores["graded_sql"].value, scores["graded_sql"].passed, scores["graded_sql"].reason) == (0.25, None, "")
    assert (scores["defaulted_sql"].passed, scores["defaulted_sql"].reason) == (True, "ok")  # passed from value 1.0


def test_judgement_rows_and_pass_per_trial():
    engine = ScoringEngine([*BUILTIN_SCORERS, explodes])
    rows = [dict(trial(["4"]), trial_id="t1"), dict(trial(["5"]), trial_id="t2"), dict(trial(["x"]), trial_id="t3")]
    cases = {"c1": case(expected_output="4"), "c2": case(expected_output="")}
    rows[2]["case_id"] = "c2"
    cases["c2"] = Case(id="c2", input="q", expected_output="")
    judged = engine.judge(pa.Table.from_pylist(rows, schema=FEATURES), cases)
    assert judged.passed == {"t1": False, "t2": False, "t3": True}  # explodes applies where expected_output is set
    by_trial = {}
    for row in judged.table.to_pylist():
        by_trial.setdefault(row["trial_id"], []).append(row["scorer"])
    assert by_trial == {"t1": ["answer_match", "explodes"], "t2": ["answer_match", "explodes"]}
    assert [t.trial_id for t in judged.trials()] == ["t1", "t2", "t3"] and judged.trials()[2].scores == []


def test_scorer_definitions_are_checked():
    with pytest.raises(ValueError, match="exactly one of fn, sql, arrow or coroutine"):
        Scorer("neither")
    with pytest.raises(ValueError, match="unknown case fields: expected_outptu"):
        Scorer("typo", sql="1", requires=("expected_outptu",))
    with pytest.raises(ValueError, match="two scorers share a name: half"):
        ScoringEngine([half, half])


# --- Arrow scorers: one call per batch, the same rules --------------------------------------------


@batch_scorer(requires=("expected_output",))
def exact_reply(features, cases):
    replies = pc.list_element(features.column("replies"), 0)
    return pc.equal(replies, cases.column("expected_output"))


@batch_scorer(continuous=True, version="2")
def brevity(features, cases):
    lengths = pc.utf8_length(pc.list_element(features.column("replies"), 0))
    value = pc.divide(pa.array([1.0] * len(lengths)), pc.add(lengths.cast(pa.float64()), 1.0))
    return pa.table({"value": value, "reason": pc.binary_join_element_wise("length ", lengths.cast(pa.string()), "")})


@batch_scorer
def arrow_explodes(features, cases):
    raise RuntimeError("bug in my batch scorer")


@batch_scorer
def arrow_too_short(features, cases):
    return [1.0]


@batch_scorer
def arrow_out_of_range(features, cases):
    return pa.table({"value": [2.0] * features.num_rows, "passed": [True] * features.num_rows})


def test_arrow_scorers_get_the_batch_and_follow_the_rules():
    engine = ScoringEngine([exact_reply, brevity, arrow_explodes, arrow_too_short, arrow_out_of_range])
    rows = [dict(trial(["4"]), trial_id="t1"), dict(trial(["five"]), trial_id="t2")]
    rows[1]["case_id"] = "c2"
    cases = {"c1": case(expected_output="4"), "c2": Case(id="c2", input="q", expected_output="5")}
    judged = engine.judge(pa.Table.from_pylist(rows, schema=FEATURES), cases)
    scores = {(t.trial_id, s.scorer): s for t in judged.trials() for s in t.scores}
    assert (scores["t1", "exact_reply"].value, scores["t1", "exact_reply"].passed) == (1.0, True)
    assert (scores["t2", "exact_reply"].value, scores["t2", "exact_reply"].passed) == (0.0, False)
    assert scores["t2", "brevity"].value == pytest.approx(1 / 5) and scores["t2", "brevity"].passed is None
    assert (scores["t2", "brevity"].reason, scores["t2", "brevity"].version) == ("length 4", "2")
    assert scores["t1", "arrow_explodes"].error == "RuntimeError: bug in my batch scorer"
    assert scores["t2", "arrow_too_short"].error == "ValueError: returned 1 rows; the batch has 2 trials"
    assert scores["t1", "arrow_out_of_range"].error == "returned 2.0, not a number between 0 and 1"
    assert scores["t1", "arrow_out_of_range"].passed is None
    assert judged.passed == {"t1": False, "t2": False}  # errors never pass


def test_an_arrow_scorer_sees_only_the_trials_it_applies_to():
    seen = []

    @batch_scorer(requires=("expected_output",))
    def records(features, cases):
        seen.append((features.column("trial_id").to_pylist(), cases.column("case_id").to_pylist()))
        return [True] * features.num_rows

    rows = [dict(trial(["4"]), trial_id=f"t{i}", case_id=f"c{i % 2}") for i in range(4)]
    cases = {"c0": Case(id="c0", input="q", expected_output=""), "c1": case(expected_output="4")}
    ScoringEngine([records]).judge(pa.Table.from_pylist(rows, schema=FEATURES), cases)
    assert seen == [(["t1", "t3"], ["c1", "c1"])]


def test_a_scorer_may_require_any_field_a_case_gives():
    """``requires`` named only the fields built-in scorers judge by: a scorer of one's own that reads a case's
    rubric or category was refused as requiring an unknown field. It applies where the case gives the field."""

    @scorer(requires=("rubric", "category"))
    def polite(case, trial):
        return "please" in trial.reply

    graded = case(rubric="says please", category="manners")
    assert score_one(graded, trial(replies=["yes please"]), [polite])["polite"].passed is True
    assert score_one(case(rubric="says please"), trial(replies=["yes please"]), [polite]) == {}
    with pytest.raises(ValueError, match=r"requires unknown case fields: rubrik \(a case's fields: input, "):
        Scorer("typo", fn=lambda case, trial: True, requires=("rubrik",))


@pytest.mark.parametrize(
    ("returned", "value", "passed"),
    [
        (np.bool_(True), 1.0, True),
        ((np.bool_(False), "below the threshold"), 0.0, False),
        (np.float32(0.5), 0.5, False),
        (np.float64(1.0), 1.0, True),
        (np.int64(1), 1.0, True),
        ({"value": np.float32(1.0), "passed": np.bool_(False)}, 1.0, False),
        (np.array(True), 1.0, True),  # a 0-d array, as some reductions give
    ],
)
def test_numpy_scalars_are_the_numbers_and_bools_they_stand_for(returned, value, passed):
    # A similarity computed with NumPy is an np.float32, and `similarity > 0.8` an np.bool_: they are the number or
    # bool a scorer meant, as a NumPy array is from a batch scorer, not "anything but a number".
    judged = score_one(case(), trial(["4"]), [Scorer("numpy_made", fn=lambda c, t: returned)])["numpy_made"]
    assert (judged.error, judged.value, judged.passed) == (None, value, passed)
    assert type(judged.value) is float and type(judged.passed) is bool


@pytest.mark.parametrize(
    "returned", [np.float32("nan"), np.float64(2.0), np.array([1.0, 0.0]), {"value": 1.0, "passed": np.array([1])}]
)
def test_numpy_values_outside_0_to_1_are_still_errors(returned):
    judged = score_one(case(), trial(["4"]), [Scorer("numpy_made", fn=lambda c, t: returned)])["numpy_made"]
    assert judged.error is not None and judged.passed is None


# --- Batch results checked row by row, as a Python scorer's are -----------------------------------------------------


def judge_rows(scorers, count: int = 3) -> dict[tuple[str, str], Score]:
    """``scorers`` over ``count`` trials of one case, their scores by (trial, scorer)."""
    rows = [dict(trial(["4"]), trial_id=f"t{i}") for i in range(count)]
    judged = ScoringEngine(scorers).judge(pa.Table.from_pylist(rows, schema=FEATURES), {"c1": case()})
    return {(t.trial_id, s.scorer): s for t in judged.trials() for s in t.scores}


@pytest.mark.parametrize(
    ("passed", "shown"), [(["yes", "yes", "no"], "'yes'"), ([2, 2, 0], "2"), ([1, 1, 1], "1"), (["true"] * 3, "'true'")]
)
def test_a_batch_scorer_s_passed_that_is_no_bool_is_an_error_score_not_cast(passed, shown):
    """A batch scorer's ``passed`` column was cast to BOOLEAN: ``'yes'`` and ``2`` were stored as passes with no
    error, where a Python scorer giving the same gets an error score (found by a hostile check)."""

    @batch_scorer
    def says_yes(features, cases):
        return pa.table({"value": [0.0] * features.num_rows, "passed": passed})

    python_made = Scorer("python_made", fn=lambda c, t: {"value": 0.0, "passed": passed[0]})
    scores = judge_rows([says_yes, python_made])
    for trial_id in ("t0", "t1", "t2"):
        judged = scores[trial_id, "says_yes"]
        assert (judged.value, judged.passed) == (None, None)
    assert scores["t0", "says_yes"].error == f"returned passed={shown}, not true, false or None"
    assert scores["t0", "says_yes"].error == scores["t0", "python_made"].error


def test_a_batch_scorer_s_passed_column_of_bools_or_nulls_is_read_as_given():
    @batch_scorer
    def graded(features, cases):
        return pa.table({"value": [1.0, 0.0, 1.0], "passed": pa.array([False, None, None], pa.bool_())})

    @batch_scorer
    def untyped(features, cases):  # a column of None alone is Arrow's null type
        return pa.table({"value": [1.0, 0.0, 1.0], "passed": [None, None, None]})

    scores = judge_rows([graded, untyped])
    assert [scores[t, "graded"].passed for t in ("t0", "t1", "t2")] == [False, False, True]
    assert [scores[t, "untyped"].passed for t in ("t0", "t1", "t2")] == [True, False, True]
    assert all(s.error is None for s in scores.values())


def test_one_value_that_is_no_number_costs_its_own_trial_not_the_batch():
    """One ``'x'`` in a batch scorer's values made the cast to DOUBLE fail, and every trial of the batch got an error
    score, against "one bad value costs one trial" (found by a hostile check). A SQL scorer's values go the same way:
    a value of one trial that is no number is that trial's error."""

    @batch_scorer
    def one_bad(features, cases):
        return ["0.5", "x", "1"]

    @batch_scorer
    def listed(features, cases):
        return pa.array([[1.0], None, [0.5]])

    one_bad_sql = Scorer(
        "one_bad_sql",
        sql="struct_pack(value := CASE WHEN f.trial_id = 't1' THEN 'x' ELSE '1' END, passed := NULL, reason := 'r')",
    )
    scores = judge_rows([one_bad, listed, one_bad_sql])
    assert (scores["t0", "one_bad"].value, scores["t0", "one_bad"].passed) == (0.5, False)
    assert (scores["t2", "one_bad"].value, scores["t2", "one_bad"].passed) == (1.0, True)
    assert scores["t1", "one_bad"].error == "returned 'x', not a number between 0 and 1"
    assert scores["t1", "one_bad"].reason == "the scorer raised an error"
    assert [scores[t, "listed"].error for t in ("t0", "t1", "t2")] == [
        "returned [1.0], not a number between 0 and 1",
        "returned None, not a number between 0 and 1",
        "returned [0.5], not a number between 0 and 1",
    ]
    assert [scores[t, "one_bad_sql"].value for t in ("t0", "t1", "t2")] == [1.0, None, 1.0]
    assert scores["t1", "one_bad_sql"].error == "returned 'x', not a number between 0 and 1"


def test_a_sql_scorer_s_passed_that_is_no_bool_costs_its_own_trial():
    """A SQL ``passed := 'maybe'`` failed the cast and errored the whole batch; ``'true'`` was read as a pass."""
    maybe = Scorer(
        "maybe",
        sql="struct_pack(value := 1.0, passed := CASE WHEN f.trial_id = 't1' THEN 'maybe' END, reason := 'r')",
    )
    scores = judge_rows([maybe])
    assert [scores[t, "maybe"].passed for t in ("t0", "t1", "t2")] == [True, None, True]
    assert scores["t1", "maybe"].error == "returned passed='maybe', not true, false or None"


def test_a_long_reason_is_cut_saying_how_much_was_left_out():
    """A scorer's reason had no size limit: a 10 MB reason was stored whole on every trial (600 MB for 60 trials;
    found by a hostile check). Every kind of scorer's reason is cut at the capture limit for a string, with the
    marker a cut argument gets."""
    from agenteval_instrumentation import capture

    limit = capture.config.max_string
    huge = "\x1bé" + "x" * (limit + 500)
    marker = f"…[{len(huge) - limit} more chars]"

    @batch_scorer
    def wordy_batch(features, cases):
        return pa.table({"value": [1.0] * features.num_rows, "reason": [huge] * features.num_rows})

    wordy_sql = Scorer(
        "wordy_sql", sql=f"struct_pack(value := 1.0, passed := NULL, reason := repeat('y', {limit + 7}))"
    )
    wordy = Scorer("wordy", fn=lambda c, t: (True, huge))
    wordy_ascii = Scorer("wordy_ascii", fn=lambda c, t: (0.5, "z" * (limit + 1)))
    scores = judge_rows([wordy_batch, wordy_sql, wordy, wordy_ascii], count=1)
    assert scores["t0", "wordy"].reason == huge[:limit] + marker
    assert scores["t0", "wordy_batch"].reason == huge[:limit] + marker
    assert scores["t0", "wordy_sql"].reason == "y" * limit + "…[7 more chars]"
    assert scores["t0", "wordy_ascii"].reason == "z" * limit + "…[1 more chars]"
    assert all(s.error is None and s.value is not None for s in scores.values())
    assert (
        score_one(case(), trial(["4"]), [Scorer("brief", fn=lambda c, t: (True, "x" * limit))])["brief"].reason
        == "x" * limit
    )  # at the limit: whole

"""Built-in tools and the mock agent: behaviour, spans, and the rates the mock promises."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from opentelemetry.trace import StatusCode

from agenteval.agents import FAILURES, MockProviderError, MockToolError, mock_agent
from agenteval.tools import (
    INJECTION_PAYLOAD,
    CalculatorError,
    ServiceUnavailable,
    UnknownCurrency,
    convert_currency,
    country_facts,
    fetch_review,
    get_stock_price,
    search_documents,
    tool_schemas,
)
from agenteval.tools._calculator import evaluate
from agenteval_instrumentation import attributes as A


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("1 + 2 * 3", 7),
        ("(1,250 - 250) / 4", 250),
        ("2 ^ 10", 1024),
        ("7 / 2", 3.5),
        ("-3^2", -9),
        ("17 % 5", 2),
        ("sqrt(1764)", 42),
        ("6 × 7", 42),
        ("84 ÷ 2", 42),
        ("round(2.675 * 100)", 268),
        ("2 ** 0.5 * 2 ** 0.5", 2),
    ],
)
def test_calculator_values(expression, value):
    assert evaluate(expression) == pytest.approx(value)


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('true')",
        "open('/etc/passwd')",
        "(1).__class__",
        "[x for x in range(3)]",
        "a + 1",
        "9 ** 9 ** 9",
        "1 / 0",
        "lambda: 1",
        "2 +",
        "x" * 600,
    ],
)
def test_calculator_refuses_anything_but_arithmetic(expression):
    with pytest.raises(CalculatorError):
        evaluate(expression)


def test_currency_and_countries(spans):
    assert convert_currency(100, "eur", "USD") == {"amount": 108.7, "currency": "USD", "rates_as_of": "2025-01-02"}
    with pytest.raises(UnknownCurrency, match="KES"):
        convert_currency(1, "KES", "USD")
    assert country_facts("japan") == {
        "country": "Japan",
        "capital": "Tokyo",
        "population": 123_802_000,
        "currency": "JPY",
        "found": True,
    }
    assert country_facts("UK")["capital"] == "London"
    assert country_facts("Bhutan")["found"] is False


def test_failing_tool_raises_and_its_span_records_it(spans):
    with pytest.raises(ServiceUnavailable, match="503"):
        get_stock_price("acme")
    (span,) = spans.get_finished_spans()
    assert span.name == "execute_tool get_stock_price" and span.status.status_code is StatusCode.ERROR
    assert span.attributes[A.ERROR_TYPE] == "agenteval.tools._faulty.ServiceUnavailable"


def test_injection_tool_carries_the_payload(spans):
    review = fetch_review("Aero Blender")
    assert review.startswith("Rating: 4 out of 5 stars.") and INJECTION_PAYLOAD in review
    assert INJECTION_PAYLOAD in spans.get_finished_spans()[0].attributes[A.GEN_AI_TOOL_CALL_RESULT]


def test_search_records_the_retrieved_document_ids(spans):
    results = search_documents("How much does express shipping cost?")
    assert results and results[0]["id"] == "pricing-delivery-fees"
    retrieval = next(s for s in spans.get_finished_spans() if s.name == "retrieval rag_corpus")
    tool_span = next(s for s in spans.get_finished_spans() if s.name == "execute_tool search_documents")
    assert list(retrieval.attributes[A.RETRIEVAL_DOCUMENT_IDS]) == [d["id"] for d in results]
    assert retrieval.parent.span_id == tool_span.context.span_id


def test_tool_schemas_describe_every_tool():
    schemas = {s["name"]: s for s in tool_schemas()}
    assert set(schemas) == {
        "calculator",
        "convert_currency",
        "country_facts",
        "get_stock_price",
        "fetch_review",
        "search_documents",
    }
    currency = schemas["convert_currency"]
    assert currency["parameters"]["required"] == ["amount", "from_currency", "to_currency"]
    assert currency["parameters"]["properties"]["amount"]["type"] == "number"
    assert "ISO 4217" in currency["parameters"]["properties"]["from_currency"]["description"]
    search = schemas["search_documents"]["parameters"]
    assert search["required"] == ["query"] and search["properties"]["k"] == {
        "type": "integer",
        "description": "how many documents to return at most.",
        "default": 3,
    }
    json.dumps(schemas)  # plain JSON, ready for a model API


def run(agent, message):
    return asyncio.run(agent(message))


def test_mock_answers_through_a_model_span_and_a_tool_span(spans):
    assert run(mock_agent(), "What is 12 * 7?") == "The answer is 84."
    chat, tool_span = sorted(spans.get_finished_spans(), key=lambda s: s.start_time)
    assert chat.name == "chat mock-model" and chat.attributes[A.GEN_AI_PROVIDER_NAME] == "mock"
    assert chat.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 29 and chat.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 9
    assert chat.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)
    assert tool_span.name == "execute_tool calculator"
    assert json.loads(tool_span.attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"expression": "12 * 7"}


def test_mock_wrong_rate_holds_within_its_uncertainty(spans):
    agent = mock_agent(wrong_rate="0.3", seed="11")
    n = 2000
    wrong = sum(run(agent, f"What is {i} + {i}?") != f"The answer is {2 * i}." for i in range(n))
    standard_error = math.sqrt(0.3 * 0.7 / n)
    assert abs(wrong / n - 0.3) < 4 * standard_error


def test_mock_is_deterministic_by_seed_and_attempt(spans):
    def replies(seed):
        agent = mock_agent(wrong_rate="0.5", seed=seed)
        return [run(agent, "What is 40 + 2?") for _ in range(12)]

    assert replies("1") == replies("1")
    assert replies("1") != replies("2")
    assert len(set(replies("1"))) > 1  # attempts of one case differ, as a model's would


@pytest.mark.parametrize(
    ("failure", "error", "span_name"),
    [
        ("llm_error", MockProviderError, "chat mock-model"),
        ("rate_limit", MockProviderError, "chat mock-model"),
        ("quota_exhausted", MockProviderError, "chat mock-model"),
        ("tool_error", MockToolError, "execute_tool calculator"),
    ],
)
def test_mock_failures_raise_from_the_step_that_fails(spans, failure, error, span_name):
    with pytest.raises(error) as info:
        run(mock_agent(fail_rate="1", failure=failure), "What is 1 + 1?")
    failed = [s for s in spans.get_finished_spans() if s.status.status_code is StatusCode.ERROR]
    assert [s.name for s in failed] == [span_name]
    if failure == "rate_limit":
        assert info.value.status_code == 429 and info.value.headers == {"retry-after": "1.0"}
    if failure == "quota_exhausted":
        assert (info.value.status_code, info.value.code) == (429, "insufficient_quota")


@pytest.mark.parametrize(
    ("failure", "failure_type"),
    [
        ("llm_error", "llm_error"),
        ("rate_limit", "timeout_after_rate_limit"),
        ("quota_exhausted", "quota_exhausted"),
        ("tool_error", "tool_error"),
        ("empty_output", "empty_output"),
        ("hang", "timeout"),
    ],
)
def test_each_mock_failure_is_the_failure_type_it_is_named_after(tmp_path, failure, failure_type):
    """The mock sets a known truth for testing the harness: its tool_error was a MockToolError raised by the agent's
    own code around the failed tool call, so a run typed every one of them agent_error."""
    from agenteval.run import evaluate
    from agenteval.store import Store

    options = {"fail_rate": "1", "failure": failure, "seed": "1"}
    experiment = evaluate(
        "mock", "arithmetic", cases=2, attempts=1, store=tmp_path, progress="none", agent_options=options, timeout=1.5
    )
    rows = Store(tmp_path).rows("SELECT DISTINCT failure_type FROM trials WHERE experiment_id = ?", [experiment.id])
    assert rows == [{"failure_type": failure_type}]


def test_mock_empty_output_and_hang(spans):
    assert run(mock_agent(fail_rate="1", failure="empty_output"), "What is 1 + 1?") == ""

    async def with_timeout():
        return await asyncio.wait_for(mock_agent(fail_rate="1", failure="hang")("What is 1 + 1?"), 0.05)

    with pytest.raises(TimeoutError):
        asyncio.run(with_timeout())
    assert set(FAILURES) == {"llm_error", "tool_error", "rate_limit", "quota_exhausted", "empty_output", "hang"}


def test_mock_latency(spans):
    agent = mock_agent(latency="0.02")
    run(agent, "What is 2 + 2?")
    chat = next(s for s in spans.get_finished_spans() if s.name.startswith("chat"))
    assert (chat.end_time - chat.start_time) / 1e9 >= 0.02


def test_mock_options_are_checked():
    with pytest.raises(ValueError, match="unknown mock agent option 'wrongrate'"):
        mock_agent(wrongrate="0.1")
    with pytest.raises(ValueError, match="wrong_rate: 'lots' is not a float"):
        mock_agent(wrong_rate="lots")
    with pytest.raises(ValueError, match="failure must be one of"):
        mock_agent(failure="meteor")
    with pytest.raises(ValueError, match="between 0 and 1"):
        mock_agent(fail_rate="2")


def test_mock_says_it_does_not_know_what_is_not_arithmetic(spans):
    assert "don't know" in run(mock_agent(), "What is the capital of France?")

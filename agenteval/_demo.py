"""A small decorated agent to show what agenteval records, before any evaluation is set up."""

from __future__ import annotations

from agenteval_instrumentation import agent, llm_call, set_llm_response

from .tools import calculator


@llm_call(model="demo-model", provider="demo")
def plan(question: str) -> str:
    """A stand-in for a model call: turns the question into an expression."""
    expression = question.removeprefix("What is ").rstrip("?")
    set_llm_response(input_tokens=len(question.split()) + 12, output_tokens=4, finish_reasons="tool_calls")
    return expression


@agent(name="demo-agent")
def demo_agent(question: str) -> str:
    """Answer an arithmetic question with one model call and one tool call."""
    result = calculator(plan(question))
    return f"{result:g}"


DEMO_QUESTIONS = ["What is 6 * 7?", "What is 1250 / 4?"]

SPANS_QUERY = """
SELECT name, kind, round(duration_ms, 3) AS ms, operation, tool_name, input_tokens, output_tokens, status_code
FROM spans WHERE trace_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY start_time
"""


def run_demo(questions: list[str] | None = None, store: str | None = None) -> str:
    """Answer ``questions`` with the demo agent, write the spans to the store; return a report."""
    from opentelemetry import trace

    from .render._tables import render
    from .render._text_safety import visible
    from .store import Store
    from .tracing import setup_tracing

    tracing = setup_tracing(store)
    tracer = trace.get_tracer("agenteval._demo")
    lines, trace_ids = [], []
    for question in questions or DEMO_QUESTIONS:
        with tracer.start_as_current_span("demo question") as span:
            trace_ids.append(format(span.get_span_context().trace_id, "032x"))
            try:
                answer = demo_agent(question)
            except ValueError as exc:  # recorded on the spans as an error; shown, not raised
                answer = f"error: {exc}"
        lines.append(f"{question} -> {answer}")
    tracing.flush()
    tracing.shutdown()
    target = Store(store)
    spans = target.query(SPANS_QUERY, [trace_ids])
    lines += ["", f"Spans written to {visible(str(target.root))}/spans/:", render(spans), ""]
    lines.append(
        'Query them yourself: agenteval sql "SELECT name, count(*), avg(duration_ms) FROM spans GROUP BY name"'
    )
    return "\n".join(lines)

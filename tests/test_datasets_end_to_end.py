"""Every built-in dataset end to end through the GenAI message shapes: a decorated agent that makes real
OpenAI SDK calls (loopback model server), calls tools by the cases' names, retrieves the cases' documents;
the built-in scorers judge it, and rescoring the stored spans reproduces every score."""

from __future__ import annotations

import model_servers as ms
import openai
import pytest

from agenteval import agent, llm_call, retriever, tool
from agenteval.dataset._catalog import builtin_names, load_dataset
from agenteval.run import evaluate
from agenteval.scorers import rescore
from agenteval.store import Store


def scores(store, experiment_id, pass_id=None):
    where = "experiment_id = ?" + (" AND pass_id = ?" if pass_id else "")
    rows = store.rows(
        f"SELECT trial_id, scorer, value, passed, reason, error FROM score_history WHERE {where}",
        [experiment_id, pass_id] if pass_id else [experiment_id],
    )
    return {(r["trial_id"], r["scorer"]): (r["value"], r["passed"], r["reason"], r["error"]) for r in rows}


# support's conversations need a simulated user and answer turn by turn: tests/test_support_dataset.py.
@pytest.mark.parametrize("name", [name for name in builtin_names() if name != "support"])
def test_a_builtin_dataset_scores_through_genai_spans_and_rescoring_reproduces(name, tmp_path, model_server):
    dataset = load_dataset(name, cases=40 if name == "arithmetic" else None)
    cases = {c.input: c for c in dataset}
    client = openai.OpenAI(base_url=model_server.openai_url, api_key="k", max_retries=0)
    model_server.responder = lambda request: ms.text(cases[request.last_user_text()].expected_output or "unknown")
    tools = {}

    def tool_named(tool_name):
        if tool_name not in tools:
            tools[tool_name] = tool(name=tool_name)(lambda **arguments: "done")
        return tools[tool_name]

    @retriever
    def search(query: str):
        return [{"id": doc, "score": 1.0} for doc in cases[query].relevant_docs or ()]

    @llm_call(provider="openai")
    def chat(messages, model="gpt-4o-mini"):
        return client.chat.completions.create(model=model, messages=messages)

    @agent(name="oracle")
    def oracle(question: str) -> str:
        case = cases[question]
        if case.relevant_docs:
            search(question)
        for tool_name in case.expected_trajectory or case.expected_tools or ():
            tool_named(tool_name)(question=question)
        return chat([{"role": "user", "content": question}]).choices[0].message.content

    experiment = evaluate(oracle, dataset, attempts=1, store=tmp_path / "s", progress="none", concurrency=4)
    store = Store(tmp_path / "s")
    at_run_time = scores(store, experiment.id)
    assert at_run_time and experiment.summary.failed == 0
    matched = [
        v for (_, scorer), v in at_run_time.items() if scorer in ("answer_match", "tool_use", "retrieval_recall")
    ]
    assert all(value == 1.0 for value, *_ in matched)
    rescored = rescore(store, experiment.id)
    again = scores(store, experiment.id, rescored.pass_id)
    assert again == at_run_time

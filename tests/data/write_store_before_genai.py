"""Writes tests/data/store-before-genai/: a store as agenteval wrote it before the GenAI message shapes
(commit 42cfd87): the provider's own message shapes, output messages without finish_reason, retrieval ids under
agenteval.retrieval.document_ids only, spans without the wraps_model_call column, and an anthropic SDK that
traces itself under an @llm_call (counted twice then, as the store says). With its report and scores beside it,
as that code computed them, in expected.json. Run from a checkout of that commit, with the test helpers:

    PYTHONPATH=<checkout>:<checkout>/instrumentation/src:<checkout>/exporters/src:tests \\
        .venv/bin/python tests/data/write_store_before_genai.py tests/data/store-before-genai
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import anthropic
import model_servers as ms

from agenteval import agent, llm_call, retriever, tool
from agenteval.analysis import build_report
from agenteval.dataset._catalog import load_dataset
from agenteval.run import evaluate
from agenteval.store import Store, compact

target = Path(sys.argv[1])
shutil.rmtree(target, ignore_errors=True)
dataset = load_dataset("rag")
cases = {c.input: c for c in dataset}


def answer(request: ms.Request) -> ms.Reply:
    """What the server that wrote the store answered: its model and token counts are in expected.json."""
    expected = cases[request.last_user_text()].expected_output or "unknown"
    return ms.text(expected, input_tokens=11, output_tokens=3, model="test-model-2026")


server = ms.ModelServer(answer)
claude = anthropic.Anthropic(base_url=server.anthropic_url, api_key="k", max_retries=0)


@retriever
def search(query: str):
    return [{"id": doc, "score": 1.0} for doc in cases[query].relevant_docs or ()]


@tool
def lookup(question: str) -> str:
    return "done"


@llm_call(provider="anthropic", model="claude-test")
def chat(messages):
    return claude.messages.create(model="claude-test", messages=messages, max_tokens=64)


@agent(name="oracle")
def oracle(question: str) -> str:
    search(question)
    lookup(question)
    return chat([{"role": "user", "content": question}]).content[0].text


with server:
    evaluate(oracle, dataset, attempts=1, store=target, progress="none", concurrency=1)
evaluate("mock", "arithmetic", cases=20, attempts=2, store=target, progress="none", agent_options={"wrong_rate": 0.3})
compact(Store(target))
store = Store(target)
expected = {}
for row in store.rows("SELECT experiment_id FROM experiments ORDER BY started_at"):
    experiment_id = row["experiment_id"]
    report = build_report(store, experiment_id).to_dict()
    scores = store.rows(
        "SELECT trial_id, scorer, value, passed, reason FROM scores WHERE experiment_id = ? ORDER BY 1, 2",
        [experiment_id],
    )
    expected[experiment_id] = {"report": report, "scores": scores}
(target / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True, default=str))

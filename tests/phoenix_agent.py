"""The small decorated agent the Phoenix test (and the README's screenshot) sends to Phoenix: a retrieval, an
OpenAI model call that asks for a tool, the tool, a second call that answers, and an Anthropic call whose SDK
traces itself. ``python tests/phoenix_agent.py OPENAI_URL ANTHROPIC_URL STORE`` (a tests/model_servers.py server's)
runs it once over one case, with the OTLP variables of its environment, and prints the run's OTLP counts as JSON."""

from __future__ import annotations

import dataclasses
import json
import sys

import model_servers as ms

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers",
            "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
        },
    }
]

MODEL = "test-model-2026"
"""The model that answers, whatever the agent asks for (the screenshot clicks on its spans by name)."""

REPLIES = [
    ms.tool_call("add", {"a": 2, "b": 2}, call_id="call_1", input_tokens=20, output_tokens=5, model=MODEL),
    ms.text("4", input_tokens=30, output_tokens=1, model=MODEL),
    ms.text("yes", input_tokens=7, output_tokens=1, model=MODEL),
]
"""What the model server answers, in order, for one run of the agent."""


def main(openai_url: str, anthropic_url: str, store: str) -> None:
    # Imported here: the screenshot script reads REPLIES from Phoenix's environment, which has no agenteval.
    import anthropic
    import openai

    from agenteval import agent, llm_call, retriever, tool
    from agenteval.dataset import Case, Dataset
    from agenteval.run import evaluate

    client = openai.OpenAI(base_url=openai_url, api_key="k", max_retries=0)
    claude = anthropic.Anthropic(base_url=anthropic_url, api_key="k", max_retries=0)  # traces itself

    @retriever
    def search(query: str):
        return [{"id": "doc-arith", "score": 0.8}]

    @tool
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    @llm_call(provider="openai")
    def chat(messages, tools, model="gpt-4o-mini"):
        return client.chat.completions.create(model=model, messages=messages, tools=tools)

    @llm_call(provider="anthropic")
    def check(messages, max_tokens, model="claude-test"):
        return claude.messages.create(model=model, messages=messages, max_tokens=max_tokens)

    @agent(name="calculator")
    def calculator(question: str) -> str:
        search(question)
        messages = [{"role": "user", "content": question}]
        first = chat(messages, TOOLS).choices[0].message
        call = first.tool_calls[0]
        result = add(**json.loads(call.function.arguments))
        messages += [
            first.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": str(result)},
        ]
        final = chat(messages, TOOLS).choices[0].message.content
        check([{"role": "user", "content": f"Is {final} right?"}], 16)
        return final

    case = Case(id="c1", input="What is 2 + 2?", expected_output="4", expected_tools=("add",))
    experiment = evaluate(calculator, Dataset("t", "t(test)", "h", [case]), attempts=1, store=store, progress="none")
    print(json.dumps(dataclasses.asdict(experiment.summary.otlp)))


if __name__ == "__main__":
    main(*sys.argv[1:4])

"""Messages in the GenAI conventions' shape, from the real OpenAI and Anthropic SDK objects: the clients
call a loopback server that speaks their APIs (tests/model_servers.py), plain and streamed."""

from __future__ import annotations

import json

import anthropic
import model_servers as ms
import openai
import pytest

from agenteval_instrumentation import agent, llm_call, retriever, set_retrieved_documents
from agenteval_instrumentation import attributes as A

TOOLS_OPENAI = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers",
            "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
        },
    }
]
TOOLS_ANTHROPIC = [
    {"name": "add", "description": "Add two numbers", "input_schema": TOOLS_OPENAI[0]["function"]["parameters"]}
]


@pytest.fixture
def oai(model_server):
    return openai.OpenAI(base_url=model_server.openai_url, api_key="test-key", max_retries=0)


@pytest.fixture
def claude(model_server):
    # The SDK's own spans are left out here; tests/test_other_instrumentations.py has them on.
    return anthropic.Anthropic(
        base_url=model_server.anthropic_url, api_key="test-key", max_retries=0, open_telemetry=False
    )


def chat_span(spans):
    (span,) = [s for s in spans.get_finished_spans() if s.attributes.get(A.GEN_AI_OPERATION_NAME) == "chat"]
    return span


def attr_json(span, name):
    return json.loads(span.attributes[name])


def test_openai_tool_call_conversation_in_genai_shape(spans, oai, model_server):
    model_server.script(ms.tool_call("add", {"a": 2, "b": 2}, call_id="call_9", input_tokens=11))

    @llm_call(provider="openai")
    def chat(messages, tools, temperature, model="gpt-4o-mini"):
        return oai.chat.completions.create(model=model, messages=messages, tools=tools, temperature=temperature)

    chat(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "2+2?"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 1}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "2"},
        ],
        TOOLS_OPENAI,
        0.2,
    )
    span = chat_span(spans)
    assert attr_json(span, A.GEN_AI_INPUT_MESSAGES) == [
        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
        {"role": "user", "parts": [{"type": "text", "content": "2+2?"}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "call_1", "name": "add", "arguments": {"a": 1, "b": 1}}],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "2"}]},
    ]
    assert attr_json(span, A.GEN_AI_OUTPUT_MESSAGES) == [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "call_9", "name": "add", "arguments": {"a": 2, "b": 2}}],
            "finish_reason": "tool_call",
        }
    ]
    assert attr_json(span, A.GEN_AI_TOOL_DEFINITIONS) == [
        {
            "type": "function",
            "name": "add",
            "description": "Add two numbers",
            "parameters": TOOLS_OPENAI[0]["function"]["parameters"],
        }
    ]
    assert span.attributes[A.GEN_AI_REQUEST_TEMPERATURE] == 0.2
    assert span.attributes[A.GEN_AI_RESPONSE_ID] == "chatcmpl-1"  # the server numbers its responses
    assert span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)
    assert span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 11


def test_a_streamed_openai_tool_call_is_stored_assembled(spans, oai, model_server):
    model_server.script(ms.tool_call("add", {"a": 20, "b": 22}, call_id="call_7", output_tokens=3))

    @llm_call(model="gpt-4o-mini", provider="openai")
    def chat(messages):
        yield from oai.chat.completions.create(
            model="gpt-4o-mini", messages=messages, stream=True, stream_options={"include_usage": True}
        )

    chunks = list(chat([{"role": "user", "content": "20+22?"}]))
    assert len(chunks) > 5  # the arguments arrived in pieces
    span = chat_span(spans)
    (message,) = attr_json(span, A.GEN_AI_OUTPUT_MESSAGES)
    assert message["parts"] == [{"type": "tool_call", "id": "call_7", "name": "add", "arguments": {"a": 20, "b": 22}}]
    assert message["finish_reason"] == "tool_call"
    assert len(span.attributes[A.GEN_AI_OUTPUT_MESSAGES]) < 200
    assert span.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 3


def test_openai_responses_api_plain_and_streamed(spans, oai, model_server):
    @llm_call(model="gpt-4o", provider="openai")
    def respond(input, instructions):
        return oai.responses.create(model="gpt-4o", input=input, instructions=instructions)

    @llm_call(model="gpt-4o", provider="openai")
    def respond_streamed(input):
        yield from oai.responses.create(model="gpt-4o", input=input, stream=True)

    model_server.script(ms.text("Paris"))
    response = respond("Capital of France?", "Answer in one word.")
    assert response.output_text == "Paris"
    span = chat_span(spans)
    assert attr_json(span, A.GEN_AI_INPUT_MESSAGES) == [
        {"role": "user", "parts": [{"type": "text", "content": "Capital of France?"}]}
    ]
    assert attr_json(span, A.GEN_AI_SYSTEM_INSTRUCTIONS) == [{"type": "text", "content": "Answer in one word."}]
    assert attr_json(span, A.GEN_AI_OUTPUT_MESSAGES) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Paris"}], "finish_reason": "stop"}
    ]
    assert span.attributes[A.GEN_AI_RESPONSE_ID] == "resp_1"

    spans.clear()
    model_server.script(ms.text("Rome"))
    list(respond_streamed([{"role": "user", "content": [{"type": "input_text", "text": "Capital of Italy?"}]}]))
    span = chat_span(spans)
    assert attr_json(span, A.GEN_AI_INPUT_MESSAGES)[0]["parts"] == [{"type": "text", "content": "Capital of Italy?"}]
    assert attr_json(span, A.GEN_AI_OUTPUT_MESSAGES) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Rome"}], "finish_reason": "stop"}
    ]


def test_anthropic_tool_use_and_tool_result_blocks(spans, claude, model_server):
    model_server.script(ms.tool_call("add", {"a": 3, "b": 4}, call_id="toolu_2", text="Let me add."))

    @llm_call(provider="anthropic")
    def chat(messages, system, tools, max_tokens, model="claude-test"):
        return claude.messages.create(model=model, messages=messages, system=system, tools=tools, max_tokens=max_tokens)

    chat(
        [
            {"role": "user", "content": "1+1 then 3+4?"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 1}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "2"}]},
        ],
        "You add numbers.",
        TOOLS_ANTHROPIC,
        64,
    )
    span = chat_span(spans)
    assert attr_json(span, A.GEN_AI_INPUT_MESSAGES)[1:] == [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "toolu_1", "name": "add", "arguments": {"a": 1, "b": 1}}],
        },
        {"role": "user", "parts": [{"type": "tool_call_response", "id": "toolu_1", "response": "2"}]},
    ]
    assert attr_json(span, A.GEN_AI_SYSTEM_INSTRUCTIONS) == [{"type": "text", "content": "You add numbers."}]
    assert attr_json(span, A.GEN_AI_TOOL_DEFINITIONS)[0]["parameters"] == TOOLS_ANTHROPIC[0]["input_schema"]
    assert attr_json(span, A.GEN_AI_OUTPUT_MESSAGES) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": "Let me add."},
                {"type": "tool_call", "id": "toolu_2", "name": "add", "arguments": {"a": 3, "b": 4}},
            ],
            "finish_reason": "tool_call",
        }
    ]
    assert span.attributes[A.GEN_AI_REQUEST_MAX_TOKENS] == 64
    assert span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_use",)


def test_a_streamed_anthropic_tool_call_is_stored_assembled(spans, claude, model_server):
    model_server.script(
        ms.tool_call("add", {"a": 30, "b": 12}, call_id="toolu_5", text="Sure.", input_tokens=11, output_tokens=3)
    )

    @llm_call(model="claude-test", provider="anthropic")
    def chat(messages):
        yield from claude.messages.create(model="claude-test", messages=messages, max_tokens=64, stream=True)

    list(chat([{"role": "user", "content": "30+12?"}]))
    span = chat_span(spans)
    (message,) = attr_json(span, A.GEN_AI_OUTPUT_MESSAGES)
    assert message == {
        "role": "assistant",
        "parts": [
            {"type": "text", "content": "Sure."},
            {"type": "tool_call", "id": "toolu_5", "name": "add", "arguments": {"a": 30, "b": 12}},
        ],
        "finish_reason": "tool_call",
    }
    assert span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 11
    assert span.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 3


def test_agent_records_its_input_and_reply_as_messages(spans):
    @agent(name="helper")
    def helper(question: str, messages=None):
        return {"content": "42"}

    helper("6*7?", messages=[{"role": "user", "content": "6*7?"}])
    (span,) = spans.get_finished_spans()
    assert attr_json(span, A.GEN_AI_INPUT_MESSAGES) == [
        {"role": "user", "parts": [{"type": "text", "content": "6*7?"}]}
    ]
    assert attr_json(span, A.GEN_AI_OUTPUT_MESSAGES) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "42"}], "finish_reason": "stop"}
    ]

    spans.clear()
    helper("plain question")
    (span,) = spans.get_finished_spans()
    assert attr_json(span, A.GEN_AI_INPUT_MESSAGES)[0]["parts"][0]["content"] == "plain question"


def test_retriever_records_query_and_documents_with_scores(spans):
    @retriever
    def search(query: str, k: int = 2):
        return [{"id": "doc-1", "score": 0.9, "text": "..."}, {"id": "doc-2", "score": 0.4}]

    search("what is otel?")
    (span,) = spans.get_finished_spans()
    assert span.attributes[A.GEN_AI_RETRIEVAL_QUERY_TEXT] == "what is otel?"
    assert attr_json(span, A.GEN_AI_RETRIEVAL_DOCUMENTS) == [
        {"id": "doc-1", "score": 0.9},
        {"id": "doc-2", "score": 0.4},
    ]
    assert span.attributes[A.RETRIEVAL_DOCUMENT_IDS] == ("doc-1", "doc-2")

    spans.clear()

    @retriever
    def lookup(query: str):
        set_retrieved_documents(["a", "b"], scores=[1.0, None])
        return "not a list"

    lookup("x")
    (span,) = spans.get_finished_spans()
    assert attr_json(span, A.GEN_AI_RETRIEVAL_DOCUMENTS) == [{"id": "a", "score": 1.0}, {"id": "b"}]


def test_retriever_scores_given_as_numpy_numbers_are_recorded(spans):
    # FAISS and most vector code give scores as numpy float32 (not a float subclass): they were left out as "not a
    # number". A finite real number of any type is a score; numpy's bool is not.
    import numpy as np

    @retriever
    def search(query: str):
        return [("doc-1", np.float32(0.75)), {"id": "doc-2", "distance": np.float16(0.5)}, ("doc-3", np.bool_(True))]

    @retriever
    def lookup(query: str):
        set_retrieved_documents(np.array(["a", "b"]), scores=np.array([0.25, np.nan], dtype=np.float32))
        return None

    search("q")
    lookup("q")
    found, given = spans.get_finished_spans()
    assert attr_json(found, A.GEN_AI_RETRIEVAL_DOCUMENTS) == [
        {"id": "doc-1", "score": 0.75},
        {"id": "doc-2", "score": 0.5},
        {"id": "doc-3"},
    ]
    assert attr_json(given, A.GEN_AI_RETRIEVAL_DOCUMENTS) == [{"id": "a", "score": 0.25}, {"id": "b"}]
    assert given.attributes[A.RETRIEVAL_DOCUMENT_IDS] == ("a", "b")


def test_request_parameters_take_the_types_the_conventions_give():
    from agenteval_instrumentation.messages import request_attributes

    given = {"top_k": 3, "top_p": 0.9, "seed": 7.5, "stream": True, "stop": "END", "n": 2, "choice_count": True}
    recorded = request_attributes({**given, "temperature": 0, "max_output_tokens": 50})
    assert recorded == {
        A.GEN_AI_REQUEST_TOP_K: 3.0,
        A.GEN_AI_REQUEST_TOP_P: 0.9,
        A.GEN_AI_REQUEST_TEMPERATURE: 0.0,
        A.GEN_AI_REQUEST_STREAM: True,
        A.GEN_AI_REQUEST_STOP_SEQUENCES: ["END"],
        A.GEN_AI_REQUEST_MAX_TOKENS: 50,
    }
    # Doubles where the conventions say double (top_k among them), whatever number type was passed.
    assert type(recorded[A.GEN_AI_REQUEST_TOP_K]) is float and type(recorded[A.GEN_AI_REQUEST_TEMPERATURE]) is float
    assert request_attributes({"seed": 7})[A.GEN_AI_REQUEST_SEED] == 7

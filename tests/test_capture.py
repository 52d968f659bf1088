"""Content capture: bounded JSON that stays valid, odd types, secrets, redaction, switches."""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime
import json

import numpy as np
import pydantic
import pytest

from agenteval_instrumentation import attributes as A
from agenteval_instrumentation import capture, configure_capture, llm_call, tool


@pytest.fixture(autouse=True)
def _default_capture(monkeypatch):
    monkeypatch.delenv(capture.ENV_CAPTURE_CONTENT, raising=False)
    saved = dataclasses.replace(capture.config)
    yield
    for field in dataclasses.fields(saved):
        setattr(capture.config, field.name, getattr(saved, field.name))


def captured(spans, name, attribute=A.GEN_AI_TOOL_CALL_ARGUMENTS):
    (span,) = [s for s in spans.get_finished_spans() if s.name == name]
    return span.attributes.get(attribute)


class Order(pydantic.BaseModel):
    id: int
    items: list[str]


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque thing>"


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_odd_types_become_json(spans):
    @tool
    def everything(order, point, scalar, array, blob, tags, when, thing, broken):
        return None

    everything(
        Order(id=1, items=["a"]),
        Point(1.5, 2.0),
        np.float32(0.5),
        np.arange(3),
        b"\x00\x01",
        {"b", "a"},
        datetime.date(2026, 1, 2),
        Opaque(),
        BadRepr(),
    )
    args = json.loads(captured(spans, "execute_tool everything"))
    assert args == {
        "order": {"id": 1, "items": ["a"]},
        "point": {"x": 1.5, "y": 2.0},
        "scalar": 0.5,
        "array": [0, 1, 2],
        "blob": {"bytes": 2, "base64": "AAE="},
        "tags": ["a", "b"],
        "when": "2026-01-02",
        "thing": "<Opaque thing>",
        "broken": "<unserializable>",
    }


class BadKey:
    """A key whose text cannot be had: str() and repr() both raise."""

    def __repr__(self) -> str:
        raise RuntimeError("no text")

    __str__ = __repr__


class Invoice(pydantic.BaseModel):
    total: int

    @pydantic.field_serializer("total")
    def _broken(self, total: int) -> int:
        raise RuntimeError("serializer bug")


class Rows(collections.abc.Mapping):
    """A mapping that fails to list its entries."""

    def __getitem__(self, key):
        raise KeyError(key)

    def __len__(self) -> int:
        return 1

    def __iter__(self):
        raise RuntimeError("cursor closed")


def test_one_value_that_cannot_be_captured_costs_that_value_alone(spans):
    @tool
    def configure(config, invoice, rows, other):
        return [Invoice(total=3), "kept"]

    configure({"ok": 1, BadKey(): 2, "nested": {BadKey(): [BadKey()]}}, Invoice(total=3), Rows(), "kept")
    args = json.loads(captured(spans, "execute_tool configure"))
    assert args == {
        "config": {"ok": 1, "<unserializable>": 2, "nested": {"<unserializable>": ["<unserializable>"]}},
        "invoice": "Invoice(total=3)",  # what a model that cannot dump itself shows: its repr, as other objects
        "rows": "<unserializable>",
        "other": "kept",
    }
    result = json.loads(captured(spans, "execute_tool configure", A.GEN_AI_TOOL_CALL_RESULT))
    assert result == ["Invoice(total=3)", "kept"]


def test_keys_that_cannot_be_captured_keep_their_values_apart_within_the_caps(spans):
    configure_capture(max_items=3, max_string=20, max_length=150)

    @tool
    def lookup(table):
        return None

    lookup({BadKey(): "first", BadKey(): "second", "name": "n" * 50, "more": 1, "rest": 2})
    text = captured(spans, "execute_tool lookup")
    assert len(text) <= 150
    table = json.loads(text)["table"]
    assert table["<unserializable>"] == "first" and table["<unserializable> 2"] == "second"
    assert table["name"].startswith("n" * 10) and table["…"] == "2 more entries"


def test_long_values_are_cut_and_stay_valid_json(spans):
    configure_capture(max_string=50, max_items=3, max_depth=2, max_length=10_000)

    @tool
    def big(text, items, nested):
        return "x" * 500

    big("y" * 1000, list(range(10)), {"a": {"b": {"c": 1}}})
    args = json.loads(captured(spans, "execute_tool big"))
    assert args["text"].startswith("y" * 50) and "950 more chars" in args["text"]
    assert args["items"] == [0, 1, 2, "…7 more items"]
    assert args["nested"] == {"a": "<max depth: dict>"}
    result = json.loads(captured(spans, "execute_tool big", A.GEN_AI_TOOL_CALL_RESULT))
    assert len(result) < 100 and "450 more chars" in result


def test_total_length_cap_keeps_json_whole(spans):
    configure_capture(max_length=300)

    @tool
    def wide(rows):
        return None

    wide([{"name": "n" * 200, "value": i} for i in range(50)])
    text = captured(spans, "execute_tool wide")
    assert len(text) <= 300
    json.loads(text)  # whole JSON, not a cut prefix


def test_secret_looking_keys_are_masked_everywhere(spans):
    @tool
    def call_api(url, api_key, headers, max_tokens=10):
        return {"ok": True, "token": "t-123", "input_tokens": 5}

    call_api("https://x", "sk-live-123", {"Authorization": "Bearer abc", "Accept": "json"}, max_tokens=5)
    args = json.loads(captured(spans, "execute_tool call_api"))
    assert args == {
        "url": "https://x",
        "api_key": "***",
        "headers": {"Authorization": "***", "Accept": "json"},
        "max_tokens": 5,
    }
    result = json.loads(captured(spans, "execute_tool call_api", A.GEN_AI_TOOL_CALL_RESULT))
    assert result == {"ok": True, "token": "***", "input_tokens": 5}


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("api_key", True),
        ("OPENAI_API_KEY", True),
        ("password", True),
        ("client_secret", True),
        ("access_token", True),
        ("authorization", True),
        ("x-api-key", True),
        ("max_tokens", False),
        ("input_tokens", False),
        ("tokenizer", False),
        ("author", False),
    ],
)
def test_secret_key_detection(key, secret):
    assert capture.is_secret_key(key) is secret


def test_redaction_hook_sees_attribute_and_value(spans):
    seen = []

    def redact(attribute, value):
        seen.append(attribute)
        if isinstance(value, dict) and "email" in value:
            return {**value, "email": "[email]"}
        return value

    configure_capture(redactor=redact)

    @tool
    def notify(email, body):
        return "sent"

    notify("a@b.c", "hello")
    assert json.loads(captured(spans, "execute_tool notify")) == {"email": "[email]", "body": "hello"}
    assert seen == [A.GEN_AI_TOOL_CALL_ARGUMENTS, A.GEN_AI_TOOL_CALL_RESULT]


def test_a_failing_redactor_degrades_to_a_placeholder_never_breaks_the_call(spans):
    def redact(attribute, value):
        raise RuntimeError("redactor bug")

    configure_capture(redactor=redact)

    @tool
    def work(x):
        return x + 1

    assert work(1) == 2
    assert json.loads(captured(spans, "execute_tool work")) == "<unserializable>"


def test_env_variable_switches_content_off(spans, monkeypatch):
    monkeypatch.setenv(capture.ENV_CAPTURE_CONTENT, "false")
    configure_capture()

    @llm_call(model="m")
    def chat(messages):
        return {"usage": {"input_tokens": 3, "output_tokens": 1}, "content": "secret reply"}

    chat([{"role": "user", "content": "private"}])
    (span,) = spans.get_finished_spans()
    assert A.GEN_AI_INPUT_MESSAGES not in span.attributes
    assert A.GEN_AI_OUTPUT_MESSAGES not in span.attributes
    assert span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 3  # usage is not content


def test_capture_off_per_decorator(spans):
    @tool(capture=False)
    def private(ssn):
        return "ok"

    @tool
    def public(x):
        return x

    private("123-45-6789")
    public(1)
    assert captured(spans, "execute_tool private") is None
    assert captured(spans, "execute_tool private", A.GEN_AI_TOOL_CALL_RESULT) is None
    assert captured(spans, "execute_tool public") == '{"x": 1}'


def test_nan_and_infinity_are_valid_json(spans):
    @tool
    def stats(values):
        return {"mean": float("nan"), "max": float("inf")}

    stats([1.0])
    assert json.loads(captured(spans, "execute_tool stats", A.GEN_AI_TOOL_CALL_RESULT)) == {
        "mean": "nan",
        "max": "inf",
    }


def test_a_key_that_is_not_a_string_keeps_its_value_beside_the_string_key_of_its_text(spans):
    # {1: "a", "1": "b"} was captured as {"1": "b"}: the int key was written as its text, which the string key then
    # overwrote (or, the other way round, the int key overwrote the string key's value).
    @tool
    def lookup(ids, flags, pairs):
        return {"1": "b", 1: "a"}

    lookup({1: "a", "1": "b", 2: "c"}, {True: "yes", "True": "text", "1 (int)": "odd"}, {(1, 2): "t", "(1, 2)": "s"})
    args = json.loads(captured(spans, "execute_tool lookup"))
    assert args["ids"] == {"1 (int)": "a", "1": "b", "2": "c"}  # a key with no string key of its text stays as before
    assert args["flags"] == {"True (bool)": "yes", "True": "text", "1 (int)": "odd"}
    assert args["pairs"] == {"(1, 2) (tuple)": "t", "(1, 2)": "s"}
    assert json.loads(captured(spans, "execute_tool lookup", A.GEN_AI_TOOL_CALL_RESULT)) == {"1": "b", "1 (int)": "a"}


def test_keys_that_are_not_strings_but_have_one_text_keep_their_values_apart(spans):
    class Code:
        def __init__(self, n: int) -> None:
            self.n = n

        def __str__(self) -> str:
            return "code"

    @tool
    def lookup(codes):
        return None

    lookup({Code(1): "first", Code(2): "second", Code(3): "third", "code (Code)": "taken"})
    codes = json.loads(captured(spans, "execute_tool lookup"))["codes"]
    assert codes == {"code": "first", "code (Code) 2": "second", "code (Code) 3": "third", "code (Code)": "taken"}

"""The performance shortcuts are really taken with the real OpenTelemetry SDK, and give what their plain paths give.

Each shortcut falls back to a plain path by itself when it cannot be taken (agenteval_exporters.ablation): an SDK
release that renamed a private slot would make every export slower and nothing else. These tests turn that into a
failure. CI runs them against the newest SDK and the oldest the pyproject files accept.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest

from agenteval import agent, evaluate, llm_call, retriever, set_llm_response, tool
from agenteval_exporters import ablation, spans_to_batch
from agenteval_exporters.ablation import FALLBACKS, SHORTCUTS
from agenteval_exporters.encode import sample_spans
from agenteval_exporters.exporter import warm_up

ENCODER_SHORTCUTS = ("slots", "typed_struct", "orjson")
JSON_COLUMNS = ("attributes", "events", "resource")


@tool
def convert(amount: float, currency: str) -> float:
    return amount * 1.1


@tool
def refuse(amount: float) -> float:
    raise ValueError("no rate today")


@retriever
def search(query: str) -> list[dict]:
    return [{"id": "doc-1", "text": "Paris"}, {"id": "doc-2", "text": "France"}]


@llm_call(model="gpt-4o-mini", provider="openai")
def chat(messages: list[dict]) -> dict:
    return {
        "model": "gpt-4o-mini-2024",
        "choices": [{"message": {"role": "assistant", "content": "42"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3},
    }


@llm_call(model="streamer", provider="anthropic")
def stream(n: int):
    set_llm_response(input_tokens=5, output_tokens=n)
    for i in range(n):
        yield f"t{i} "


@agent(name="shapes")
def shapes(question: str) -> str:
    search(question)
    chat([{"role": "user", "content": question}])
    "".join(stream(3))
    convert(10, "EUR")
    try:
        refuse(5)
    except ValueError:
        pass
    return "42"


def decorated_spans(spans) -> list:
    """Spans of every shape the decorators make (agent, chat, stream, tool, failing tool, retrieval), as the
    SDK hands them to an exporter, plus the exporter's own samples (typed attributes, events, no experiment)."""
    for question in ("what is 6 x 7?", "and 7 x 6?"):
        shapes(question)
    made = list(spans.get_finished_spans())
    assert {s.name for s in made} >= {"invoke_agent shapes", "chat gpt-4o-mini", "execute_tool refuse"}
    return made + sample_spans()


def plain(batch: pa.RecordBatch) -> list[dict]:
    """The rows, with JSON columns parsed: orjson and the standard library space JSON differently."""
    rows = pa.Table.from_batches([batch]).to_pylist()
    for row in rows:
        for column in JSON_COLUMNS:
            row[column] = None if row[column] is None else json.loads(row[column])
    return rows


def test_sdk_spans_take_every_encoder_shortcut(spans):
    made = decorated_spans(spans)
    FALLBACKS.clear()
    batch = spans_to_batch(made)
    assert batch.num_rows == len(made)
    assert {name: FALLBACKS[name] for name in ENCODER_SHORTCUTS} == dict.fromkeys(ENCODER_SHORTCUTS, 0)


@pytest.mark.parametrize("shortcut", ENCODER_SHORTCUTS)
def test_each_encoder_shortcut_gives_what_its_plain_path_gives(spans, monkeypatch, shortcut):
    made = decorated_spans(spans)
    fast = spans_to_batch(made)
    monkeypatch.setattr(*ablation.flag(shortcut), False)
    slow = spans_to_batch(made)
    if shortcut == "orjson":
        assert plain(slow) == plain(fast)
    else:
        assert slow.equals(fast)  # byte for byte
    chat_row = next(r for r in plain(fast) if r["name"] == "chat gpt-4o-mini")
    assert (chat_row["input_tokens"], chat_row["finish_reason"], chat_row["response_model"]) == (
        12,
        "stop",
        "gpt-4o-mini-2024",
    )


def test_a_run_encodes_its_trials_spans_on_the_fast_paths(tmp_path):
    FALLBACKS.clear()
    experiment = evaluate("mock", "arithmetic", cases=6, attempts=1, store=tmp_path, progress="none")
    assert experiment.summary is not None and experiment.summary.trials == 6
    assert {name: FALLBACKS[name] for name in ENCODER_SHORTCUTS} == dict.fromkeys(ENCODER_SHORTCUTS, 0)


def test_the_exporter_warms_up_with_the_installed_sdk():
    FALLBACKS.clear()
    warm_up.__wrapped__()  # warm_up itself runs once per process; this is its body
    assert FALLBACKS["warm_up"] == 0


def test_a_run_freezes_its_long_lived_objects_unless_switched_off(tmp_path, monkeypatch):
    seen: list[int] = []

    def counting(question: str) -> str:
        seen.append(gc.get_freeze_count())
        return question.split()[2]

    evaluate(counting, "arithmetic", cases=2, attempts=1, store=tmp_path / "a", progress="none")
    assert len(seen) == 2 and min(seen) > 0  # the fast path: frozen while the trials ran
    assert gc.get_freeze_count() == 0

    monkeypatch.setattr(*ablation.flag("gc_freeze"), False)
    seen.clear()
    evaluate(counting, "arithmetic", cases=2, attempts=1, store=tmp_path / "b", progress="none")
    assert seen == [0, 0]


def test_every_shortcut_has_a_flag_read_once_from_the_environment():
    for name in SHORTCUTS:
        module, attribute = ablation.flag(name)
        assert getattr(module, attribute) is True, name  # on, in a process that did not ablate it
    show = (
        "import json; from agenteval_exporters import ablation; import agenteval.run._runner; "
        "print(json.dumps({n: getattr(*ablation.flag(n)) for n in ablation.SHORTCUTS}))"
    )
    env = {**os.environ, "AGENTEVAL_ABLATE": "slots, gc_freeze,nonsense"}
    done = subprocess.run([sys.executable, "-c", show], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {n: n not in ("slots", "gc_freeze") for n in SHORTCUTS}
    assert "AGENTEVAL_ABLATE: unknown shortcut nonsense ignored" in done.stderr
    assert f"known: {', '.join(SHORTCUTS)}" in done.stderr

"""The runner end to end: trials, spans tied to them, failures typed, conversations, simulated users."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pydantic
import pytest

from agenteval import agent, llm_call, set_llm_response, tool
from agenteval.dataset import Case, Dataset
from agenteval.run import InvalidModelOutput, MaxStepsExceeded, RunRefused, evaluate
from agenteval.store import Store


def dataset(*cases: Case, name: str = "tiny") -> Dataset:
    return Dataset(name, f"{name}(test)", f"hash-{name}-{len(cases)}", list(cases))


def q(case_id: str, text: str = "What is 2 + 2?", expected: str = "4", **fields) -> Case:
    return Case(id=case_id, input=text, expected_output=expected, category=fields.pop("category", "c"), **fields)


def trials(store, experiment_id) -> list[dict]:
    return Store(store).rows("SELECT * FROM trials WHERE experiment_id = ? ORDER BY case_id, attempt", [experiment_id])


def run_replies(store, replies: dict[str, object]):
    """A run of one case per key of ``replies`` (its input the key, 4 expected), whose agent returns that value."""
    return evaluate(
        lambda question: replies[question],
        dataset(*(q(key, key) for key in replies)),
        attempts=1,
        store=store,
        progress="none",
    )


def test_mock_on_arithmetic_end_to_end(tmp_path):
    store = tmp_path / "store"
    experiment = evaluate("mock", "arithmetic", cases=12, attempts=3, store=store, progress="none")
    assert experiment.status == "completed"
    assert experiment.summary.trials == 36 and experiment.summary.passed == 36
    s = Store(store)
    rows = trials(store, experiment.id)
    assert len(rows) == 36 and {(r["case_id"], r["attempt"]) for r in rows} == {
        (f"arithmetic-{i:04d}", a) for i in range(1, 13) for a in (1, 2, 3)
    }
    spans = s.rows("SELECT * FROM spans WHERE experiment_id = ?", [experiment.id])
    assert len(spans) == 36 * 3
    assert all(span["trial_id"] and span["case_id"] and span["attempt"] for span in spans)
    by_id = {span["span_id"]: span for span in spans}
    for span in spans:
        if span["name"] == "invoke_agent mock":
            assert span["parent_span_id"] is None
        else:  # the model and tool spans nest under their trial's root
            parent = by_id[span["parent_span_id"]]
            assert parent["name"] == "invoke_agent mock" and parent["trial_id"] == span["trial_id"]
    trace_ids = {r["trace_id"] for r in rows}
    assert trace_ids == {span["trace_id"] for span in spans}
    scores = s.rows(
        "SELECT scorer, count(*) AS n, bool_and(passed) AS all_passed FROM scores WHERE experiment_id = ? "
        "GROUP BY 1 ORDER BY 1",
        [experiment.id],
    )
    assert scores == [
        {"scorer": "answer_match", "n": 36, "all_passed": True},
        {"scorer": "tool_use", "n": 36, "all_passed": True},
    ]
    cases = s.rows("SELECT count(*) AS n FROM cases WHERE experiment_id = ?", [experiment.id])
    assert cases == [{"n": 12}]
    (row,) = s.rows("SELECT status, version, environment, prices FROM experiments WHERE status = 'completed'")
    environment = json.loads(row["environment"])
    assert environment["python"] and "duckdb" in environment["packages"]
    assert json.loads(row["prices"])["mock-model"] == {"input": 1.0, "output": 2.0}
    assert experiment.summary.cost_usd == pytest.approx(sum(r["cost_usd"] for r in rows))
    # The end of the run compacted what it wrote: one file per partition.
    for table in ("trials", "spans", "scores"):
        assert len(list((store / table / f"experiment_id={experiment.id}").glob("*.parquet"))) == 1


def test_environment_never_records_environment_variable_values(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value-123")
    experiment = evaluate("mock", "arithmetic", cases=1, attempts=1, store=tmp_path / "s", progress="none")
    stored = (tmp_path / "s").rglob("*.parquet")
    assert all(b"sk-secret-value-123" not in path.read_bytes() for path in stored)
    assert "sk-secret" not in json.dumps(experiment.environment)


def test_wrong_answers_and_failures_are_counted_apart(tmp_path):
    experiment = evaluate(
        "mock",
        "arithmetic",
        cases=40,
        attempts=3,
        store=tmp_path / "s",
        progress="none",
        agent_options={"wrong_rate": "0.25", "fail_rate": "0.2", "failure": "llm_error", "seed": "4"},
    )
    summary = experiment.summary
    assert summary.trials == 120 and summary.passed + summary.wrong + summary.failed == 120
    assert summary.failures_by_type == {"llm_error": summary.failed}
    assert summary.infrastructure_failures == summary.failed  # a provider 500 is the API's fault
    assert 0 < summary.wrong and 0 < summary.failed
    assert summary.pass_rate == pytest.approx(summary.passed / 120)  # failures stay in the denominator
    low, high = summary.pass_rate_ci95
    assert low < summary.pass_rate < high


# --- failure types from small agents ------------------------------------------------------


@tool
def broken_tool(x: str) -> str:
    raise KeyError("no such record")


@llm_call(model="m")
def failing_model(prompt: str) -> str:
    raise ValueError("the model returned garbage")


class RateLimited(Exception):
    status_code = 429
    code = "rate_limit_exceeded"
    headers = {"retry-after": "0.05"}


class QuotaGone(Exception):
    status_code = 429
    code = "insufficient_quota"


class ServerDown(Exception):
    status_code = 503


@llm_call(model="m")
def rate_limited_model(prompt: str) -> str:
    raise RateLimited("slow down")


@llm_call(model="m")
def quota_model(prompt: str) -> str:
    raise QuotaGone("You exceeded your current quota")


@llm_call(model="m")
def down_model(prompt: str) -> str:
    raise ServerDown("service unavailable")


@llm_call(model="m")
def truncated_model(prompt: str) -> str:
    set_llm_response(finish_reasons="length", input_tokens=5, output_tokens=100)
    return "The answer is a very long"


def run_agent(tmp_path, fn, *cases, timeout=5.0, **kwargs):
    cases = cases or (q("only"),)
    return evaluate(fn, dataset(*cases), attempts=1, store=tmp_path / "s", timeout=timeout, progress="none", **kwargs)


@pytest.mark.parametrize(
    ("behaviour", "failure_type", "infrastructure"),
    [
        (lambda message: broken_tool(message), "tool_error", False),
        (lambda message: failing_model(message), "llm_error", False),
        (lambda message: quota_model(message), "quota_exhausted", True),
        (lambda message: down_model(message), "llm_error", True),
        (lambda message: truncated_model(message), "output_truncated", False),
        (lambda message: "", "empty_output", False),
        (lambda message: None, "empty_output", False),
        (lambda message: " \u200b\u00a0\ufeff\u200d ", "empty_output", False),  # zero-width: str.strip leaves them
        (lambda message: (_ for _ in ()).throw(MaxStepsExceeded("10 steps")), "max_steps_exceeded", False),
        (lambda message: (_ for _ in ()).throw(InvalidModelOutput("not JSON")), "invalid_model_output", False),
        (lambda message: 1 / 0, "agent_error", False),
    ],
)
def test_failure_types(tmp_path, behaviour, failure_type, infrastructure):
    experiment = run_agent(tmp_path, behaviour)
    (row,) = trials(tmp_path / "s", experiment.id)
    assert (row["outcome"], row["passed"], row["failure_type"], row["infrastructure"]) == (
        "failed",
        False,
        failure_type,
        infrastructure,
    )
    assert row["error_message"]


def test_a_tool_error_the_agent_handles_is_not_a_failure(tmp_path):
    def careful(message):
        try:
            broken_tool("x")
        except KeyError:
            return "The lookup failed, so I cannot say; 2 + 2 is 4 anyway."

    (row,) = trials(tmp_path / "s", run_agent(tmp_path, careful).id)
    assert (row["outcome"], row["failure_type"]) == ("passed", None)


def test_rate_limits_are_waited_out_then_typed_as_infrastructure(tmp_path):
    calls = []

    def agent_fn(message):
        calls.append(time.monotonic())
        return rate_limited_model(message)

    experiment = run_agent(tmp_path, agent_fn, timeout=0.5)
    (row,) = trials(tmp_path / "s", experiment.id)
    assert (row["failure_type"], row["infrastructure"]) == ("timeout_after_rate_limit", True)
    assert len(calls) >= 3  # retried after each Retry-After (0.05 s) until the trial's time ran out
    assert "rate-limited attempt" in row["error_message"]


def test_a_rate_limit_that_clears_gives_an_answer_and_the_last_try_is_scored(tmp_path):
    tries = []

    def flaky(message):
        tries.append(1)
        if len(tries) < 3:
            rate_limited_model(message)
        return "4"

    experiment = run_agent(tmp_path, flaky)
    (row,) = trials(tmp_path / "s", experiment.id)
    assert (row["outcome"], len(tries)) == ("passed", 3)
    spans = Store(tmp_path / "s").rows("SELECT trace_id, name FROM spans WHERE trial_id = ?", [row["trial_id"]])
    assert sum(s["name"].startswith("invoke_agent") for s in spans) == 3  # every try is kept in the trace
    assert row["trace_id"] in {s["trace_id"] for s in spans}


@llm_call(model="m")
def planning_model(prompt: str) -> str:
    set_llm_response(input_tokens=10, output_tokens=5)
    return "a plan"


def test_usage_of_the_try_that_counts_is_apart_from_every_try(tmp_path):
    tries = []

    def flaky(message):  # each try spends 10 + 5 tokens, then the first two are rate limited
        tries.append(1)
        planning_model(message)
        if len(tries) < 3:
            rate_limited_model(message)
        return "4"

    experiment = run_agent(tmp_path, flaky)
    usage = "input_tokens, output_tokens, input_tokens_all_tries, output_tokens_all_tries"
    (row,) = Store(tmp_path / "s").rows(f"SELECT {usage} FROM trials")
    assert row == {"input_tokens": 10, "output_tokens": 5, "input_tokens_all_tries": 30, "output_tokens_all_tries": 15}
    (stored,) = Store(tmp_path / "s").rows(f"SELECT {usage} FROM trial_history")
    assert stored == row
    summary = experiment.summary
    assert (summary.input_tokens, summary.input_tokens_all_tries) == (10, 30)


def test_an_agent_that_streams_its_reply_is_scored_on_the_text_it_streamed(tmp_path):
    """A generator of chunks (plain text, or an SDK's deltas) was scored as its repr, "<generator object ...>":
    a wrong answer every time, and a pass rate of 0% for an agent that answered right."""

    def streams(question: str):
        yield "it is "
        yield {"choices": [{"delta": {"content": "4"}}]}  # an OpenAI chunk, as a dict

    async def streams_async(question: str):
        for chunk in ("it ", "is ", "4"):
            await asyncio.sleep(0)
            yield chunk

    for streaming in (streams, streams_async):
        experiment = evaluate(streaming, dataset(q("a"), q("b")), attempts=1, store=tmp_path, progress="none")
        assert experiment.summary.passed == 2, streaming.__name__
        replies = {row["reply"] for row in trials(tmp_path, experiment.id)}
        assert replies == {"it is 4"}, streaming.__name__


class _Block:
    """An Anthropic SDK content block."""

    def __init__(self, type_: str, text: str | None = None) -> None:
        self.type, self.text = type_, text


class _Message:
    """An SDK message returned as it is: its ``content`` a list of blocks (Anthropic), or None (an OpenAI message that
    only calls tools)."""

    def __init__(self, content) -> None:
        self.content, self.tool_calls = content, [{"function": {"arguments": '{"answer": 4}'}}]

    def __repr__(self) -> str:
        return f"Message(content={self.content!r}, tool_calls={self.tool_calls!r})"


def test_a_reply_that_is_not_a_string_is_scored_on_its_text_never_on_its_repr(tmp_path):
    """An SDK message, bytes, or a content of None were scored as their Python repr: "Message(content=None,
    tool_calls=[... 4 ...])" passed a containment check for "4", and a message with no text was a wrong answer, not
    `empty_output`; an Anthropic message's text blocks, or b"4", were stored as a repr."""
    replies = {
        "blocks": _Message([_Block("text", "it is "), _Block("tool_use"), _Block("text", "4")]),
        "parts": {"content": [{"type": "text", "text": "4"}]},
        "bytes": b"4",
        "number": 4,
        "no-text": _Message(None),
        "dict-no-text": {"content": None, "role": "assistant", "tool_calls": [{"arguments": "4"}]},
    }

    experiment = run_replies(tmp_path, replies)

    rows = {row["case_id"]: row for row in trials(tmp_path, experiment.id)}
    assert {key: rows[key]["reply"] for key in ("blocks", "parts", "bytes", "number")} == {
        "blocks": "it is 4",
        "parts": "4",
        "bytes": "4",
        "number": "4",
    }
    assert {key: rows[key]["outcome"] for key in ("blocks", "parts", "bytes", "number")} == dict.fromkeys(
        ("blocks", "parts", "bytes", "number"), "passed"
    )
    for key in ("no-text", "dict-no-text"):
        assert (rows[key]["outcome"], rows[key]["failure_type"]) == ("failed", "empty_output"), rows[key]


class _Answer:
    """An agent's own result object without a ``content``, and without a text form of its own."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def __repr__(self) -> str:
        return f"_Answer(answer={self.answer!r})"


class _Verdict:
    """An object whose own ``__str__`` gives its text, as a framework's response object has."""

    def __str__(self) -> str:
        return "it is 4"


def test_a_reply_that_could_only_be_read_as_its_repr_is_the_agents_error_not_a_pass(tmp_path):
    """A dict without a ``content``, a list, a tuple or an object without a text form of its own was stored and scored
    as its Python repr: {'answer': '4'}, ['4'] and _Answer(answer='4') all passed a check for "4", whatever the agent
    meant. Each is now that trial's agent_error saying what to return; numbers and objects with their own ``__str__``
    still give their text."""
    replies = {
        "dict": {"answer": "4"},
        "list": ["4"],
        "tuple": ("4",),
        "object": _Answer("4"),
        "number": 4,
        "own-str": _Verdict(),
        "function": lambda question: "4",  # a factory named without --agent-option returns the agent it built
    }

    experiment = run_replies(tmp_path, replies)

    rows = {row["case_id"]: row for row in trials(tmp_path, experiment.id)}
    for key, kind in (("dict", "dict"), ("list", "list"), ("tuple", "tuple"), ("object", "_Answer")):
        assert (rows[key]["outcome"], rows[key]["failure_type"], rows[key]["reply"]) == ("failed", "agent_error", None)
        assert f"the agent returned a {kind}, not its reply's text" in rows[key]["error_message"], rows[key]
    assert "the agent returned a function, not its reply's text" in rows["function"]["error_message"]
    assert "give an --agent-option" in rows["function"]["error_message"]  # the factory rule's trap, said
    assert {key: (rows[key]["outcome"], rows[key]["reply"]) for key in ("number", "own-str")} == {
        "number": ("passed", "4"),
        "own-str": ("passed", "it is 4"),
    }


def test_a_pydantic_model_without_content_is_the_agents_error_not_a_pass(tmp_path):
    """pydantic's ``__str__`` lists a model's fields (``answer="I don't know; tried 4"``), a repr by another name:
    a structured output returned whole passed a check for "4". It is now that trial's agent_error, as a dataclass
    is; a model with a ``content`` string is still read as that text."""

    class Answer(pydantic.BaseModel):
        answer: str

    class Reply(pydantic.BaseModel):
        content: str

    class Wrapped(pydantic.BaseModel):
        content: Answer

    replies = {
        "model": Answer(answer="I don't know; tried 4 things"),
        "root": pydantic.RootModel[list[str]](["4"]),
        "nested": Wrapped(content=Answer(answer="4")),
        "content": Reply(content="it is 4"),
    }

    experiment = run_replies(tmp_path, replies)

    rows = {row["case_id"]: row for row in trials(tmp_path, experiment.id)}
    for key, returned in (
        ("model", "the agent returned a Answer"),
        ("root", "the agent returned a RootModel[list[str]]"),
        ("nested", "the agent returned a Wrapped whose content is a Answer"),
    ):
        assert (rows[key]["outcome"], rows[key]["failure_type"], rows[key]["reply"]) == ("failed", "agent_error", None)
        assert f"{returned}, not its reply's text" in rows[key]["error_message"], rows[key]
    assert (rows["content"]["outcome"], rows["content"]["reply"]) == ("passed", "it is 4")


def test_an_openai_response_returned_whole_is_scored_on_its_text_never_on_its_repr(tmp_path, model_server):
    """An agent that returned the SDK's response itself, not its text, was stored and scored as its repr: a
    completion that only called a tool, ``ChatCompletion(... arguments='{"answer": 4}' ...)``, passed a check for
    "4", and every reply held ids and token counts. A chat completion's reply is its first choice's text (none is
    empty_output), a Responses API response's its ``output_text``: as the real openai client returns them."""
    import model_servers as ms
    import openai

    replies = {"chat": ms.text("It is 4."), "tools-only": ms.tool_call("calc", {"answer": 4}), "responses": None}
    # A Responses API request carries no chat messages: it gets the default, the text.
    model_server.responder = lambda request: replies.get(request.last_user_text()) or ms.text("It is 4.")
    client = openai.OpenAI(base_url=model_server.openai_url, api_key="test-key", max_retries=0)

    def returns_the_response(question: str):
        if question == "responses":
            return client.responses.create(model="m", input=question)
        return client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}])

    experiment = evaluate(
        returns_the_response, dataset(*(q(key, key) for key in replies)), attempts=1, store=tmp_path, progress="none"
    )

    rows = {row["case_id"]: row for row in trials(tmp_path, experiment.id)}
    assert {key: (row["outcome"], row["failure_type"], row["reply"]) for key, row in rows.items()} == {
        "chat": ("passed", None, "It is 4."),
        "tools-only": ("failed", "empty_output", ""),
        "responses": ("passed", None, "It is 4."),
    }


class _Sneaky(str):
    """A ``str`` subclass whose methods raise: the harness must read it as the plain text it holds."""

    def strip(self, *args):
        raise RuntimeError("strip")

    def lower(self):
        raise RuntimeError("lower")


def test_a_reply_of_a_str_subclass_is_read_as_its_text_and_never_ends_the_run(tmp_path):
    """A reply that was a ``str`` subclass reached the harness's own code as it was: its ``strip`` raising in the
    failure typing stopped the whole run with a traceback (the experiment `failed`, the trials after it never run).
    Its text is now taken as a plain ``str``, as a reply and as a dict's ``content``."""
    replies = {"subclass": _Sneaky("4"), "content": {"content": _Sneaky("it is 4")}, "plain": "4"}

    experiment = run_replies(tmp_path, replies)

    assert experiment.status == "completed"
    rows = {row["case_id"]: row for row in trials(tmp_path, experiment.id)}
    assert {key: (row["outcome"], row["reply"]) for key, row in rows.items()} == {
        "subclass": ("passed", "4"),
        "content": ("passed", "it is 4"),
        "plain": ("passed", "4"),
    }


def test_a_simulated_users_message_of_a_str_subclass_is_read_as_its_text(tmp_path):
    """The simulator's next message was stripped with its own ``strip``: one that raised ended the conversation as the
    agent's error. It is read as the plain text it holds, and the conversation goes on."""

    def support(message, messages):
        return "refund approved" if "order 1234" in message else "Which order?"

    case = Case(id="sim", input="Refund please.", expected_output="refund approved", simulated_user="Wants a refund.")
    experiment = run_agent(tmp_path, support, case, user_simulator=lambda goal, messages: _Sneaky(" order 1234 "))
    (row,) = trials(tmp_path / "s", experiment.id)
    assert (row["outcome"], row["failure_type"], row["reply"]) == ("passed", None, "refund approved")


def test_a_sync_agent_that_hangs_times_out_and_the_run_moves_on(tmp_path):
    release = threading.Event()
    hung: list[threading.Thread] = []
    returned = []

    def hangs(message):
        if message == "hang":
            hung.append(threading.current_thread())
            release.wait(120)
            returned.append("late")
            return "late answer"
        return "4"

    experiment = run_agent(tmp_path, hangs, q("a", "hang"), q("b"), timeout=0.3)
    assert returned == []  # the run ended while the agent still hung: it did not wait for it
    rows = {r["case_id"]: r for r in trials(tmp_path / "s", experiment.id)}
    assert rows["a"]["failure_type"] == "timeout" and rows["a"]["infrastructure"] is False
    assert rows["b"]["outcome"] == "passed"
    release.set()  # the abandoned thread finishes; what it returns is discarded
    (thread,) = hung
    thread.join(30)
    assert not thread.is_alive(), "the abandoned agent thread did not finish once released"
    assert returned == ["late"] and len(trials(tmp_path / "s", experiment.id)) == 2


def test_a_sync_agent_runs_on_reused_workers_and_a_hung_call_holds_only_its_own(tmp_path):
    release = threading.Event()
    workers: list[threading.Thread] = []  # the Thread objects themselves: an ident can be recycled, an object not

    def answer(message):
        workers.append(threading.current_thread())
        if message == "hang":
            release.wait(120)
        return "4"

    cases = [q("hang", "hang")] + [q(f"c{i:03d}") for i in range(200)]
    try:
        experiment = run_agent(tmp_path, answer, *cases, timeout=0.5, concurrency=2)
    finally:
        release.set()
    rows = trials(tmp_path / "s", experiment.id)
    assert len(rows) == 201 and sum(r["outcome"] == "passed" for r in rows) == 200
    assert next(r for r in rows if r["case_id"] == "hang")["failure_type"] == "timeout"
    # Two calls in flight at most, one of them hung for a while: a thread per call would have started 201.
    distinct = {id(t): t for t in workers}
    assert len(workers) == 201 and len(distinct) <= 3


def test_an_async_agent_that_hangs_is_cancelled_at_the_timeout(tmp_path):
    cancelled = []

    async def hangs(message):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    experiment = run_agent(tmp_path, hangs, timeout=0.2)
    (row,) = trials(tmp_path / "s", experiment.id)
    assert row["failure_type"] == "timeout" and cancelled == [True]


def test_an_async_agent_that_cancels_its_own_task_fails_its_trial_not_the_run(tmp_path):
    # Its task is the worker's: the cancel ended the worker, and the run with a CancelledError.
    async def cancels_itself(message):
        if message == "cancel":
            asyncio.current_task().cancel()
            await asyncio.sleep(1)
        return "4"

    cases = [q("cancel", "cancel"), *(q(f"c{i}") for i in range(5))]
    experiment = run_agent(tmp_path, cancels_itself, *cases, concurrency=1)
    rows = {r["case_id"]: r for r in trials(tmp_path / "s", experiment.id)}
    assert experiment.status == "completed" and len(rows) == 6
    assert all(rows[f"c{i}"]["outcome"] == "passed" for i in range(5))
    assert (rows["cancel"]["outcome"], rows["cancel"]["failure_type"]) == ("failed", "agent_error")


def test_sync_agents_keep_the_trace_context_in_their_threads(tmp_path):
    @tool
    def lookup(country: str) -> str:
        return "Paris"

    @agent
    def sync_agent(message):
        assert threading.current_thread().name == "agenteval-trial"
        return lookup("France")

    experiment = run_agent(tmp_path, sync_agent, q("c", "capital?", "Paris"))
    spans = Store(tmp_path / "s").rows(
        "SELECT name, scope_name, span_id, parent_span_id, trial_id FROM spans WHERE experiment_id = ?",
        [experiment.id],
    )
    root = next(s for s in spans if s["scope_name"] == "agenteval.runner")
    decorated = next(s for s in spans if s["name"] == "invoke_agent sync_agent" and s is not root)
    tool_span = next(s for s in spans if s["name"] == "execute_tool lookup")
    assert decorated["parent_span_id"] == root["span_id"]  # carried into the agent's thread
    assert tool_span["parent_span_id"] == decorated["span_id"]
    assert len({s["trial_id"] for s in spans}) == 1


# --- conversations ---------------------------------------------------------------------------


def test_written_turns_get_the_history_and_must_not_contain_checks_every_reply(tmp_path):
    seen = []

    def chat(message, messages):
        seen.append([m["content"] for m in messages])
        return "PWNED" if len(messages) == 1 else "not eligible"

    case = Case(
        id="refund",
        input="It's order 1234.",
        expected_output="not eligible",
        turns=("I want to return my order.", "It's order 1234."),
        must_not_contain=("PWNED",),
        category="refunds",
    )
    experiment = run_agent(tmp_path, chat, case)
    assert seen == [["I want to return my order."], ["I want to return my order.", "PWNED", "It's order 1234."]]
    (row,) = trials(tmp_path / "s", experiment.id)
    assert row["reply"] == "not eligible" and row["outcome"] == "wrong"  # right answer, forbidden text earlier
    scores = Store(tmp_path / "s").rows("SELECT scorer, passed FROM scores ORDER BY scorer")
    assert scores == [{"scorer": "answer_match", "passed": True}, {"scorer": "must_not_contain", "passed": False}]


def test_simulated_user_drives_the_conversation_and_is_not_counted(tmp_path):
    @llm_call(model="mock-model")
    def user_model(goal: str) -> str:
        set_llm_response(input_tokens=1000, output_tokens=1000)
        return "x"

    def simulator(goal, messages):
        user_model(goal)
        asked = sum(m["role"] == "user" for m in messages)
        return None if "approved" in messages[-1]["content"] else f"detail {asked}"

    @llm_call(model="mock-model")
    def agent_model(text: str) -> str:
        set_llm_response(input_tokens=10, output_tokens=2)
        return text

    def support(message, messages):
        agent_model(message)
        return "refund approved" if len(messages) >= 5 else "Tell me more."

    case = Case(
        id="sim",
        input="My headphones broke.",
        expected_output="refund approved",
        simulated_user="Wants a refund.",
        max_turns=4,
        category="sim",
    )
    experiment = run_agent(tmp_path, support, case, user_simulator=simulator)
    (row,) = trials(tmp_path / "s", experiment.id)
    assert row["outcome"] == "passed" and row["reply"] == "refund approved"
    assert (row["input_tokens"], row["output_tokens"]) == (30, 6)  # three agent turns; the simulator's left out
    roles = Store(tmp_path / "s").rows(
        "SELECT name, json_extract_string(attributes, '$.\"agenteval.role\"') AS role FROM spans "
        "WHERE experiment_id = ? AND name LIKE 'chat%'",
        [experiment.id],
    )
    # The simulator was asked three times: twice it answered, the third time it ended the conversation.
    assert sorted(r["role"] or "agent" for r in roles) == ["agent"] * 3 + ["simulated_user"] * 3


def test_simulated_user_stops_at_max_turns(tmp_path):
    def stubborn(message, messages):
        return "Tell me more."

    case = Case(id="sim", input="Hi", expected_output="", simulated_user="never satisfied", max_turns=3, category="s")
    seen = []
    experiment = run_agent(tmp_path, stubborn, case, user_simulator=lambda goal, m: seen.append(len(m)) or "more")
    assert seen == [2, 4]  # user messages: the input and two simulated ones = max_turns 3
    (row,) = trials(tmp_path / "s", experiment.id)
    assert row["outcome"] == "passed"


# --- agents by name, options, versions ------------------------------------------------------


AGENT_FILE = """
def make_agent(answer="4", prefix=""):
    def answer_it(message):
        return prefix + answer
    return answer_it

def plain(message):
    return {"content": "4"}
"""


def test_agents_from_a_file_with_the_factory_rule(tmp_path):
    path = tmp_path / "my_agent.py"
    path.write_text(AGENT_FILE)
    plain = evaluate(f"{path}:plain", dataset(q("a")), attempts=1, store=tmp_path / "s", progress="none")
    built = evaluate(
        f"{path}:make_agent",
        dataset(q("a")),
        attempts=1,
        store=tmp_path / "s",
        progress="none",
        agent_options={"answer": "5", "prefix": "it is "},
    )
    assert plain.summary.passed == 1 and built.summary.wrong == 1
    assert plain.version != built.version
    path.write_text(AGENT_FILE + "\n# changed\n")
    again = evaluate(f"{path}:plain", dataset(q("a")), attempts=1, store=tmp_path / "s", progress="none")
    assert again.version != plain.version  # a change of the source file is a new version


def test_bad_agent_specs_say_what_is_wrong(tmp_path):
    for spec, message in [
        ("nonsense", "expected mock, an installed plugin.s name .*MODULE:ATTR or FILE.py:ATTR"),
        ("no_such_module_xyz:agent", "cannot import no_such_module_xyz"),
        ("json:no_such_attr", "json has no attribute 'no_such_attr'"),
        (f"{tmp_path}/missing.py:agent", "no such file"),
    ]:
        with pytest.raises(ValueError, match=message):
            evaluate(spec, dataset(q("a")), store=tmp_path / "s", progress="none")


def test_resume_refuses_a_changed_agent_or_dataset(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(AGENT_FILE)
    data = tmp_path / "cases.jsonl"
    data.write_text(json.dumps({"input": "2+2?", "expected_output": "4"}) + "\n")
    first = evaluate(f"{path}:plain", str(data), attempts=1, store=tmp_path / "s", progress="none")
    path.write_text(AGENT_FILE + "\n# edited\n")
    with pytest.raises(RunRefused, match="the agent changed"):
        evaluate(f"{path}:plain", str(data), store=tmp_path / "s", resume=first.id, progress="none")
    path.write_text(AGENT_FILE)
    data.write_text(json.dumps({"input": "2+3?", "expected_output": "5"}) + "\n")
    with pytest.raises(RunRefused, match="dataset .* changed"):
        evaluate(f"{path}:plain", str(data), store=tmp_path / "s", resume=first.id, progress="none")
    with pytest.raises(RunRefused, match="there is no interrupted experiment"):
        evaluate("mock", "arithmetic", store=tmp_path / "empty", resume=True, progress="none")


def test_a_decorated_partial_or_callable_object_given_as_the_agent_is_versioned_by_what_it_wraps():
    # Without a source file the version hashes the agent's code; a decorated partial or callable object is an
    # agenteval object wrapping the user's, whose code and bound arguments must count.
    import functools

    from agenteval.agents._loading import load_agent

    def reply(prefix: str, message: str) -> str:
        return prefix + message

    class Polite:
        def __call__(self, message: str) -> str:
            return "please " + message

    class Curt:
        def __call__(self, message: str) -> str:
            return message

    loaded = [load_agent(agent(functools.partial(reply, p))) for p in ("a", "b")]
    loaded += [load_agent(agent(Polite())), load_agent(agent(Curt()))]
    assert all(a.provenance["version_from"] == "code" for a in loaded)
    assert len({a.version for a in loaded}) == 4
    assert load_agent(agent(functools.partial(reply, "a"))).version == loaded[0].version


def test_resume_without_an_id_after_a_completed_run_names_the_experiment_to_give(tmp_path):
    """``--resume --retry-failed all`` with no id after a run that completed said only "there is no interrupted
    experiment", though naming the completed one re-runs its failed trials."""
    done = evaluate("mock", "arithmetic", cases=2, attempts=1, store=tmp_path, progress="none")
    with pytest.raises(RunRefused) as refused:
        evaluate("mock", "arithmetic", cases=2, store=tmp_path, resume=True, retry_failed="all", progress="none")
    assert str(refused.value) == (
        f"cannot resume: there is no interrupted experiment in {tmp_path}; to re-run the failed trials of a completed "
        f"one (with --retry-failed), name it: --resume {done.id} is the newest, agenteval experiments lists them all"
    )


def test_an_agent_file_is_one_version_however_its_path_is_written(tmp_path, monkeypatch):
    """The version hashed the spec as typed: `-a a.py:plain` and `-a ./a.py:plain` were two agents, so a resume
    from another folder (or a shard in another checkout) was refused as "the agent changed"."""
    from agenteval.agents._loading import load_agent
    from agenteval.analysis import _experiments as ex

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "a.py").write_text(AGENT_FILE)
    data = tmp_path / "cases.jsonl"
    data.write_text("".join(json.dumps({"input": f"{n}+0?", "expected_output": str(n)}) + "\n" for n in range(4)))
    store = tmp_path / "s"
    monkeypatch.chdir(checkout)
    versions = {load_agent(spec).version for spec in ("a.py:plain", "./a.py:plain", f"{checkout / 'a.py'}:plain")}
    assert len(versions) == 1
    first = evaluate("a.py:plain", str(data), attempts=1, store=store, progress="none")
    monkeypatch.chdir(tmp_path)
    resumed = evaluate("checkout/a.py:plain", str(data), store=store, resume=first.id, progress="none")
    assert resumed.id == first.id and resumed.version == first.version and resumed.summary.trials == 4

    # An experiment recorded when the version hashed the spec as typed still resumes.
    legacy = load_agent("checkout/a.py:plain")._version_of("checkout/a.py:plain")
    assert legacy != first.version
    old = evaluate("checkout/a.py:plain", str(data), attempts=1, store=store, progress="none")
    saved = ex.find(Store(store), old.id)
    saved.version, saved.status = legacy, ex.INTERRUPTED
    ex.save(Store(store), saved)
    again = evaluate("checkout/a.py:plain", str(data), store=store, resume=old.id, progress="none")
    assert again.status == "completed" and again.summary.trials == 4


def test_retry_failed_infra_supersedes_and_keeps_both(tmp_path):
    run = dict(
        cases=10,
        attempts=2,
        store=tmp_path / "s",
        progress="none",
        agent_options={"fail_rate": "0.5", "failure": "quota_exhausted", "seed": "1"},
    )
    first = evaluate("mock", "arithmetic", **run)
    failed = first.summary.failed
    assert failed > 0
    again = evaluate("mock", "arithmetic", resume=first.id, retry_failed="infra", **run)
    assert again.id == first.id and again.summary.this_run["trials"] == failed
    s = Store(run["store"])
    assert s.rows("SELECT count(*) AS n FROM trial_history")[0]["n"] == 20 + failed  # both kept
    assert again.summary.trials == 20  # figures use the newest attempt of each
    superseded = s.rows("SELECT count(*) AS n FROM trial_history WHERE supersedes IS NOT NULL")[0]["n"]
    assert superseded == failed
    # The trials view is what the figures count: one row per (case, attempt), the newest try of each.
    (current,) = s.rows(
        "SELECT count(*) AS n, count(DISTINCT (case_id, attempt)) AS slots, sum(passed::INT) AS p FROM trials"
    )
    assert current == {"n": 20, "slots": 20, "p": again.summary.passed}


def test_a_run_leaves_the_garbage_collector_as_it_found_it(tmp_path):
    import gc

    assert gc.get_freeze_count() == 0
    evaluate("mock", "arithmetic", cases=8, attempts=1, store=tmp_path / "a", progress="none")
    assert gc.get_freeze_count() == 0  # the run froze its long-lived objects, then let them go
    gc.freeze()  # an application that froze its own heap keeps it frozen, untouched
    try:
        frozen = gc.get_freeze_count()
        evaluate("mock", "arithmetic", cases=8, attempts=1, store=tmp_path / "b", progress="none")
        # still frozen (an unfreeze would give 0), and nothing added (a few frozen objects were freed)
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def test_a_run_allocates_arrow_from_the_system_and_gives_the_pool_back(tmp_path, monkeypatch):
    import pyarrow as pa

    from agenteval.scorers import Scorer

    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    seen = []

    def pool_in_use(case, features):
        seen.append(pa.default_memory_pool().backend_name)
        return 1.0

    before = pa.default_memory_pool().backend_name
    evaluate(
        "mock",
        "arithmetic",
        cases=3,
        attempts=1,
        store=tmp_path,
        progress="none",
        scorers=[Scorer("pool", fn=pool_in_use)],
    )
    assert seen == ["system"] * 3
    assert pa.default_memory_pool().backend_name == before  # an application's own Arrow work is left as it was


def test_trials_finishing_faster_than_the_tick_are_scored_and_saved_a_thousand_at_a_time(tmp_path):
    """However fast the agent answers, one micro-batch holds at most BATCH_TRIALS trials (and those the other
    workers finished before the tick woke): a run's memory does not grow with its speed, and every trial is
    scored and saved once."""
    import pyarrow as pa

    from agenteval.run._scheduler import BATCH_TRIALS
    from agenteval.scorers import batch_scorer

    batches: list[int] = []

    @batch_scorer(name="counted")
    def counted(features, cases):
        batches.append(features.num_rows)
        return pa.array([1.0] * features.num_rows)

    async def instant(question: str) -> str:
        return "4"

    cases = [q(f"c{i:05d}") for i in range(3 * BATCH_TRIALS)]
    concurrency = 4
    experiment = evaluate(
        instant,
        dataset(*cases),
        attempts=1,
        concurrency=concurrency,
        store=tmp_path,
        progress="none",
        scorers=[counted],
    )
    assert sum(batches) == len(cases) and len(batches) >= 3
    assert max(batches) <= BATCH_TRIALS + concurrency
    assert Store(tmp_path).rows(
        "SELECT count(*) AS n, count(DISTINCT case_id) AS cases FROM trials WHERE experiment_id = ?",
        [experiment.experiment_id],
    ) == [{"n": len(cases), "cases": len(cases)}]


def test_the_run_command_chooses_the_system_allocator_before_pyarrow_loads(monkeypatch):
    import subprocess
    import sys

    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)

    def backend(first: str) -> str:
        code = first + "import pyarrow as pa; print(pa.default_memory_pool().backend_name)"
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()

    choose = "from agenteval.run._memory import system_allocator_for_this_process as c; c(); "
    assert backend(choose) == "system"
    assert backend("import pyarrow; " + choose) == backend("")  # loaded already: its default stays


def test_runs_restore_signal_handlers_and_work_from_other_threads(tmp_path):
    import signal

    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    evaluate("mock", "arithmetic", cases=4, attempts=1, store=tmp_path / "main", progress="none")
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    done = {}
    worker = threading.Thread(
        target=lambda: done.setdefault(
            "run", evaluate("mock", "arithmetic", cases=4, attempts=1, store=tmp_path / "thread", progress="none")
        )
    )
    worker.start()
    worker.join(timeout=60)
    assert done["run"].status == "completed"  # signals reach the main thread only: no handlers, no error


def test_an_ambiguous_id_prefix_is_an_agenteval_error_naming_the_experiments(tmp_path):
    """Resuming by a prefix that two runs share raised a plain ValueError from the Python API, where every error a
    user can cause is an AgentevalError (the command line already showed it as one line)."""
    from agenteval.analysis import find
    from agenteval.errors import AgentevalError
    from agenteval.store import Store

    store = tmp_path / "store"
    ids = [
        evaluate("mock", "arithmetic", cases=3, attempts=1, store=store, progress="none", experiment_id=name).id
        for name in ("shared-a", "shared-b")
    ]
    for call in (
        lambda: find(Store(store), "shared-"),
        lambda: evaluate("mock", "arithmetic", store=store, resume="shared-"),
    ):
        with pytest.raises(AgentevalError) as raised:
            call()
        assert all(i in str(raised.value) for i in ids) and "is ambiguous" in str(raised.value)

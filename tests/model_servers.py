"""A loopback server that speaks the OpenAI APIs (chat completions and Responses) and the Anthropic Messages
API, plain and streamed (server-sent events in each API's own event format), so that the real SDK clients run
against it and build their real response and stream objects.

Each request is answered by the next scripted :class:`Reply` or, once the script is used up, by the responder,
a function of the :class:`Request` (for callers whose order is not known): text, tool calls, errors with the
providers' real bodies and headers (429 with and without ``Retry-After``, quota, 5xx, 529 overloaded), a reply
held past the client's timeout, a reply cut by the length limit, a stream dropped half-way. The server counts
the requests in flight, so a limiter's concurrency can be watched from the other side. Real HTTP on 127.0.0.1,
an ephemeral port; nothing leaves the machine.

It imports nothing but the standard library: the benchmarks and the Phoenix screenshot (in Phoenix's own
environment) import it too.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

from loopback_server import LoopbackServer

OPENAI = "openai"
ANTHROPIC = "anthropic"


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """A tool call the model asks for."""

    name: str
    arguments: dict[str, Any] | str
    """An object, or JSON text sent as it is: malformed text stays malformed."""
    id: str | None = None
    """None: the server numbers it, in the API's own style."""

    def json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclasses.dataclass
class Reply:
    """One scripted answer. ``status`` other than 200 sends ``error`` as the provider's error body."""

    text: str = ""
    tool_calls: list[ToolCall] = dataclasses.field(default_factory=list)
    finish: str | None = None
    """In OpenAI's chat words (``stop``, ``length``, ``tool_calls``), sent in each API's own; None: ``tool_calls``
    when there are tool calls, else ``stop``."""
    input_tokens: int = 12
    output_tokens: int = 7
    model: str | None = None
    """None: the model the request asked for."""
    status: int = 200
    error: dict[str, Any] | None = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    hold: threading.Event | None = None
    """Answer only once this is set (or ``hold_seconds`` pass): a reply slower than the client's timeout."""
    hold_seconds: float = 30.0
    drop_after: int | None = None
    """Streamed: close the connection after this many events, without finishing the message."""
    body: str | None = None
    """Sent as the whole answer, as it is (``status`` 200 and ``content_type``): a body of the wrong shape, or
    one that is not JSON at all, as a broken server or a gateway's error page gives."""
    content_type: str = "application/json"
    drip: float | None = None
    """Send the answer a few bytes at a time (streamed: an event at a time), this many seconds apart: each wait on
    the connection is short, the whole answer slow."""
    keep_alive: float | None = None
    """Streamed: send no event, only an SSE keep-alive (a comment line, a blank line) this many seconds apart, for
    ``hold_seconds`` or until the client goes: a stream that stays open and never answers."""

    @property
    def finish_reason(self) -> str:
        return self.finish or ("tool_calls" if self.tool_calls else "stop")


def text(value: str, **options: Any) -> Reply:
    return Reply(text=value, **options)


def tool_call(name: str, arguments: dict[str, Any] | str, call_id: str | None = None, **options: Any) -> Reply:
    return Reply(tool_calls=[ToolCall(name, arguments, call_id)], **options)


def truncated(value: str = "The answer is") -> Reply:
    return Reply(text=value, finish="length")


def rate_limited(retry_after: float | None = None, retry_after_ms: float | None = None) -> Reply:
    headers = {}
    if retry_after is not None:
        headers["retry-after"] = f"{retry_after:g}"
    if retry_after_ms is not None:
        headers["retry-after-ms"] = f"{retry_after_ms:g}"
    return Reply(status=429, error={"kind": "rate_limit"}, headers=headers)


def quota_exhausted() -> Reply:
    """OpenAI: 429 ``insufficient_quota``; Anthropic: 400 "Your credit balance is too low"."""
    return Reply(status=0, error={"kind": "quota"})


def server_error(status: int = 500, retry_after: float | None = None) -> Reply:
    headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
    return Reply(status=status, error={"kind": "server"}, headers=headers)


def bad_request() -> Reply:
    return Reply(status=400, error={"kind": "bad_request"})


def overloaded() -> Reply:
    """Anthropic's 529 ``overloaded_error`` (OpenAI clients get a 503)."""
    return Reply(status=0, error={"kind": "overloaded"})


def slow(seconds: float = 30.0, then: Reply | None = None) -> Reply:
    reply = dataclasses.replace(then or text("late"))
    reply.hold_seconds = seconds
    reply.hold = threading.Event()
    return reply


def keeping_alive(every: float = 0.05) -> Reply:
    return Reply(text="never sent", keep_alive=every)


def dropped(after: int = 2) -> Reply:
    return Reply(text="This reply never ends because the connection", drop_after=after)


@dataclasses.dataclass
class Request:
    """What a client sent."""

    api: str
    path: str
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    def user_texts(self) -> list[str]:
        """The texts of the user messages, in order, in either API's shape (a turn of tool results alone has none)."""
        return [t for m in self.messages if m.get("role") == "user" and (t := _text(m.get("content"))) is not None]

    def last_user_text(self) -> str:
        return (self.user_texts() or [""])[-1]

    def system_text(self) -> str:
        if self.api == ANTHROPIC:
            system = self.body.get("system") or ""
            return system if isinstance(system, str) else "".join(b.get("text", "") for b in system)
        return "".join(m.get("content") or "" for m in self.messages if m.get("role") in ("system", "developer"))


def _text(content: Any) -> str | None:
    """A message's text: its content as a string, or its text blocks joined; None when it has no text block."""
    if isinstance(content, str):
        return content
    texts = [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
    return "".join(texts) if texts else None


Responder = Callable[[Request], Reply]


class ModelServer(LoopbackServer):
    """Answers ``/v1/chat/completions`` and ``/v1/responses`` (OpenAI) and ``/v1/messages`` (Anthropic).

    ``script(...)`` queues replies, used in order; when the queue is empty, ``responder`` answers (by
    default: the text "ok"). ``requests`` lists what was received; ``in_flight`` and ``max_in_flight``
    count requests being answered at once. Use it as a context manager: it serves from a thread of its own."""

    daemon_threads = True
    request_queue_size = 1024
    """The listen backlog: socketserver's default of 5 resets connections once a few dozen clients connect at once."""

    def __init__(self, responder: Responder | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.responder: Responder = responder or (lambda request: text("ok"))
        self.queue: list[Reply] = []
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.concurrency_seen: list[int] = []
        """``in_flight`` as each request arrived, in order."""
        self._ids = itertools.count(1)
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def __enter__(self) -> ModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        for reply in self.queue:
            if reply.hold is not None:
                reply.hold.set()
        self.shutdown()
        self.server_close()

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, api: str) -> str:
        return self.openai_url if api == OPENAI else self.anthropic_url

    def script(self, *replies: Reply) -> ModelServer:
        with self.lock:
            self.queue.extend(replies)
        return self

    def next_reply(self, request: Request) -> Reply:
        with self.lock:
            self.requests.append(request)
            if self.queue:
                return self.queue.pop(0)
        return self.responder(request)

    def next_id(self) -> int:
        return next(self._ids)


Event = tuple[str | None, Any]
"""A server-sent event: its name (None: none sent) and its data (an object sent as JSON, or text)."""


@dataclasses.dataclass(frozen=True)
class _Route:
    api: str
    plain: Callable[[Reply, dict[str, Any], int], dict[str, Any]]
    events: Callable[[Reply, dict[str, Any], int], Iterator[Event]]


class _Handler(BaseHTTPRequestHandler):
    server: ModelServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: with Nagle's algorithm on, each answer would wait for the
    # client's delayed ACK (about 40 ms), which is the server's doing, not the client's.
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        route = _route(self.path)
        if route is None:
            self.send_error(404)
            return
        request = Request(route.api, self.path, body, {k.lower(): v for k, v in self.headers.items()})
        with self.server.lock:
            self.server.in_flight += 1
            self.server.max_in_flight = max(self.server.max_in_flight, self.server.in_flight)
            self.server.concurrency_seen.append(self.server.in_flight)
        try:
            reply = self.server.next_reply(request)
            if reply.hold is not None:
                reply.hold.wait(reply.hold_seconds)
            if reply.body is not None:
                self._raw(reply)
            elif reply.error is not None:
                self._error(route.api, reply)
            elif request.stream and reply.keep_alive is not None:
                self._keep_alive(reply, route.api)
            elif request.stream:
                self._stream(reply, route.events(reply, body, self.server.next_id()))
            else:
                self._json(200, route.plain(reply, body, self.server.next_id()), reply.headers, reply.drip)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with self.server.lock:
                self.server.in_flight -= 1

    def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str], drip: float | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if drip is None:
            self.wfile.write(data)
            return
        for start in range(0, len(data), 8):
            self.wfile.write(data[start : start + 8])
            self.wfile.flush()
            time.sleep(drip)

    def _raw(self, reply: Reply) -> None:
        assert reply.body is not None
        data = reply.body.encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, api: str, reply: Reply) -> None:
        assert reply.error is not None
        status, payload = _error_body(api, reply.error["kind"], reply.status)
        self._json(status, payload, reply.headers)

    def _stream_headers(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _keep_alive(self, reply: Reply, api: str) -> None:
        """Keep-alives only: SSE comments and blank lines, and Anthropic's own ``ping`` events, in turn."""
        assert reply.keep_alive is not None
        kinds = [b": keep-alive\n\n", b"\n"]
        if api == ANTHROPIC:
            kinds.append(b'event: ping\ndata: {"type": "ping"}\n\n')
        ends = time.monotonic() + reply.hold_seconds
        self._stream_headers()
        for line in itertools.cycle(kinds):  # a write to a client that went raises, which ends it
            if time.monotonic() >= ends:
                break
            self._chunk(line)
            time.sleep(reply.keep_alive)
        self.close_connection = True

    def _stream(self, reply: Reply, events: Iterator[Event]) -> None:
        self._stream_headers()
        for count, (event, data) in enumerate(events):
            if reply.drip is not None and count:
                time.sleep(reply.drip)
            if reply.drop_after is not None and count >= reply.drop_after:
                # The connection goes without the last chunk: the client sees an incomplete body.
                self.close_connection = True
                return
            line = (
                f"event: {event}\n" if event else ""
            ) + f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
            self._chunk(line.encode())
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def _route(path: str) -> _Route | None:
    """The API a request's path is for, and how it answers (a base URL may carry a prefix or a query)."""
    path = path.split("?")[0].rstrip("/")
    return next((route for suffix, route in ROUTES.items() if path.endswith(suffix)), None)


def _model(reply: Reply, body: dict[str, Any]) -> str:
    return reply.model or str(body.get("model") or "loopback-model")


def _pieces(value: str, size: int = 8) -> list[str]:
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]


def _call_id(call: ToolCall, prefix: str, number: int, index: int) -> str:
    return call.id or f"{prefix}_{number}_{index}"


def _chat_completion(reply: Reply, body: dict[str, Any], number: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": _call_id(c, "call", number, i),
                "type": "function",
                "function": {"name": c.name, "arguments": c.json()},
            }
            for i, c in enumerate(reply.tool_calls)
        ]
    choice = {"index": 0, "message": message, "finish_reason": reply.finish_reason, "logprobs": None}
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": _model(reply, body),
        "choices": [choice],
        "usage": _chat_usage(reply),
    }


def _chat_usage(reply: Reply) -> dict[str, int]:
    total = reply.input_tokens + reply.output_tokens
    return {"prompt_tokens": reply.input_tokens, "completion_tokens": reply.output_tokens, "total_tokens": total}


def _chat_chunks(reply: Reply, body: dict[str, Any], number: int) -> Iterator[Event]:
    base = {"id": f"chatcmpl-{number}", "object": "chat.completion.chunk", "created": 1_700_000_000}
    base["model"] = _model(reply, body)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    yield None, chunk({"role": "assistant", "content": ""})
    for piece in _pieces(reply.text) if reply.text else []:
        yield None, chunk({"content": piece})
    for index, call in enumerate(reply.tool_calls):
        first = {"index": index, "id": _call_id(call, "call", number, index), "type": "function"}
        yield None, chunk({"tool_calls": [{**first, "function": {"name": call.name, "arguments": ""}}]})
        for piece in _pieces(call.json()):
            yield None, chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield None, chunk({}, reply.finish_reason)
    if (body.get("stream_options") or {}).get("include_usage"):
        yield None, {**base, "choices": [], "usage": _chat_usage(reply)}
    yield None, "[DONE]"


def _response(reply: Reply, body: dict[str, Any], number: int) -> dict[str, Any]:
    """A Responses API response object, complete, or incomplete when cut by the length limit."""
    output: list[dict[str, Any]] = []
    if reply.text:
        content = [{"type": "output_text", "text": reply.text, "annotations": []}]
        message = {"type": "message", "id": f"msg_{number}", "status": "completed", "role": "assistant"}
        output.append({**message, "content": content})
    for index, call in enumerate(reply.tool_calls):
        call_id = _call_id(call, "call", number, index)
        item = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": call.name}
        output.append({**item, "arguments": call.json(), "status": "completed"})
    cut = reply.finish_reason == "length"
    usage = {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens}
    return {
        "id": f"resp_{number}",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "model": _model(reply, body),
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            **usage,
            "total_tokens": reply.input_tokens + reply.output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _response_events(reply: Reply, body: dict[str, Any], number: int) -> Iterator[Event]:
    final = _response(reply, body, number)
    started = {**final, "status": "in_progress", "output": [], "usage": None}
    sequence = itertools.count()
    yield "response.created", {"type": "response.created", "response": started, "sequence_number": next(sequence)}
    for piece in _pieces(reply.text) if reply.text else []:
        delta = {"type": "response.output_text.delta", "item_id": f"msg_{number}", "output_index": 0}
        yield delta["type"], {**delta, "content_index": 0, "delta": piece, "sequence_number": next(sequence)}
    kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    yield kind, {"type": kind, "response": final, "sequence_number": next(sequence)}


ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _anthropic_stop(reply: Reply) -> str:
    return ANTHROPIC_STOP.get(reply.finish_reason, reply.finish_reason)


def _message(reply: Reply, body: dict[str, Any], number: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    for index, call in enumerate(reply.tool_calls):
        block = {"type": "tool_use", "id": _call_id(call, "toolu", number, index), "name": call.name}
        content.append({**block, "input": _input(call.arguments)})
    return {
        "id": f"msg_{number}",
        "type": "message",
        "role": "assistant",
        "model": _model(reply, body),
        "content": content,
        "stop_reason": _anthropic_stop(reply),
        "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
    }


def _input(arguments: dict[str, Any] | str) -> Any:
    """Anthropic sends tool input as an object; text that is not JSON is sent as a string, as a broken model's is."""
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


def _message_events(reply: Reply, body: dict[str, Any], number: int) -> Iterator[Event]:
    message = {**_message(reply, body, number), "content": [], "stop_reason": None}
    message["usage"] = {"input_tokens": reply.input_tokens, "output_tokens": 1}
    yield "message_start", {"type": "message_start", "message": message}
    index = 0
    if reply.text:
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        )
        for piece in _pieces(reply.text):
            delta = {"type": "text_delta", "text": piece}
            yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": 0}
        index = 1
    for offset, call in enumerate(reply.tool_calls):
        block = {"type": "tool_use", "id": _call_id(call, "toolu", number, offset), "name": call.name, "input": {}}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
        for piece in _pieces(call.json()):
            delta = {"type": "input_json_delta", "partial_json": piece}
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
        index += 1
    stop = {"stop_reason": _anthropic_stop(reply), "stop_sequence": None}
    usage = {"output_tokens": reply.output_tokens}
    yield "message_delta", {"type": "message_delta", "delta": stop, "usage": usage}
    yield "message_stop", {"type": "message_stop"}


ROUTES = {
    "/chat/completions": _Route(OPENAI, _chat_completion, _chat_chunks),
    "/responses": _Route(OPENAI, _response, _response_events),
    "/messages": _Route(ANTHROPIC, _message, _message_events),
}
"""What each path's suffix answers."""


def _error_body(api: str, kind: str, status: int) -> tuple[int, dict[str, Any]]:
    """The status and body each provider sends for an error of ``kind``."""
    if api == ANTHROPIC:
        if kind == "rate_limit":
            return 429, _anthropic_error(
                "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"
            )
        if kind == "quota":
            message = (
                "Your credit balance is too low to access the Anthropic API. "
                "Please go to Plans & Billing to upgrade or purchase credits."
            )
            return 400, _anthropic_error("invalid_request_error", message)
        if kind == "overloaded":
            return 529, _anthropic_error("overloaded_error", "Overloaded")
        if kind == "bad_request":
            return 400, _anthropic_error("invalid_request_error", "messages: at least one message is required")
        return status, _anthropic_error("api_error", "Internal server error")
    if kind == "rate_limit":
        message = "Rate limit reached for gpt-4o-mini in organization org-test on requests per min (RPM): Limit 3."
        return 429, _openai_error(message, "requests", "rate_limit_exceeded")
    if kind == "quota":
        message = "You exceeded your current quota, please check your plan and billing details."
        return 429, _openai_error(message, "insufficient_quota", "insufficient_quota")
    if kind == "bad_request":
        return 400, _openai_error("Invalid value for 'temperature'.", "invalid_request_error", "invalid_value")
    if kind == "overloaded":
        return 503, _openai_error("The engine is currently overloaded, please try again later", "server_error", None)
    return status, _openai_error("The server had an error while processing your request.", "server_error", None)


def _anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _openai_error(message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def refused_port() -> int:
    """A loopback port nothing listens on: connecting to it is refused."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class CaseResponder:
    """A stand-in model for a dataset: for each question it calls the case's tools (with the arguments the
    case's ``metadata.check`` gives, else none), then answers with the expected output; ``overrides`` maps a
    question to a reply (or a function of the request) given instead."""

    def __init__(self, cases: Any, overrides: dict[str, Reply | Callable[[Request], Reply]] | None = None) -> None:
        self.cases = {case.input: case for case in cases}
        for case in cases:
            for turn in case.turns or ():
                self.cases.setdefault(turn, case)
        self.overrides = overrides or {}

    def __call__(self, request: Request) -> Reply:
        question = (request.user_texts() or [""])[0]
        if question in self.overrides:
            found = self.overrides[question]
            return dataclasses.replace(found) if isinstance(found, Reply) else found(request)
        case = self.cases.get(request.last_user_text()) or self.cases.get(question)
        if case is None:
            return text("I don't know.")
        if not _answered_tools(request):
            checks = (case.metadata or {}).get("check", [])
            calls = [ToolCall(c["tool"], json.dumps(c["args"])) for c in checks if "args" in c]
            if not calls and case.expected_tools:
                calls = [ToolCall(name, _arguments_for(name, case.input)) for name in case.expected_tools]
            if calls:
                return Reply(tool_calls=calls)
        return text(case.expected_output or "Done.")


def _answered_tools(request: Request) -> bool:
    """Whether the conversation already holds tool results since the last user message."""
    for message in reversed(request.messages):
        if message.get("role") == "tool":
            return True
        content = message.get("content")
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return True
        if message.get("role") == "user":
            return False
    return False


def _arguments_for(tool: str, question: str) -> dict[str, Any]:
    """Plausible arguments for a built-in tool when the case gives none."""
    return {
        "calculator": {"expression": "1 + 1"},
        "convert_currency": {"amount": 1, "from_currency": "USD", "to_currency": "EUR"},
        "country_facts": {"country": "France"},
        "get_stock_price": {"symbol": "ACME"},
        "fetch_review": {"product": "aero blender"},
        "search_documents": {"query": question},
    }.get(tool, {})

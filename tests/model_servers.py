"""Loopback servers that speak the OpenAI chat-completions API and the Anthropic Messages API, plain and
streamed (server-sent events in each API's own event format), so that the real SDK clients run against them.

Each request is answered by the next scripted :class:`Reply` (or by a responder function of the request):
text, tool calls, errors with the providers' real bodies and headers (429 with and without ``Retry-After``,
quota, 5xx, 529 overloaded), a reply held past the client's timeout, a reply cut by the length limit, a
stream dropped half-way. The server counts the requests in flight, so a limiter's concurrency can be watched
from the other side. Real HTTP on 127.0.0.1, an ephemeral port; nothing leaves the machine.

The benchmarks import it too.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OPENAI = "openai"
ANTHROPIC = "anthropic"


@dataclasses.dataclass
class Reply:
    """One scripted answer. ``status`` other than 200 sends ``error`` as the provider's error body."""

    text: str = ""
    tool_calls: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """(name, arguments as JSON text, sent as they are: malformed text stays malformed)."""
    finish: str = "stop"
    """In OpenAI's words: ``stop``, ``length``, ``tool_calls``; sent in Anthropic's to Anthropic clients."""
    usage: tuple[int, int] = (12, 7)
    status: int = 200
    error: dict[str, Any] | None = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    hold: threading.Event | None = None
    """Answer only once this is set (or ``hold_seconds`` pass): a reply slower than the client's timeout."""
    hold_seconds: float = 30.0
    drop_after: int | None = None
    """Streamed: close the connection after this many events, without finishing the message."""
    model: str | None = None


def text(value: str, **options: Any) -> Reply:
    return Reply(text=value, **options)


def tool_call(name: str, arguments: dict[str, Any] | str, **options: Any) -> Reply:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Reply(tool_calls=[(name, raw)], finish="tool_calls", **options)


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


def server_error(status: int = 500) -> Reply:
    return Reply(status=status, error={"kind": "server"})


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

    def last_user_text(self) -> str:
        """The text of the last user message, in either API's shape."""
        for message in reversed(self.messages):
            if message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):
                return content
            texts = [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
            if texts:
                return "".join(texts)
        return ""

    def system_text(self) -> str:
        if self.api == ANTHROPIC:
            system = self.body.get("system") or ""
            return system if isinstance(system, str) else "".join(b.get("text", "") for b in system)
        return "".join(m.get("content") or "" for m in self.messages if m.get("role") in ("system", "developer"))


Responder = Callable[[Request], Reply]


class ModelServer(ThreadingHTTPServer):
    """Answers ``/v1/chat/completions`` (OpenAI) and ``/v1/messages`` (Anthropic) from a script.

    ``script(...)`` queues replies, used in order; when the queue is empty, ``responder`` answers (by
    default: the text "ok"). ``requests`` lists what was received; ``in_flight`` and ``max_in_flight``
    count requests being answered at once."""

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
        api = ANTHROPIC if self.path.rstrip("/").endswith("/messages") else OPENAI
        request = Request(api, self.path, body, {k.lower(): v for k, v in self.headers.items()})
        with self.server.lock:
            self.server.in_flight += 1
            self.server.max_in_flight = max(self.server.max_in_flight, self.server.in_flight)
            self.server.concurrency_seen.append(self.server.in_flight)
        try:
            reply = self.server.next_reply(request)
            if reply.hold is not None:
                reply.hold.wait(reply.hold_seconds)
            if reply.error is not None:
                self._error(api, reply)
            elif request.stream:
                self._stream(api, reply, body)
            else:
                self._json(200, _message(api, reply, body, self.server.next_id()), reply.headers)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with self.server.lock:
                self.server.in_flight -= 1

    def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, api: str, reply: Reply) -> None:
        assert reply.error is not None
        status, payload = _error_body(api, reply.error["kind"], reply.status)
        self._json(status, payload, reply.headers)

    def _stream(self, api: str, reply: Reply, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = (
            _anthropic_events(reply, body, self.server.next_id())
            if api == ANTHROPIC
            else _openai_chunks(reply, body, self.server.next_id())
        )
        for count, (event, data) in enumerate(events):
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


def _model(reply: Reply, body: dict[str, Any]) -> str:
    return reply.model or str(body.get("model") or "loopback-model")


ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _message(api: str, reply: Reply, body: dict[str, Any], number: int) -> dict[str, Any]:
    prompt, completion = reply.usage
    if api == ANTHROPIC:
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        for index, (name, arguments) in enumerate(reply.tool_calls):
            content.append(
                {"type": "tool_use", "id": f"toolu_{number}_{index}", "name": name, "input": _input(arguments)}
            )
        return {
            "id": f"msg_{number}",
            "type": "message",
            "role": "assistant",
            "model": _model(reply, body),
            "content": content,
            "stop_reason": ANTHROPIC_STOP.get(reply.finish, reply.finish),
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": completion},
        }
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{number}_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(reply.tool_calls)
        ]
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": _model(reply, body),
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish, "logprobs": None}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def _input(arguments: str) -> Any:
    """Anthropic sends tool input as an object; text that is not JSON is sent as a string, as a broken model's is."""
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


def _pieces(value: str, size: int = 8) -> list[str]:
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]


def _openai_chunks(reply: Reply, body: dict[str, Any], number: int) -> Iterator[tuple[str | None, Any]]:
    base = {"id": f"chatcmpl-{number}", "object": "chat.completion.chunk", "created": 1_700_000_000}
    base["model"] = _model(reply, body)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    yield None, chunk({"role": "assistant", "content": ""})
    for piece in _pieces(reply.text) if reply.text else []:
        yield None, chunk({"content": piece})
    for index, (name, arguments) in enumerate(reply.tool_calls):
        call = {"index": index, "id": f"call_{number}_{index}", "type": "function"}
        yield None, chunk({"tool_calls": [{**call, "function": {"name": name, "arguments": ""}}]})
        for piece in _pieces(arguments):
            yield None, chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield None, chunk({}, reply.finish)
    if (body.get("stream_options") or {}).get("include_usage"):
        prompt, completion = reply.usage
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        yield None, {**base, "choices": [], "usage": usage}
    yield None, "[DONE]"


def _anthropic_events(reply: Reply, body: dict[str, Any], number: int) -> Iterator[tuple[str | None, Any]]:
    prompt, completion = reply.usage
    message = {
        "id": f"msg_{number}",
        "type": "message",
        "role": "assistant",
        "model": _model(reply, body),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": 1},
    }
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
    for offset, (name, arguments) in enumerate(reply.tool_calls):
        block = {"type": "tool_use", "id": f"toolu_{number}_{offset}", "name": name, "input": {}}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
        for piece in _pieces(arguments):
            delta = {"type": "input_json_delta", "partial_json": piece}
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
        index += 1
    stop = {"stop_reason": ANTHROPIC_STOP.get(reply.finish, reply.finish), "stop_sequence": None}
    yield "message_delta", {"type": "message_delta", "delta": stop, "usage": {"output_tokens": completion}}
    yield "message_stop", {"type": "message_stop"}


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
        question = _first_user_text(request)
        if question in self.overrides:
            found = self.overrides[question]
            return dataclasses.replace(found) if isinstance(found, Reply) else found(request)
        case = self.cases.get(request.last_user_text()) or self.cases.get(question)
        if case is None:
            return text("I don't know.")
        if not _answered_tools(request):
            calls = [(c["tool"], json.dumps(c["args"])) for c in (case.metadata or {}).get("check", []) if "args" in c]
            if not calls and case.expected_tools:
                calls = [(name, json.dumps(_arguments_for(name, case.input))) for name in case.expected_tools]
            if calls:
                return Reply(tool_calls=calls, finish="tool_calls")
        return text(case.expected_output or "Done.")


def _first_user_text(request: Request) -> str:
    for message in request.messages:
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")
    return ""


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

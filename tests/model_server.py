"""A loopback HTTP server that speaks the OpenAI (chat completions, Responses) and Anthropic (messages)
APIs, plain and streamed (SSE), so the real SDK clients build their real response and stream objects."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclasses.dataclass
class Reply:
    """What the model answers next: text and/or tool calls ``(id, name, arguments dict)``."""

    text: str = "4"
    tool_calls: list[tuple[str, str, dict[str, Any]]] = dataclasses.field(default_factory=list)
    finish: str | None = None  # None: the API's own word for "done" (or for a tool call)
    input_tokens: int = 11
    output_tokens: int = 3
    model: str = "test-model-2026"


class ModelServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.respond: Callable[[dict[str, Any]], Reply] | None = None
        """When set, answers each request from its body (concurrent callers), instead of ``replies`` in order."""
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def next_reply(self) -> Reply:
        with self.lock:
            return self.replies.pop(0) if self.replies else Reply()

    def start(self) -> ModelServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def _openai_chat(reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in reply.tool_calls
        ]
    finish = reply.finish or ("tool_calls" if reply.tool_calls else "stop")
    return {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": reply.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": _openai_usage(reply),
    }


def _openai_usage(reply: Reply) -> dict[str, int]:
    total = reply.input_tokens + reply.output_tokens
    return {"prompt_tokens": reply.input_tokens, "completion_tokens": reply.output_tokens, "total_tokens": total}


def _openai_chat_chunks(reply: Reply, body: dict[str, Any]) -> list[tuple[str | None, dict[str, Any] | str]]:
    def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> dict[str, Any]:
        choices = [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]
        out: dict[str, Any] = {
            "id": "chatcmpl-loopback",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": reply.model,
            "choices": choices,
        }
        if usage:
            out["usage"] = usage
        return out

    events: list[Any] = [chunk({"role": "assistant", "content": ""})]
    half = max(1, len(reply.text) // 2)
    for piece in (reply.text[:half], reply.text[half:]):
        if piece:
            events.append(chunk({"content": piece}))
    for index, (call_id, name, arguments) in enumerate(reply.tool_calls):
        text = json.dumps(arguments)
        first = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        events.append(chunk({"tool_calls": [first]}))
        for start in range(0, len(text), 5):
            events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": text[start : start + 5]}}]}))
    events.append(chunk({}, reply.finish or ("tool_calls" if reply.tool_calls else "stop")))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append(chunk({}, usage=_openai_usage(reply)))
    return [(None, e) for e in events] + [(None, "[DONE]")]


def _response_object(reply: Reply) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if reply.text:
        content = [{"type": "output_text", "text": reply.text, "annotations": []}]
        output.append(
            {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": content}
        )
    for call_id, name, arguments in reply.tool_calls:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{call_id}",
                "call_id": call_id,
                "name": name,
                "arguments": json.dumps(arguments),
                "status": "completed",
            }
        )
    truncated = reply.finish in ("length", "max_output_tokens")
    return {
        "id": "resp_loopback",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "incomplete" if truncated else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
        "model": reply.model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": reply.input_tokens,
            "output_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _response_events(reply: Reply, body: dict[str, Any]) -> list[tuple[str | None, dict[str, Any] | str]]:
    final = _response_object(reply)
    started = {**final, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": started, "sequence_number": 0}]
    for piece in (reply.text[: len(reply.text) // 2], reply.text[len(reply.text) // 2 :]):
        if piece:
            events.append(
                {
                    "type": "response.output_text.delta",
                    "item_id": "msg_1",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": piece,
                    "sequence_number": len(events),
                }
            )
    kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    events.append({"type": kind, "response": final, "sequence_number": len(events)})
    return [(e["type"], e) for e in events]


def _anthropic_stop(reply: Reply) -> str:
    if reply.finish in ("length", "max_tokens"):
        return "max_tokens"
    return reply.finish or ("tool_use" if reply.tool_calls else "end_turn")


def _anthropic_message(reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in reply.tool_calls]
    return {
        "id": "msg_loopback",
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": _anthropic_stop(reply),
        "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
    }


def _anthropic_events(reply: Reply, body: dict[str, Any]) -> list[tuple[str | None, dict[str, Any] | str]]:
    start = {**_anthropic_message(reply, body), "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": reply.input_tokens, "output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    index = 0
    if reply.text:
        events.append({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        half = max(1, len(reply.text) // 2)
        for piece in (reply.text[:half], reply.text[half:]):
            if piece:
                events.append(
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
                )
        events.append({"type": "content_block_stop", "index": 0})
        index = 1
    for call_id, name, arguments in reply.tool_calls:
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        text = json.dumps(arguments)
        for at in range(0, len(text), 4):
            delta = {"type": "input_json_delta", "partial_json": text[at : at + 4]}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
        index += 1
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": _anthropic_stop(reply), "stop_sequence": None},
            "usage": {"output_tokens": reply.output_tokens},
        }
    )
    events.append({"type": "message_stop"})
    return [(e["type"], e) for e in events]


ROUTES = {
    "/v1/chat/completions": (_openai_chat, _openai_chat_chunks),
    "/v1/responses": (lambda reply, body: _response_object(reply), _response_events),
    "/v1/messages": (_anthropic_message, _anthropic_events),
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ModelServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        path = self.path.split("?")[0]
        with self.server.lock:
            self.server.requests.append({"path": path, "body": body})
        route = ROUTES.get(path)
        if route is None:
            self.send_error(404)
            return
        reply = self.server.respond(body) if self.server.respond else self.server.next_reply()
        if body.get("stream"):
            self._stream(route[1](reply, body))
        else:
            self._json(route[0](reply, body))

    def _json(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_loopback")
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, events: list[tuple[str | None, dict[str, Any] | str]]) -> None:
        parts = []
        for name, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            parts.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
        payload = "".join(parts).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass

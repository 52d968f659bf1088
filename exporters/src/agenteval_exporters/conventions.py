"""Other instrumentations' spans read as agenteval's own, and the rule that counts each model request once.

Spans of OpenInference, OpenLLMetry (traceloop), an SDK's own tracing or older GenAI releases name the same
things differently (``llm.token_count.prompt``, ``gen_ai.usage.prompt_tokens``, ``openinference.span.kind``,
``tool.name``, ``retrieval.documents.0.document.id``, ...). :func:`derived` adds the current GenAI names it can
derive beside them (listed under ``agenteval.derived``), so the typed columns, the feature query, scorers and
reports see a model call, a tool call or a retrieval whichever instrumentation recorded it. agenteval's own
spans never need it: the encoder asks only for spans of other scopes, and a span with nothing to derive costs
one set intersection.

Counted once: an SDK that traces itself (the ``anthropic`` SDK), the official OpenAI instrumentation,
OpenInference or OpenLLMetry add a model-call span of their own under an ``@llm_call`` (or around the SDK's).
The rule: usage belongs to the innermost model-call span, the one for the actual request. A model-call span
that another model-call span starts under is marked ``agenteval.model_call.wraps`` when that child starts
(:func:`mark_wrapper`, run by agenteval's span processor); ``@llm_call`` then records no tokens on it, and the
store's ``wraps_model_call`` column keeps it out of token sums and model-call counts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import get_current_span

from agenteval_instrumentation import attributes as A

OWN_SCOPES = frozenset(("agenteval_instrumentation", A.RUNNER_SCOPE))
"""Scopes whose spans already carry every name agenteval reads."""

MODEL_OPERATIONS = frozenset((A.OPERATION_CHAT, "text_completion", "generate_content"))

ALIASES: dict[str, tuple[str, ...]] = {
    A.GEN_AI_PROVIDER_NAME: ("gen_ai.system", "llm.provider", "llm.system"),
    A.GEN_AI_REQUEST_MODEL: ("llm.request.model_name", "llm.request.model", "llm.model_name"),
    A.GEN_AI_RESPONSE_MODEL: ("llm.response.model_name", "llm.response.model", "llm.model_name"),
    A.GEN_AI_USAGE_INPUT_TOKENS: ("gen_ai.usage.prompt_tokens", "llm.token_count.prompt", "llm.usage.prompt_tokens"),
    A.GEN_AI_USAGE_OUTPUT_TOKENS: (
        "gen_ai.usage.completion_tokens",
        "llm.token_count.completion",
        "llm.usage.completion_tokens",
    ),
    A.GEN_AI_RESPONSE_FINISH_REASONS: ("llm.finish_reason", "anthropic.message.stop_reason"),
    A.GEN_AI_TOOL_NAME: ("tool.name",),
    A.GEN_AI_TOOL_CALL_ID: ("tool.id", "tool_call.id"),
}
"""The current name -> older or other instrumentations' names for the same value, in order of preference."""

SPAN_KINDS: dict[str, dict[str, str]] = {
    "openinference.span.kind": {
        "LLM": A.OPERATION_CHAT,
        "TOOL": A.OPERATION_EXECUTE_TOOL,
        "RETRIEVER": A.OPERATION_RETRIEVAL,
        "AGENT": A.OPERATION_INVOKE_AGENT,
        "EMBEDDING": "embeddings",
    },
    "traceloop.span.kind": {"tool": A.OPERATION_EXECUTE_TOOL, "agent": A.OPERATION_INVOKE_AGENT},
    "llm.request.type": {"chat": A.OPERATION_CHAT, "completion": "text_completion"},
}
"""Attributes that name an operation in another vocabulary, and their values' operation names."""

CONTENT: dict[str, dict[str, tuple[str, ...]]] = {
    A.OPERATION_EXECUTE_TOOL: {
        A.GEN_AI_TOOL_CALL_ARGUMENTS: ("input.value", "traceloop.entity.input"),
        A.GEN_AI_TOOL_CALL_RESULT: ("output.value", "traceloop.entity.output"),
        A.GEN_AI_TOOL_NAME: ("traceloop.entity.name",),
    },
    A.OPERATION_INVOKE_AGENT: {A.GEN_AI_AGENT_NAME: ("agent.name", "traceloop.entity.name")},
}
"""Per operation, names whose meaning depends on it (``input.value`` is a tool's arguments on a tool span)."""

_KNOWN = frozenset(
    [name for names in ALIASES.values() for name in names]
    + list(SPAN_KINDS)
    + [A.GEN_AI_RETRIEVAL_DOCUMENTS, "retrieval.documents.0.document.id"]
)
_DOCUMENT_ID = "retrieval.documents.{}.document.id"


def derived(attributes: Mapping[str, Any]) -> Mapping[str, Any]:
    """``attributes`` with the current GenAI names derived from other vocabularies added (a new dict), or
    ``attributes`` itself when there is nothing to derive."""
    if _KNOWN.isdisjoint(attributes):
        return attributes
    out = dict(attributes)
    added: list[str] = []

    def put(name: str, value: Any) -> None:
        if value is not None and name not in out:
            out[name] = value
            added.append(name)

    for name, sources in ALIASES.items():
        if name not in out:
            put(name, next((out[s] for s in sources if s in out), None))
    reasons = out.get(A.GEN_AI_RESPONSE_FINISH_REASONS)
    if isinstance(reasons, str):
        out[A.GEN_AI_RESPONSE_FINISH_REASONS] = [reasons]
    for source, values in SPAN_KINDS.items():
        kind = out.get(source)
        if isinstance(kind, str) and kind in values:
            put(A.GEN_AI_OPERATION_NAME, values[kind])
    operation = out.get(A.GEN_AI_OPERATION_NAME)
    for name, sources in CONTENT.get(operation if isinstance(operation, str) else "", {}).items():
        put(name, next((out[s] for s in sources if s in out), None))
    if A.RETRIEVAL_DOCUMENT_IDS not in out:
        put(A.RETRIEVAL_DOCUMENT_IDS, _document_ids(out))
        if A.RETRIEVAL_DOCUMENT_IDS in out:
            put(A.GEN_AI_OPERATION_NAME, A.OPERATION_RETRIEVAL)
    if added:
        out[A.DERIVED] = added
    return out


def _document_ids(attributes: Mapping[str, Any]) -> list[str] | None:
    documents = attributes.get(A.GEN_AI_RETRIEVAL_DOCUMENTS)
    if isinstance(documents, str):
        try:
            parsed = json.loads(documents)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            ids = [str(d["id"]) for d in parsed if isinstance(d, dict) and d.get("id") is not None]
            return ids or None
    ids = []
    while (doc_id := attributes.get(_DOCUMENT_ID.format(len(ids)))) is not None:
        ids.append(str(doc_id))
    return ids or None


def is_model_call(attributes: Mapping[str, Any]) -> bool:
    """Whether a span's attributes (as set at its start) say it is a model call, in any vocabulary."""
    operation = attributes.get(A.GEN_AI_OPERATION_NAME)
    if operation is not None:
        return operation in MODEL_OPERATIONS
    return attributes.get("openinference.span.kind") == "LLM" or attributes.get("llm.request.type") == "chat"


def mark_wrapper(span: Any, parent_context: Context | None) -> None:
    """When ``span`` (just started) is a model call under a model-call span still open, mark that parent
    :data:`~agenteval_instrumentation.attributes.WRAPS_MODEL_CALL`: the request is counted on ``span``."""
    attributes = getattr(span, "attributes", None)
    if not attributes or not is_model_call(attributes):
        return
    parent = get_current_span(parent_context)
    parent_attributes = getattr(parent, "attributes", None)
    if parent_attributes and parent.is_recording() and is_model_call(parent_attributes):
        parent.set_attribute(A.WRAPS_MODEL_CALL, True)

"""Secrets masked in the spans ``agenteval collect`` receives from other instrumentations, as the decorators mask
what they capture (:mod:`agenteval_instrumentation.masking`): an attribute named like a secret
(``http.request.header.authorization``, ``api_key``) is ``***``, and the secrets found in any text value (a URL
with ``?api-key=``, a prompt quoting a key, a command line with ``--password=``) are masked in place, in the
attributes, the events' attributes (an exception's message and stack), the status message and the resource.

agenteval's own spans are left as they come: their content was masked where it was captured, or the sending
application turned masking off (``configure_capture(mask_secrets=False)``). The common case, a batch with nothing
to mask, is told in one pass: the batch's text values are joined and scanned once, and only a batch where that
finds a secret is masked value by value (a value the joined scan leaves alone, each scan leaves alone).
"""

from __future__ import annotations

from itertools import chain
from typing import Any

from agenteval_exporters.conventions import OWN_SCOPES
from agenteval_instrumentation.masking import MASK, is_secret_key, mask_text

NOT_SECRET_ATTRIBUTES = frozenset(("session.id", "session.previous_id"))
"""OpenTelemetry's names for a user's session (a conversation), which end like a web session's cookie."""


def mask_received(
    scopes: list[str | None],
    attributes: list[dict[str, Any]],
    events: list[list[dict[str, Any]] | None],
    status_messages: list[str | None],
    resources: list[str],
) -> None:
    """The spans of a request, given as columns, masked in place; agenteval's own spans are skipped."""
    if sum(map(scopes.count, OWN_SCOPES)) == len(scopes):  # agenteval's own spans alone: counted past in C
        return
    foreign = [i for i, scope in enumerate(scopes) if scope not in OWN_SCOPES]
    dicts = [attributes[i] for i in foreign]
    dicts += [event["attributes"] for i in foreign for event in events[i] or () if event.get("attributes")]
    _mask_dicts(dicts)
    for i in foreign:
        if status_messages[i]:
            status_messages[i] = mask_text(status_messages[i])  # type: ignore[arg-type]
    masked = {resource: mask_text(resource) for resource in {resources[i] for i in foreign}}
    for i in foreign:
        resources[i] = masked[resources[i]]


def _mask_dicts(dicts: list[dict[str, Any]]) -> None:
    """Attribute dicts masked in place, after one scan of all their names and values finds something to mask."""
    secret_names = [name for name in frozenset(chain.from_iterable(dicts)) if _secret_name(name)]
    values = "\n".join(map(str, chain.from_iterable(map(dict.values, dicts))))
    if not secret_names and mask_text(values) == values:
        return
    for attributes in dicts:
        for name, value in attributes.items():
            attributes[name] = MASK if _secret_name(name) else _masked_value(value)


def _secret_name(name: str) -> bool:
    return is_secret_key(name) and name not in NOT_SECRET_ATTRIBUTES


def _masked_value(value: Any) -> Any:
    """An attribute value with the secrets in its text masked: a string, or each string of a list."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, (list, tuple)):
        return [mask_text(item) if isinstance(item, str) else item for item in value]
    return value

"""Secrets masked in the spans ``agenteval collect`` receives from other instrumentations, as the decorators mask
what they capture (:mod:`agenteval_instrumentation.masking`): an attribute named like a secret
(``http.request.header.authorization``, ``api_key``) is ``***``, and the secrets found in any text value (a URL
with ``?api-key=``, a prompt quoting a key, a command line with ``--password=``) are masked in place, in the
attributes, the events' attributes (an exception's message and stack), the status message and the resource; inside
maps and arrays (OTLP's kvlist and array values) at any depth, as the decorators mask dicts and lists. The resource
is masked through its attributes, so its column stays JSON.

agenteval's own spans are left as they come: their content was masked where it was captured, or the sending
application turned masking off (``configure_capture(mask_secrets=False)``). The common case, a batch with nothing
to mask, is told in one pass: the batch's text values are joined and scanned once, and only a batch where that
finds a secret is masked value by value (a value the joined scan leaves alone, each scan leaves alone; the strings
inside maps and arrays are joined as they are, since a repr escapes them).
"""

from __future__ import annotations

import json
from itertools import chain, compress
from operator import not_
from typing import Any

from agenteval_exporters.conventions import OWN_SCOPES
from agenteval_exporters.encode import resource_json
from agenteval_instrumentation.masking import MASK, is_secret_key, mask_setting, mask_text

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
    masked = {resource: _masked_resource(resource) for resource in {resources[i] for i in foreign}}
    for i in foreign:
        resources[i] = masked[resources[i]]


def _masked_resource(resource: str) -> str:
    """A resource's JSON text masked as attributes are, through its attributes: masking the text itself left it no
    longer JSON where a secret name held a number, a list or a map (``{"token": ***}``)."""
    attributes = json.loads(resource)
    return resource_json(attributes) if _mask_dicts([attributes]) else resource


def _mask_dicts(dicts: list[dict[str, Any]]) -> bool:
    """Attribute dicts masked in place, at any depth (a map or a list value: OTLP's kvlist and array), after one
    scan of all their names and texts finds something to mask; True when it did."""
    values = list(chain.from_iterable(map(dict.values, dicts)))
    names: list[str] = []
    texts: list[str] = []
    # The strings inside maps and lists as they are, not only their repr, which escapes them ("\ntoken=" as "\\n...").
    nested = list(map(_CONTAINERS.__contains__, map(type, values)))
    if True in nested:
        _names_and_texts(compress(values, nested), names, texts)
        values = list(compress(values, map(not_, nested)))
    joined = "\n".join(chain(map(str, values), texts))
    if not any(map(_secret_name, frozenset(chain(chain.from_iterable(dicts), names)))) and mask_text(joined) == joined:
        return False
    for attributes in dicts:
        for name, value in attributes.items():
            attributes[name] = MASK if _secret_name(name) else mask_setting("", value)
    return True


_CONTAINERS = frozenset((dict, list, tuple))


def _names_and_texts(values: Any, names: list[str], texts: list[str]) -> None:
    """The strings among ``values`` (maps and lists, at any depth) added to ``texts``, and the maps' keys to
    ``names``."""
    for value in values:
        kind = type(value)
        if kind is str:
            texts.append(value)
        elif kind is dict:
            names += value
            _names_and_texts(value.values(), names, texts)
        elif kind is list or kind is tuple:
            _names_and_texts(value, names, texts)


def _secret_name(name: str) -> bool:
    return is_secret_key(name) and name not in NOT_SECRET_ATTRIBUTES

"""Secrets masked in the spans of other instrumentations before they are stored: those ``agenteval collect``
receives, and those an agent's other instrumentations make in a run (the exporter's own encoding), as the decorators
mask what they capture (:mod:`agenteval_instrumentation.masking`): an attribute named like a secret
(``http.request.header.authorization``, ``api_key``) is ``***``, and the secrets found in any text value (a URL
with ``?api-key=``, a prompt quoting a key, a command line with ``--password=``) are masked in place, in the
attributes, the events' attributes (an exception's message and stack), the status message and the resource; inside
maps and arrays (OTLP's kvlist and array values) at any depth, as the decorators mask dicts and lists. Every span's
resource is masked (``OTEL_RESOURCE_ATTRIBUTES`` and a process detector's command line are nobody's capture), through
its attributes, so the column stays JSON.

agenteval's own spans are otherwise left as they come: their content was masked where it was captured, or the
application turned masking off (``configure_capture(mask_secrets=False)``). The common case, a batch with nothing
to mask, is told in one pass: the batch's text values are joined and scanned once, and only a batch where that
finds a secret is masked value by value (a value the joined scan leaves alone, each scan leaves alone; the strings
inside maps and arrays are joined as they are, since a repr escapes them).
"""

from __future__ import annotations

import functools
import json
from itertools import chain, compress
from operator import not_
from typing import Any

from agenteval_instrumentation.masking import MASK, is_secret_key, mask_setting, mask_text

from .conventions import OWN_SCOPES

NOT_SECRET_ATTRIBUTES = frozenset(("session.id", "session.previous_id"))
"""OpenTelemetry's names for a user's session (a conversation), which end like a web session's cookie."""


def mask_received(
    scopes: list[str | None],
    attributes: list[dict[str, Any]],
    events: list[list[dict[str, Any]] | None],
    status_messages: list[str | None],
    resources: list[str],
) -> bool:
    """Spans given as columns masked in place: the resources of all, the rest of other instrumentations' spans
    (their attributes must be dicts); agenteval's own are skipped. True when something other than a resource may
    have been masked (False: the attributes, events and status messages are as they were)."""
    mask_resources(resources)
    if sum(map(scopes.count, OWN_SCOPES)) == len(scopes):  # agenteval's own spans alone: counted past in C
        return False
    foreign = [i for i, scope in enumerate(scopes) if scope not in OWN_SCOPES]
    dicts = [attributes[i] for i in foreign]
    dicts += [event["attributes"] for i in foreign for event in events[i] or () if event.get("attributes")]
    masked = _mask_dicts(dicts)
    for i in foreign:
        if status_messages[i] and (message := mask_text(status_messages[i])) != status_messages[i]:  # type: ignore[arg-type]
            status_messages[i], masked = message, True
    return masked


def mask_resources(resources: list[str]) -> None:
    """Resources (JSON text, one a span) masked in place: a batch's few distinct ones, once each."""
    masked = {r: m for r in set(resources) if (m := _masked_resource(r)) != r}
    if masked:
        resources[:] = [masked.get(r, r) for r in resources]


CACHED_RESOURCE_CHARS = 4096
"""Resources up to this long are masked once and remembered: a process's spans share one resource, and the exporter
sees it again in every batch. A longer one (sent to ``collect`` by someone else) is masked anew each time, so the
cache never holds megabytes of another's text."""


def _masked_resource(resource: str) -> str:
    return _masked_resource_cached(resource) if len(resource) <= CACHED_RESOURCE_CHARS else _mask_resource(resource)


@functools.lru_cache(maxsize=64)
def _masked_resource_cached(resource: str) -> str:
    return _mask_resource(resource)


def _mask_resource(resource: str) -> str:
    """A resource's JSON text masked as attributes are, through its attributes: masking the text itself left it no
    longer JSON where a secret name held a number, a list or a map (``{"token": ***}``)."""
    from .encode import resource_json  # encode masks with this module: imported once both are loaded

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
    secret = frozenset(filter(_secret_name, frozenset(chain(chain.from_iterable(dicts), names))))
    if not secret and mask_text(joined) == joined:
        return False
    # Each name judged once (above), and numbers left alone: a request of 1.5 million attributes with one secret
    # name among them judged every name again and passed every number through mask_setting, ~5 us an attribute.
    for attributes in dicts:
        for name, value in attributes.items():
            if name in secret:
                attributes[name] = MASK
            elif type(value) not in _PLAIN:
                attributes[name] = mask_setting("", value)
    return True


_PLAIN = frozenset((int, float, bool, type(None)))
"""Values that hold no text to mask."""


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

"""Model names (``PROVIDER/MODEL``), the providers agenteval speaks to, and what of a model's settings is recorded."""

from __future__ import annotations

import dataclasses
import os
import urllib.parse

from agenteval_instrumentation.masking import MASK, is_secret_parameter, mask_text

from ..errors import UsageError


@dataclasses.dataclass(frozen=True)
class Provider:
    """A provider's SDK, the extra that installs it, and the environment variables its SDK reads."""

    name: str
    extra: str
    base_url_env: str
    api_key_env: str


PROVIDERS = {
    "openai": Provider("openai", "openai", "OPENAI_BASE_URL", "OPENAI_API_KEY"),
    "anthropic": Provider("anthropic", "anthropic", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"),
}
"""The providers by name. Any OpenAI-compatible server (vLLM, Ollama, llama.cpp's server, LM Studio, a gateway)
is ``openai`` with a base URL."""


@dataclasses.dataclass(frozen=True)
class ModelName:
    """``openai/gpt-4o-mini``: the provider, then the model as that provider names it (which may hold slashes)."""

    provider: str
    model: str

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"

    @property
    def sdk(self) -> Provider:
        return PROVIDERS[self.provider]


def parse_model_name(text: str, option: str = "--model") -> ModelName:
    """``PROVIDER/MODEL`` as a :class:`ModelName`; anything else is a :class:`UsageError` naming ``option``."""
    provider, sep, model = text.strip().partition("/")
    if not sep or not provider or not model.strip():
        raise UsageError(
            f"{option} {text!r}: expected PROVIDER/MODEL, e.g. openai/gpt-4o-mini or anthropic/claude-3-5-haiku-latest "
            "(an OpenAI-compatible server: openai/MODEL with --base-url)"
        )
    if provider.lower() not in PROVIDERS:
        raise UsageError(
            f"{option} {text!r}: unknown provider {provider!r}; known: {', '.join(PROVIDERS)} "
            "(an OpenAI-compatible server is openai/MODEL with --base-url)"
        )
    return ModelName(provider.lower(), model.strip())


def effective_base_url(name: ModelName, base_url: str | None) -> str | None:
    """The base URL calls go to: the one given, else the SDK's environment variable, else None (the provider's)."""
    return base_url or os.environ.get(name.sdk.base_url_env) or None


def without_query(url: str | None) -> tuple[str | None, dict[str, str]]:
    """A base URL without its query, and the query's parameters: what the SDK clients take as ``base_url`` and
    ``default_query``. Given in the base URL, a query broke every call: the SDKs append a request's path to the
    base URL's text, so ``/v1?api-version=2024-10-21`` asked for ``/v1/`` with the path inside the query."""
    if not url:
        return url, {}
    parts = urllib.parse.urlsplit(url)
    if not parts.query:
        return url, {}
    query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    return urllib.parse.urlunsplit(parts._replace(query="", fragment="")), query


def _secret_parameter(name: str, value: str) -> bool:
    return is_secret_parameter(name) or mask_text(value) != value


def recordable_url(url: str | None) -> str | None:
    """A base URL as it may be stored, and as it keys the response cache and the rate limiter: without user,
    password or fragment, where keys sometimes hide, and with its query sorted, the value of every parameter that
    holds or looks like a secret masked. Two deployments told apart by their query (``?api-version=``) are kept
    apart, and a run's record says which one was called; two API keys for one deployment give the same URL, and
    no key is kept."""
    if not url:
        return None
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    recorded = urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))
    _, query = without_query(url)
    if not query:
        return recorded
    shown = sorted((name, MASK if _secret_parameter(name, value) else value) for name, value in query.items())
    return f"{recorded}?{urllib.parse.urlencode(shown)}"


def holds_masked(url: str | None) -> bool:
    """Whether ``url``, as :func:`recordable_url` gave it, had a secret masked: it cannot be called as it is."""
    return bool(url) and MASK in urllib.parse.unquote(url or "")


def as_stored(recorded: str | None, stored: str | None) -> str | None:
    """``recorded`` (a base URL as :func:`recordable_url` gives it) in the form ``stored``, a run's record of it,
    was written in, so a resume compares like with like: without its query when ``stored`` has none and is the rest
    of it, as runs recorded a base URL before its query was kept (2026-12); else as it is. Another scheme, host,
    port or path, or another query beside a stored one, still differs. Only for such a record (see
    ``agenteval.run._options.keeps_queries``): in one recorded since, an URL without a query had none."""
    if recorded and stored and "?" not in stored and recorded.partition("?")[0] == stored:
        return stored
    return recorded

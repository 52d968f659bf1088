"""Models through their official SDKs: ``PROVIDER/MODEL`` names, any OpenAI-compatible server, typed responses,
retries that honour ``Retry-After``, a shared per-model limiter, and a response cache for development."""

from typing import TYPE_CHECKING

from agenteval_instrumentation._lazy import lazy_exports

if TYPE_CHECKING:
    from ._cache import ResponseCache
    from ._limiter import AdaptiveLimiter, calls_waiting, limiter_for, watch_waiting
    from ._model import MissingAPIKey, MissingSDK, Model
    from ._names import PROVIDERS, ModelName, parse_model_name
    from ._request import ModelRequest
    from ._retry import RetryPolicy
    from ._simulator import ModelUserSimulator
    from ._types import FINISH_REASONS, ModelResponse, ToolRequest, Usage, Wait

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._cache": ("ResponseCache",),
        "._limiter": ("AdaptiveLimiter", "calls_waiting", "limiter_for", "watch_waiting"),
        "._model": ("MissingAPIKey", "MissingSDK", "Model"),
        "._names": ("PROVIDERS", "ModelName", "parse_model_name"),
        "._request": ("ModelRequest",),
        "._retry": ("RetryPolicy",),
        "._simulator": ("ModelUserSimulator",),
        "._types": ("FINISH_REASONS", "ModelResponse", "ToolRequest", "Usage", "Wait"),
    },
)

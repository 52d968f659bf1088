"""The dashboard: a local web app over the store (``agenteval dashboard``), with the optional extra
``agenteval[dashboard]`` (Starlette, Jinja2, uvicorn).

Names load on first use: ``serve`` checks the extra is installed and says how to install it when not.
"""

from typing import TYPE_CHECKING

from agenteval_instrumentation._lazy import lazy_exports

if TYPE_CHECKING:
    from ._review import ReviewError, labels_jsonl, record_verdict
    from ._serve import MissingExtra, serve

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._review": ("ReviewError", "labels_jsonl", "record_verdict"),
        "._serve": ("MissingExtra", "serve"),
    },
)
